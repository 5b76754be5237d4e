#!/usr/bin/env bash
# Creates .bench-venv with the peers we benchmark against (never in the project's deps):
# datatrove 0.10.1 (+ what PEERS.md found it needs offline), mosaicml-streaming and
# litdata (torch pinned to the CPU build; torchvision removed and replaced by a stand-in
# module, since its PyPI wheel does not import beside the CPU torch). This project is
# installed too, so one process can time both sides.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
test -x .bench-venv/bin/python || $PY -m venv .bench-venv
PIP=".bench-venv/bin/python -m pip"
constraint=$(mktemp)
echo "torch==2.13.0" > "$constraint"
$PIP install --quiet --upgrade pip wheel
$PIP install --quiet "torch==2.13.0"
$PIP install --quiet -c "$constraint" "datatrove[processing]==0.10.1" spacy lxml_html_clean \
    warcio faust-cchardet python-magic orjson mosaicml-streaming litdata
$PIP uninstall --quiet -y torchvision || true
site=$(.bench-venv/bin/python -c "import site; print(site.getsitepackages()[0])")
mkdir -p "$site/torchvision/datasets" "$site/torchvision/transforms"
echo '__version__ = "0.0-standin"  # benchmark venv only: see benchmarks/setup_peers.sh' > "$site/torchvision/__init__.py"
printf 'class VisionDataset:\n    def __init__(self, *args, **kwargs):\n        pass\n' > "$site/torchvision/datasets/__init__.py"
: > "$site/torchvision/transforms/__init__.py"
printf 'def to_tensor(x):\n    raise NotImplementedError("torchvision stand-in")\n' > "$site/torchvision/transforms/functional.py"
$PIP install --quiet -c "$constraint" -e .
echo "peers ready in .bench-venv (run the loader benchmark with LITDATA_DISABLE_VERSION_CHECK=1)"
