#!/usr/bin/env bash
# Install everything the project needs on a fresh machine (Python 3.11, CPU).
# torch goes first: the CPU build of 2.13.0 is pinned so that nothing pulls the
# multi-GB CUDA build. torch-scatter / torch-sparse compile from source against
# the installed torch, so they need --no-build-isolation (pip caches the wheels).
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install --quiet torch==2.13.0
python -m pip install --quiet -e ".[test]"
if [ "${1:-}" = "--scatter" ]; then
    python -m pip install --quiet --no-build-isolation torch-scatter torch-sparse
fi
