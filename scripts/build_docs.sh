#!/usr/bin/env bash
# Build the documentation site into site/ with warnings as errors.
# Installs the docs extra (after the CPU build of torch, as scripts/setup.sh
# does, so that nothing pulls the CUDA build), then runs mkdocs build --strict.
# The build itself fetches nothing: no fonts, scripts, inventories or plugins
# from the network (see mkdocs.yml). Open site/index.html, or serve site/.
# --no-install skips the installs (for a quick rebuild).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" != "--no-install" ]; then
    python -m pip install --quiet torch==2.13.0
    python -m pip install --quiet -e ".[docs]"
fi
# Material for MkDocs prints an end-of-life banner on every build; it is not a warning.
export NO_MKDOCS_2_WARNING=1
python -m mkdocs build --strict
