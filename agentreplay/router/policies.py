"""Routers (a policy axis, :mod:`agentreplay.policy.registry`): which instance a released call goes to. One small
class per policy, registered in :data:`ROUTERS` (``[router] policy``, CLI ``--router``); built as
``cls(params)``. A router sees the instances through :class:`InstanceView` (their load), nothing else.

Every router sees the call (program, prompt, reuse) and the instances' load; it returns an index. A call sent
to another instance than the program's previous call is an *affinity break* (counted by the orchestrator for
every router); session affinity with an inter-instance link makes the move a KV transfer
(``Request.migrate_from``), otherwise the new instance re-prefills whatever it does not have cached.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from agentreplay.kv.segment_pool import SegmentPool
from agentreplay.policy.registry import Entry, NoParams, Registry, check
from agentreplay.request import Request

LoadMetric = Literal["requests", "tokens"]


class QueuesView(Protocol):
    """An instance scheduler's queues, as a router reads them."""

    @property
    def waiting(self) -> list[Request]: ...

    @property
    def running(self) -> list[Request]: ...


class InstanceView(Protocol):
    """What a router (or the admission hook) may read of an instance: its load and its KV pool."""

    @property
    def outstanding(self) -> int: ...

    @property
    def outstanding_tokens(self) -> int: ...

    @property
    def sched(self) -> Any: ...  # QueuesView (``waiting``, ``running``)

    @property
    def pool(self) -> SegmentPool: ...


@dataclass(slots=True)
class RouterStats:
    migrations_with_transfer: int = 0  #: session-affinity moves that transfer KV between instances


class Router(Protocol):
    name: str
    stats: RouterStats

    def pick(self, r: Request, instances: Sequence[InstanceView], now: float) -> int: ...


@dataclass(frozen=True, slots=True)
class LoadParams:
    load_metric: LoadMetric = "requests"  #: outstanding requests or outstanding tokens

    def __post_init__(self) -> None:
        _check_metric(self.load_metric)


def _check_metric(metric: str) -> None:
    check(metric in ("requests", "tokens"), "load_metric", metric, "one of ['requests', 'tokens']")


@dataclass(frozen=True, slots=True)
class AffinityParams:
    load_metric: LoadMetric = "requests"  #: how the home (and a new home) is chosen, as least-loaded
    affinity_max_outstanding: int = 64  #: leave home when it has more requests than this
    inter_instance_gbps: float = 0.0  #: KV transfer bandwidth between instances on a move, GB/s (0 = re-prefill)

    def __post_init__(self) -> None:
        _check_metric(self.load_metric)
        check(self.affinity_max_outstanding >= 1, "affinity_max_outstanding", self.affinity_max_outstanding, ">= 1")
        check(self.inter_instance_gbps >= 0, "inter_instance_gbps", self.inter_instance_gbps, ">= 0")


@dataclass(frozen=True, slots=True)
class CacheAwareParams:
    """SGLang router defaults (sgl-model-gateway ``CacheAware`` policy as logged at start-up)."""

    cache_threshold: float = 0.3  #: minimum prefix match ratio to follow the cache
    balance_abs_threshold: int = 64  #: imbalance if max - min load exceeds this ...
    balance_rel_threshold: float = 1.5  #: ... and max load exceeds min load times this
    eviction_interval_s: float = 60.0  #: LRU pruning period of the approximate trees, seconds
    max_tree_tokens: int = 2**26  #: per-instance tree size kept after pruning, tokens

    def __post_init__(self) -> None:
        check(0 <= self.cache_threshold <= 1, "cache_threshold", self.cache_threshold, "in [0, 1]")
        check(self.balance_abs_threshold >= 0, "balance_abs_threshold", self.balance_abs_threshold, ">= 0")
        check(self.balance_rel_threshold >= 1, "balance_rel_threshold", self.balance_rel_threshold, ">= 1")
        check(self.eviction_interval_s > 0, "eviction_interval_s", self.eviction_interval_s, "> 0")
        check(self.max_tree_tokens >= 1, "max_tree_tokens", self.max_tree_tokens, ">= 1")


@dataclass(frozen=True, slots=True)
class AutellixParams:
    load_metric: LoadMetric = "requests"  #: how short calls are placed, as least-loaded
    autellix_long_tokens: int = 2048  #: prompt tokens above which a call goes to the program's previous instance

    def __post_init__(self) -> None:
        _check_metric(self.load_metric)
        check(self.autellix_long_tokens >= 0, "autellix_long_tokens", self.autellix_long_tokens, ">= 0")


def _load(inst: InstanceView, metric: str) -> int:
    return inst.outstanding if metric == "requests" else inst.outstanding_tokens


def least_loaded(instances: Sequence[InstanceView], metric: str = "requests") -> int:
    """Index of the instance with the least load; ties to the lowest index (deterministic)."""
    loads = [_load(inst, metric) for inst in instances]
    return loads.index(min(loads))


class RoundRobin:
    """Instances in turn, whatever their load (Kubernetes service / vLLM production-stack default)."""

    name = "round-robin"

    def __init__(self, params: NoParams | None = None) -> None:
        self._next = 0
        self.stats = RouterStats()

    def pick(self, r: Request, instances: Sequence[InstanceView], now: float) -> int:
        i = self._next % len(instances)
        self._next += 1
        return i


class LeastLoaded:
    """Fewest outstanding requests (queued + running), or fewest outstanding tokens (``load_metric``)."""

    name = "least-loaded"

    def __init__(self, params: LoadParams) -> None:
        self.metric = params.load_metric
        self.stats = RouterStats()

    def pick(self, r: Request, instances: Sequence[InstanceView], now: float) -> int:
        return least_loaded(instances, self.metric)


class SessionAffinity:
    """Program -> home instance (chosen least-loaded at its first call); later calls go home unless home has
    more than ``affinity_max_outstanding`` requests, in which case the call goes to the least-loaded instance,
    which becomes the new home (an affinity break; the KV moves over ``inter_instance_gbps`` if configured).
    The sticky-session routing of vLLM production-stack's session router and llm-d's session affinity."""

    name = "session-affinity"

    def __init__(self, params: AffinityParams) -> None:
        self.params = params
        self.stats = RouterStats()

    def pick(self, r: Request, instances: Sequence[InstanceView], now: float) -> int:
        home = r.info.home
        if home < 0:
            return least_loaded(instances, self.params.load_metric)
        if instances[home].outstanding < self.params.affinity_max_outstanding:
            return home
        target = least_loaded(instances, self.params.load_metric)
        if target != home and self.params.inter_instance_gbps > 0:
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

    def __init__(self, params: CacheAwareParams) -> None:
        self.params = params
        self.stats = RouterStats()
        self.trees: list[OrderedDict[int, int]] = []
        self.prefixes: list[set[Any]] = []
        self.chains: list[set[int]] = []  #: block-hash prefix segments routed to each instance (never pruned)
        self.sizes: list[int] = []
        self._next_prune = params.eviction_interval_s

    def _ensure(self, n: int) -> None:
        while len(self.trees) < n:
            self.trees.append(OrderedDict())
            self.prefixes.append(set())
            self.chains.append(set())
            self.sizes.append(0)

    def _prune(self, now: float) -> None:
        while now >= self._next_prune:
            self._next_prune += self.params.eviction_interval_s
            for i, tree in enumerate(self.trees):
                while self.sizes[i] > self.params.max_tree_tokens and tree:
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

    def pick(self, r: Request, instances: Sequence[InstanceView], now: float) -> int:
        n = len(instances)
        self._ensure(n)
        self._prune(now)
        loads = [inst.outstanding for inst in instances]
        lo, hi = min(loads), max(loads)
        if hi - lo > self.params.balance_abs_threshold and hi > lo * self.params.balance_rel_threshold:
            target = loads.index(lo)
        else:
            matches = [self.match(i, r) for i in range(n)]
            best = max(range(n), key=lambda i: (matches[i], -i))
            if r.prompt and matches[best] / r.prompt > self.params.cache_threshold:
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

    def __init__(self, params: AutellixParams) -> None:
        self.params = params
        self.stats = RouterStats()

    def pick(self, r: Request, instances: Sequence[InstanceView], now: float) -> int:
        if r.info.home >= 0 and r.prompt > self.params.autellix_long_tokens:
            return r.info.home
        return least_loaded(instances, self.params.load_metric)


class VllmDP:
    """vLLM's front-end balancer over the DP ranks of one deployment (one API server):
    ``vllm/v1/engine/core_client.py`` ``DPLBAsyncMPClient.get_core_engine_for_request``. Each rank's score is
    ``max(in-flight, waiting + running)``, plus ``waiting * 6 * max(0, kv_usage - 0.5)`` when it has waiting
    requests (KV pressure); the lowest score wins, scanning from a start index that moves on by one after every
    pick, so equal scores go round-robin. The counts come from the coordinator (``vllm/v1/engine/coordinator.py``,
    published at most every 100 ms, and bumped locally on every pick); here they are read exact and current, and
    with one client the in-flight count equals waiting + running."""

    name = "vllm-dp"

    def __init__(self, params: NoParams | None = None) -> None:
        self._start = 0
        self.stats = RouterStats()

    def pick(self, r: Request, instances: Sequence[InstanceView], now: float) -> int:
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


ROUTERS: Registry[Router] = Registry("router", [
    Entry("round-robin", RoundRobin, NoParams, "instances in turn"),
    Entry("least-loaded", LeastLoaded, LoadParams, "fewest outstanding requests (or tokens)"),
    Entry("session-affinity", SessionAffinity, AffinityParams, "a program's calls go home unless it is full"),
    Entry("cache-aware", CacheAware, CacheAwareParams, "longest prefix match unless imbalanced (SGLang router)"),
    Entry("autellix", Autellix, AutellixParams, "long prompts go home, short ones least-loaded (Autellix)"),
    Entry("vllm-dp", VllmDP, NoParams, "vLLM's front-end balancer over DP ranks"),
])
