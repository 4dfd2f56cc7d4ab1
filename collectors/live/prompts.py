"""Synthetic prompts with the trace's exact token counts and prefix structure, and token-count scaling.

The live driver cannot send the trace's real text (traces hold counts, not tokens), so it builds deterministic
token-id prompts that reproduce what the engine's prefix cache sees (DESIGN §3, "prefix identity"):

- a **shared system prefix** of ``prefix_tokens[p]`` ids, identical for every program with the same
  ``shared_prefix_id`` (the ids come from a generator seeded by the run seed and the prefix id, so two
  programs with prefixes of different lengths share the shorter one);
- then the program's **append-only history**: turn t's prompt = the first ``keep`` ids of turn t-1's context
  (turn t-1's prompt followed by the ids it generated) + fresh "observation" ids, exactly ``input_tokens`` long,
  with ``keep = min(max(reused_tokens, prefix), input_tokens, len(context))``. As in the simulator, the shared
  prefix is always kept.

The id at the first fresh position always differs from the id the previous context had there (and, on turn 0,
from every other program's), so the longest common prefix between consecutive prompts is exactly ``keep`` and
between two programs' first prompts exactly the shared prefix. Ids are drawn from ``[lo, hi)``, by default
``[1000, 31000)``, which avoids the special tokens at the low end of every common vocabulary and fits any
vocabulary of at least 32k ids.

Text mode (servers that refuse token ids) renders each id as one common English word with a leading space; most
BPE tokenizers map each such word to one token, but the count is approximate and the server's reported
``prompt_tokens`` is the one recorded.
"""

from __future__ import annotations

import dataclasses
import hashlib

import numpy as np

from agentreplay.sim.workload import Workload

#: Default safe id range for a 32k vocabulary: clear of the special/control ids at the low end.
DEFAULT_VOCAB_SIZE = 32000
SAFE_MARGIN = 1000

_WORDS_TEXT = (
    "the of and to in is was for that on as with by he at from his an were are which this be has had not but "
    "one their its first after new two they who have her she been other when all during into there time may "
    "more school years over only would some most also city can about between part well state such these world "
    "three many under where while then later both made known called being through same before united number "
    "used team since around each both film high season group area game even like out because however several "
    "early named second year north house south family would until national both another people including life "
    "work did him them name way will during went main series century began along day small large took west "
    "park long still left could four then east member best country very home near member side built own last "
    "government public based each river local since music club again order major five form town line end "
    "final just played general church college band album company place what released show book war game"
)
WORDS: tuple[str, ...] = tuple(dict.fromkeys(_WORDS_TEXT.split()))  # unique, order kept


def id_range(vocab_size: int = DEFAULT_VOCAB_SIZE, margin: int = SAFE_MARGIN) -> tuple[int, int]:
    """``[lo, hi)`` of safe ids for a vocabulary of ``vocab_size`` ids (``margin`` kept clear at both ends)."""
    if vocab_size <= 2 * margin + 16:
        raise ValueError(f"vocab_size {vocab_size} leaves no safe ids with a margin of {margin}")
    return margin, vocab_size - margin


def _stable_hash(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


def render_text(ids: list[int]) -> str:
    """Text for ``ids``: one word (leading space) per id; approximately one token per word on BPE tokenizers."""
    return "".join(" " + WORDS[i % len(WORDS)] for i in ids)


class ProgramPrompts:
    """One program's append-only context. ``next_prompt`` then ``add_output`` once per turn, in order."""

    def __init__(self, p: int, prefix: list[int], rng: np.random.Generator, lo: int, hi: int) -> None:
        self.p = p
        self.prefix = prefix
        self.rng = rng
        self.lo, self.hi = lo, hi
        self.context: list[int] = []
        self.turns = 0

    def _fresh(self, n: int) -> list[int]:
        return self.rng.integers(self.lo, self.hi, size=n).tolist() if n > 0 else []

    def next_prompt(self, input_tokens: int, reused_tokens: int) -> tuple[list[int], int]:
        """The next prompt (exactly ``input_tokens`` ids) and how many leading ids it keeps from the context."""
        span = self.hi - self.lo
        if self.turns == 0:
            base = self.prefix[:input_tokens]
        else:
            keep = min(max(int(reused_tokens), len(self.prefix)), int(input_tokens), len(self.context))
            base = self.context[:keep]
        fresh = self._fresh(int(input_tokens) - len(base))
        if fresh:
            if self.turns == 0:  # distinct per program: first prompts of two programs share only the prefix
                fresh[0] = self.lo + self.p % span
            elif len(base) < len(self.context) and fresh[0] == self.context[len(base)]:
                fresh[0] = self.lo + (fresh[0] - self.lo + 1) % span
        return base + fresh, len(base)

    def placeholder_output(self, n: int) -> list[int]:
        """Ids standing in for ``n`` generated tokens when the server does not return them."""
        return self._fresh(n)

    def add_output(self, prompt: list[int], output_ids: list[int]) -> None:
        """Record the finished turn: the context becomes ``prompt + output_ids``."""
        self.context = list(prompt) + list(output_ids)
        self.turns += 1


class PromptBuilder:
    """Deterministic prompts for every program of ``workload`` (same workload + seed = same ids)."""

    def __init__(self, workload: Workload, *, seed: int = 0, vocab_size: int = DEFAULT_VOCAB_SIZE) -> None:
        self.w = workload
        self.seed = int(seed)
        self.lo, self.hi = id_range(vocab_size)
        need: dict[str, int] = {}
        for pid, n in zip(workload.prefix_ids, workload.prefix_tokens.tolist(), strict=True):
            if pid is not None:
                need[pid] = max(need.get(pid, 0), int(n))
        self._prefixes = {
            pid: np.random.default_rng([self.seed, 0, _stable_hash(pid)]).integers(self.lo, self.hi, size=n).tolist()
            for pid, n in need.items()
        }

    def prefix(self, p: int) -> list[int]:
        """Program ``p``'s shared-prefix ids (empty when it has no ``shared_prefix_id``)."""
        pid = self.w.prefix_ids[p]
        if pid is None:
            return []
        return self._prefixes[pid][: int(self.w.prefix_tokens[p])]

    def program(self, p: int) -> ProgramPrompts:
        return ProgramPrompts(p, self.prefix(p), np.random.default_rng([self.seed, 1, p]), self.lo, self.hi)


def _round(x: np.ndarray, f: float) -> np.ndarray:
    return np.floor(x.astype(np.float64) * f + 0.5).astype(np.int64)


def scale_workload(w: Workload, factor: float) -> Workload:
    """Token counts times ``factor`` (half-up rounding) so a small engine can run a subset of the trace.

    Input and output stay >= 1; reuse stays <= this input and <= the previous turn's scaled context (input +
    output); the shared prefix stays <= the program's smallest scaled input. ``factor == 1`` returns ``w``.
    """
    if factor <= 0:
        raise ValueError(f"token scale must be > 0, got {factor}")
    if factor == 1:
        return w
    inp = np.maximum(_round(w.input_tokens, factor), 1)
    out = np.maximum(_round(w.output_tokens, factor), 1)
    reuse = np.minimum(_round(w.reused_tokens, factor), inp)
    prev_ctx = np.concatenate([[0], inp[:-1] + out[:-1]])
    first = np.zeros(len(inp), dtype=bool)
    first[w.turn_start[:-1]] = True
    reuse = np.where(first, np.minimum(reuse, inp), np.minimum(reuse, prev_ctx))
    min_inp = np.minimum.reduceat(inp, w.turn_start[:-1])
    prefix = np.minimum(_round(w.prefix_tokens, factor), min_inp)
    return dataclasses.replace(w, input_tokens=inp, output_tokens=out, reused_tokens=reuse, prefix_tokens=prefix)
