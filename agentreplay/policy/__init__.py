"""Policies across the simulator's modules: the registry every policy axis uses (:mod:`.registry`) and the
presets that bundle one policy per axis to match published serving systems (:mod:`.presets`).

The axes live with the mechanism they steer: the router and the admission hook in :mod:`agentreplay.router`,
the queue order and the preemption victim in :mod:`agentreplay.scheduler`, tool-gap retention in
:mod:`agentreplay.kv.retention`.
"""
