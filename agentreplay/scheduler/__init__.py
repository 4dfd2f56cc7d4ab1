"""The program-aware batch scheduler of one instance: vLLM v1's step (:mod:`.scheduler`), the decode cohort
(:mod:`.cohort`), and two policy axes, the waiting-queue order (:mod:`.queue`) and the preemption victim
(:mod:`.victim`)."""
