"""Scheduling and KV-retention policies, one small class per policy, one Protocol per axis, name registries.

Axes: queue order (:mod:`.queue`), preemption victim (:mod:`.victim`), tool-gap retention (:mod:`.retention`),
and the bundles that match published systems (:mod:`.presets`). Routers live in :mod:`agentreplay.router.policies`.
"""
