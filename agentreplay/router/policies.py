"""Routers: which instance a released call goes to. One small class per policy, a name-keyed registry.

Every router sees the call (program, prompt, reuse) and the instances' load; it returns an index. A call sent
to another instance than the program's previous call is an *affinity break* (counted by the orchestrator for
every router); session affinity with an inter-instance link makes the move a KV transfer
(``Request.migrate_from``), otherwise the new instance re-prefills whatever it does not have cached.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from agentreplay.request import Request
from agentreplay.sim.config import RouterConfig
from agentreplay.sim.instance import Instance


@dataclass(slots=True)
class RouterStats:
    migrations_with_transfer: int = 0  #: session-affinity moves that transfer KV between instances


class Router(Protocol):
    name: str
    stats: RouterStats

    def pick(self, r: Request, instances: Sequence[Instance], now: float) -> int: ...


def _load(inst: Instance, metric: str) -> int:
    return inst.outstanding if metric == "requests" else inst.outstanding_tokens


def least_loaded(instances: Sequence[Instance], metric: str = "requests") -> int:
    """Index of the instance with the least load; ties to the lowest index (deterministic)."""
    loads = [_load(inst, metric) for inst in instances]
    return loads.index(min(loads))


class RoundRobin:
    """Instances in turn, whatever their load (Kubernetes service / vLLM production-stack default)."""

    name = "round-robin"

    def __init__(self, cfg: RouterConfig) -> None:
        self._next = 0
        self.stats = RouterStats()

    def pick(self, r: Request, instances: Sequence[Instance], now: float) -> int:
        i = self._next % len(instances)
        self._next += 1
        return i


class LeastLoaded:
    """Fewest outstanding requests (queued + running), or fewest outstanding tokens (``load_metric``)."""

    name = "least-loaded"

    def __init__(self, cfg: RouterConfig) -> None:
        self.metric = cfg.load_metric
        self.stats = RouterStats()

    def pick(self, r: Request, instances: Sequence[Instance], now: float) -> int:
        return least_loaded(instances, self.metric)


class SessionAffinity:
    """Program -> home instance (chosen least-loaded at its first call); later calls go home unless home has
    more than ``affinity_max_outstanding`` requests, in which case the call goes to the least-loaded instance,
    which becomes the new home (an affinity break; the KV moves over ``inter_instance_gbps`` if configured).
    The sticky-session routing of vLLM production-stack's session router and llm-d's session affinity."""

    name = "session-affinity"

    def __init__(self, cfg: RouterConfig) -> None:
        self.cfg = cfg
        self.stats = RouterStats()

    def pick(self, r: Request, instances: Sequence[Instance], now: float) -> int:
        home = r.info.home
        if home < 0:
            return least_loaded(instances, self.cfg.load_metric)
        if instances[home].outstanding < self.cfg.affinity_max_outstanding:
            return home
        target = least_loaded(instances, self.cfg.load_metric)
        if target != home and self.cfg.inter_instance_gbps > 0:
            r.migrate_from = home
            self.stats.migrations_with_transfer += 1
        return target


class CacheAware:
    """SGLang router ``cache_aware`` policy (sgl-model-gateway ``policies/cache_aware.rs``).

    Per instance an approximate prefix tree of the prompts routed there (here: per program, the longest
    prompt sent, plus the shared prefixes seen, plus for block-hash traces the prefix-chain segments routed there;
    tokens instead of characters). If the load is imbalanced
    (``max - min > balance_abs_threshold`` and ``max > min * balance_rel_threshold``, load = outstanding
    requests) the call goes to the least-loaded instance; otherwise to the instance with the longest prefix
    match if ``match / prompt > cache_threshold``, else to the instance with the smallest tree (most free
    cache). The routed prompt is inserted into the chosen instance's tree. Every ``eviction_interval_s`` each
    tree larger than ``max_tree_tokens`` drops least-recently-used programs until it fits."""

    name = "cache-aware"

    def __init__(self, cfg: RouterConfig) -> None:
        self.cfg = cfg
        self.stats = RouterStats()
        self.trees: list[OrderedDict[int, int]] = []
        self.prefixes: list[set[Any]] = []
        self.chains: list[set[int]] = []  #: block-hash prefix segments routed to each instance (never pruned)
        self.sizes: list[int] = []
        self._next_prune = cfg.eviction_interval_s

    def _ensure(self, n: int) -> None:
        while len(self.trees) < n:
            self.trees.append(OrderedDict())
            self.prefixes.append(set())
            self.chains.append(set())
            self.sizes.append(0)

    def _prune(self, now: float) -> None:
        while now >= self._next_prune:
            self._next_prune += self.cfg.eviction_interval_s
            for i, tree in enumerate(self.trees):
                while self.sizes[i] > self.cfg.max_tree_tokens and tree:
                    _, n = tree.popitem(last=False)
                    self.sizes[i] -= n

    def match(self, i: int, r: Request) -> int:
        """Tokens of ``r``'s prompt that instance ``i``'s tree would match."""
        m = 0
        prefix_key = r.info.prefix_key
        if prefix_key is not None and prefix_key in self.prefixes[i]:
            m = r.info.prefix_tokens
        seen = self.trees[i].get(r.program, 0)
        if seen:
            m = max(m, min(seen, r.reuse))
        if r.chain_ids:  # block-hash prefixes: the leading chain segments routed here before
            segs = self.chains[i]
            for k in range(len(r.chain_ids)):
                if r.chain_ids[k] not in segs:
                    break
                m = max(m, r.chain_ends[k])
        return min(m, r.prompt)

    def pick(self, r: Request, instances: Sequence[Instance], now: float) -> int:
        n = len(instances)
        self._ensure(n)
        self._prune(now)
        loads = [inst.outstanding for inst in instances]
        lo, hi = min(loads), max(loads)
        if hi - lo > self.cfg.balance_abs_threshold and hi > lo * self.cfg.balance_rel_threshold:
            target = loads.index(lo)
        else:
            matches = [self.match(i, r) for i in range(n)]
            best = max(range(n), key=lambda i: (matches[i], -i))
            if r.prompt and matches[best] / r.prompt > self.cfg.cache_threshold:
                target = best
            else:
                target = min(range(n), key=lambda i: (self.sizes[i], i))
        tree = self.trees[target]
        old = tree.pop(r.program, 0)
        tree[r.program] = max(old, r.prompt)
        self.sizes[target] += tree[r.program] - old
        if r.info.prefix_key is not None:
            self.prefixes[target].add(r.info.prefix_key)
        if r.chain_ids:
            self.chains[target].update(r.chain_ids)
        return target


class Autellix:
    """Autellix's load balancer (Autellix §5): calls with long prompts go to the program's previous instance
    (data locality: its KV is there), short ones to the least-loaded instance. The threshold
    (``autellix_long_tokens``, default 2048 prompt tokens) is ours; agent prompts are almost all long, so on
    agent traces this behaves like session affinity without a capacity limit."""

    name = "autellix"

    def __init__(self, cfg: RouterConfig) -> None:
        self.cfg = cfg
        self.stats = RouterStats()

    def pick(self, r: Request, instances: Sequence[Instance], now: float) -> int:
        if r.info.home >= 0 and r.prompt > self.cfg.autellix_long_tokens:
            return r.info.home
        return least_loaded(instances, self.cfg.load_metric)


class VllmDP:
    """vLLM's front-end balancer over the DP ranks of one deployment (one API server):
    ``vllm/v1/engine/core_client.py`` ``DPLBAsyncMPClient.get_core_engine_for_request``. Each rank's score is
    ``max(in-flight, waiting + running)``, plus ``waiting * 6 * max(0, kv_usage - 0.5)`` when it has waiting
    requests (KV pressure); the lowest score wins, scanning from a start index that moves on by one after every
    pick, so equal scores go round-robin. The counts come from the coordinator (``vllm/v1/engine/coordinator.py``,
    published at most every 100 ms, and bumped locally on every pick); here they are read exact and current, and
    with one client the in-flight count equals waiting + running."""

    name = "vllm-dp"

    def __init__(self, cfg: RouterConfig) -> None:
        self._start = 0
        self.stats = RouterStats()

    def pick(self, r: Request, instances: Sequence[Instance], now: float) -> int:
        n = len(instances)
        best, best_score = 0, float("inf")
        for i in range(n):
            idx = (self._start + i) % n
            inst = instances[idx]
            waiting = len(inst.sched.waiting)
            score = float(waiting + len(inst.sched.running))
            if waiting:
                usage = inst.pool.used_blocks / inst.pool.num_blocks
                score += waiting * 6.0 * max(0.0, usage - 0.5)
            if score < best_score:
                best, best_score = idx, score
        self._start = (self._start + 1) % n
        return best


ROUTERS: dict[str, Callable[[RouterConfig], Router]] = {
    "round-robin": RoundRobin, "least-loaded": LeastLoaded, "session-affinity": SessionAffinity,
    "cache-aware": CacheAware, "autellix": Autellix, "vllm-dp": VllmDP,
}


def make_router(cfg: RouterConfig | str) -> Router:
    rc = RouterConfig(policy=cfg) if isinstance(cfg, str) else cfg  # type: ignore[arg-type]
    try:
        return ROUTERS[rc.policy](rc)
    except KeyError:
        raise ValueError(f"unknown router {rc.policy!r}; known: {sorted(ROUTERS)}") from None
