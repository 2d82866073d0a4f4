#!/usr/bin/env bash
# Regenerates both comparison tables, benchmarks/results/faithfulness.md and
# benchmarks/results/cost.md (about 35 min on 2 CPU cores; run it on an idle
# machine: the cost table compares timings). Arguments go to both scripts,
# e.g. --quick for a smoke run or --datasets BA-Shapes.
set -euo pipefail
cd "$(dirname "$0")/.."
python benchmarks/faithfulness.py "$@"
python benchmarks/cost.py "$@"
