#!/usr/bin/env bash
# A virtual environment for benchmarks/walks_dig.py: DIG (dive-into-graphs)
# 1.1.0 next to this machine's torch, PyG and this project (the venv sees the
# system site-packages). DIG's pinned dependencies would replace them, so it
# goes in without them, with the captum 0.2.0 it imports and rdkit; nothing
# outside .venv-dig changes. Run setup.sh first.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m venv --system-site-packages .venv-dig
.venv-dig/bin/python -m pip install --quiet --no-deps dive-into-graphs==1.1.0 captum==0.2.0
.venv-dig/bin/python -m pip install --quiet rdkit
.venv-dig/bin/python -c "from dig.xgraph.method import GNN_LRP" && echo "DIG ready: .venv-dig/bin/python benchmarks/walks_dig.py"
