#!/usr/bin/env bash
# Set-up and the main job on the embedded tiny demo model: builds phonellm (with the cgo inference engine) and
# runs `phonellm demo`, which generates a tiny Qwen3.5-shaped checkpoint and LoRA adapter and runs the whole
# pipeline on them, printing each stage's result.
# Usage: bash scripts/demo.sh [--dir DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
command -v gcc >/dev/null 2>&1 || { export DEBIAN_FRONTEND=noninteractive; apt-get update -qq && apt-get install -y -qq gcc g++ >/dev/null; }
mkdir -p bin
echo "building phonellm (the first build compiles the inference engine: a few minutes)…" >&2
go build -o bin/phonellm ./cmd/phonellm
exec bin/phonellm demo "$@"
