"""Registered collectors for measured serving and agent runs (end-to-end measurements)."""

from __future__ import annotations

from collectors.measured.agent_jct import AgentJctCollector
from collectors.measured.inference_perf import InferencePerfCollector
from collectors.measured.llmperf import LLMPerfCollector
from collectors.measured.mlperf import MLPerfCollector
from collectors.measured.vllm_run import VllmRunCollector

RUN_COLLECTORS = [
    VllmRunCollector(),
    LLMPerfCollector(),
    AgentJctCollector(),
    MLPerfCollector(),
    InferencePerfCollector(),
]
