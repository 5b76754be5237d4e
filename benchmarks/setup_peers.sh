#!/usr/bin/env bash
# Creates .bench-venv with the peers we benchmark against (never in the project's deps).
# datatrove 0.10.1 + what PEERS.md found it needs offline; our project installed too so
# one process can time both.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
test -x .bench-venv/bin/python || $PY -m venv .bench-venv
.bench-venv/bin/python -m pip install --quiet --upgrade pip wheel
.bench-venv/bin/python -m pip install --quiet "torch==2.13.0"
.bench-venv/bin/python -m pip install --quiet "datatrove[processing]==0.10.1" spacy lxml_html_clean \
    warcio faust-cchardet python-magic orjson
.bench-venv/bin/python -m pip install --quiet -e .
echo "peers ready in .bench-venv"
