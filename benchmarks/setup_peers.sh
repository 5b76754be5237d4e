#!/usr/bin/env bash
# Creates the venvs of the peers we benchmark against (never in the project's deps). Both
# hold this project too, so one process can time both sides, and torch 2.13.0 (the CPU
# build: an unpinned torch pulls a multi-GB CUDA one).
#
#   .bench-venv         datatrove 0.10.1 (+ what PEERS.md found it needs offline), spaCy,
#                       huggingface_hub >= 1.6, this project with its pipeline extra
#                       (trafilatura 2.x for both sides); no transformers (bench_pipeline
#                       builds its tokenizer.json with tokenizers and sentencepiece)
#   .bench-venv-dolma   dolma 1.2.1 with the boto pins of PEERS.md (bench_exact_dedup)
#   .bench-venv-loader  mosaicml-streaming and litdata (torchvision removed and replaced by
#                       a stand-in module, since its PyPI wheel does not import beside the
#                       CPU torch); run the loader benchmark with LITDATA_DISABLE_VERSION_CHECK=1
#
# Two venvs because the peers do not install together: mosaicml-streaming pins
# transformers < 5, hence huggingface_hub < 1.0, while datatrove 0.10.1 imports
# huggingface_hub >= 1.6 names at import time.
#
# Re-running is cheap: a venv whose stamp matches this script and pyproject.toml, and whose
# peers import, is left alone (FORCE=1 reinstalls anyway). A .bench-venv from the older
# one-venv setup is fixed in place (loader peers, their transformers < 5 and the torchvision
# stand-in removed, huggingface_hub upgraded).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
constraint=$(mktemp)
trap 'rm -f "$constraint"' EXIT
echo "torch==2.13.0" > "$constraint"
stamp=$(cat benchmarks/setup_peers.sh pyproject.toml | sha256sum | cut -c1-16)

# ready VENV IMPORTS: true when VENV was set up by this version of the script and imports work
ready() {
    [ "${FORCE:-0}" != 1 ] && [ "$(cat "$1/.peers-stamp" 2>/dev/null)" = "$stamp" ] \
        && "$1/bin/python" -c "import $2" >/dev/null 2>&1
}

# start VENV: creates VENV if missing, upgrades pip, installs the CPU torch
start() {
    test -x "$1/bin/python" || $PY -m venv "$1"
    "$1/bin/python" -m pip install --quiet --upgrade pip wheel
    "$1/bin/python" -m pip install --quiet -c "$constraint" "torch==2.13.0"
}

# .bench-venv: datatrove (bench_clean, bench_pipeline)
V=.bench-venv
if ready $V "datatrove.pipeline.filters, datatrove.pipeline.extractors, spacy, sentencepiece, tokenizers, apache_beam, resiliparse"; then
    echo "$V: up to date"
else
    start $V
    PIP="$V/bin/python -m pip"
    # the older one-venv setup put the loader peers here, and their transformers < 5, which
    # pins huggingface_hub < 1.0; nothing else here uses transformers
    $PIP uninstall --quiet -y mosaicml-streaming litdata transformers 2>/dev/null || true
    site=$($V/bin/python -c "import site; print(site.getsitepackages()[0])")
    if grep -qs "stand-in" "$site/torchvision/__init__.py"; then
        rm -rf "$site/torchvision"  # the loader peers' stand-in; nothing here needs torchvision
    fi
    $PIP install --quiet -c "$constraint" "datatrove[processing]==0.10.1" spacy lxml_html_clean \
        warcio faust-cchardet python-magic orjson "huggingface_hub>=1.6" \
        sentencepiece tokenizers
    # with the pipeline extra: bench_clean and bench_pipeline run our stages here (Beam,
    # resiliparse, ...). It also lifts trafilatura to the project's >= 2.0 over datatrove's
    # < 1.12 pin (pip warns): under 1.11 our `fast=True` is swallowed by extract()'s
    # **kwargs, and datatrove's extractor only calls extract(), which 2.x keeps, so both
    # sides of bench_pipeline run the same trafilatura.
    $PIP install --quiet -c "$constraint" -e ".[pipeline]"
    echo "$stamp" > $V/.peers-stamp
    echo "$V: peers ready (datatrove)"
fi

# .bench-venv-loader: the streaming loaders
V=.bench-venv-loader
if LITDATA_DISABLE_VERSION_CHECK=1 ready $V "streaming, litdata"; then
    echo "$V: up to date"
else
    start $V
    PIP="$V/bin/python -m pip"
    $PIP install --quiet -c "$constraint" mosaicml-streaming litdata
    $PIP uninstall --quiet -y torchvision 2>/dev/null || true
    site=$($V/bin/python -c "import site; print(site.getsitepackages()[0])")
    mkdir -p "$site/torchvision/datasets" "$site/torchvision/transforms"
    echo '__version__ = "0.0-standin"  # benchmark venv only: see benchmarks/setup_peers.sh' > "$site/torchvision/__init__.py"
    printf 'class VisionDataset:\n    def __init__(self, *args, **kwargs):\n        pass\n' > "$site/torchvision/datasets/__init__.py"
    : > "$site/torchvision/transforms/__init__.py"
    printf 'def to_tensor(x):\n    raise NotImplementedError("torchvision stand-in")\n' > "$site/torchvision/transforms/functional.py"
    $PIP install --quiet -c "$constraint" -e .
    echo "$stamp" > $V/.peers-stamp
    echo "$V: peers ready (mosaicml-streaming, litdata; run with LITDATA_DISABLE_VERSION_CHECK=1)"
fi

# .bench-venv-dolma: dolma 1.2.1 (bench_exact_dedup), alone: its boto pins (PEERS.md) keep
# pip from backtracking for ever; NLTK's punkt cannot download here, which `dolma dedupe`
# does not need
V=.bench-venv-dolma
if ready $V "dolma"; then
    echo "$V: up to date"
else
    test -x "$V/bin/python" || $PY -m venv "$V"
    "$V/bin/python" -m pip install --quiet --upgrade pip wheel
    "$V/bin/python" -m pip install --quiet "dolma==1.2.1" "boto3==1.26.76" "botocore==1.29.76" "aiobotocore==2.5.0"
    echo "$stamp" > $V/.peers-stamp
    echo "$V: peers ready (dolma 1.2.1)"
fi
