#!/usr/bin/env bash
# Single-GPU check of the production backends, within 8 minutes: builds a random ~0.5B
# Qwen2-style model, starts vLLM, generates, syncs FSDP2 weights over CUDA IPC, checks
# train/infer parity, runs one DeepSpeed and one Megatron step, prints a results table.
# Needs the `vllm`, `deepspeed` and `megatron` extras on a CUDA machine. Arguments go to
# bench/gpu_check.py (e.g. --quick, --skip megatron, --dry-run, --markdown FILE).
set -euo pipefail
cd "$(dirname "$0")/.."
export RAY_USAGE_STATS_ENABLED=0 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
PY=${PYTHON:-python}
if [[ -x .venv/bin/python && -z "${PYTHON:-}" ]]; then PY=.venv/bin/python; fi
# the whole check is bounded: a hung backend must not hold the GPU machine
exec timeout --signal=TERM --kill-after=20 "${GPU_CHECK_TIMEOUT_S:-480}" "$PY" bench/gpu_check.py "$@"
