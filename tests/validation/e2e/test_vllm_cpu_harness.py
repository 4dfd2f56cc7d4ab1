"""The vLLM CPU harness's engine-core priority (benchmarks/vllm_cpu/engine.py), on a stand-in process group."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks.vllm_cpu.engine import ENGINE_CORE_NICE, deprioritize_engine_core

SLEEP = "import time; time.sleep(60)"
#: a stand-in API server: starts its "engine core" child (same process group), then waits
SERVER = (
    f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {SLEEP!r}, 'VLLM::EngineCore']); {SLEEP}"
)


def _children(pid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(d.name))
    return out


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc (Linux)")
def test_only_the_servers_engine_core_is_deprioritized() -> None:
    """The process titled like vLLM's engine core in the server's process group gets the niceness; the server,
    and a process with the same title in another group, keep theirs."""
    server = subprocess.Popen([sys.executable, "-c", SERVER], start_new_session=True)
    stranger = subprocess.Popen([sys.executable, "-c", SLEEP, "VLLM::EngineCore"], start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while not (core := _children(server.pid)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(core) == 1, "the stand-in server did not start its child"
        assert deprioritize_engine_core(server.pid) == core
        mine = os.getpriority(os.PRIO_PROCESS, 0)
        assert os.getpriority(os.PRIO_PROCESS, core[0]) == ENGINE_CORE_NICE
        assert os.getpriority(os.PRIO_PROCESS, server.pid) == mine
        assert os.getpriority(os.PRIO_PROCESS, stranger.pid) == mine
    finally:
        for p in (server, stranger):
            os.killpg(p.pid, 9)
            p.wait()
