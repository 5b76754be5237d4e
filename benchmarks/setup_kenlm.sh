#!/usr/bin/env bash
# The KenLM peer of bench_anomaly (benchmarks/kenlm_peer.py), into a benchmark venv
# (default .bench-venv; never a project dependency): the `kenlm` Python module (queries)
# and `lmplz` (the 5-gram estimator, which the wheel does not ship), both built from the
# kenlm 0.3.0 sdist on PyPI. Needs cmake, a C++ compiler and Boost (program_options,
# system, thread) and zlib headers: on Debian `apt-get install libboost-program-options-dev
# libboost-system-dev libboost-thread-dev libboost-test-dev zlib1g-dev libbz2-dev liblzma-dev`
# (cmake stops with "Could NOT find Boost" without them). Re-running with both present does nothing.
#
#   benchmarks/setup_kenlm.sh [VENV]
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${1:-.bench-venv}
PY="$VENV/bin/python"
if "$PY" -c "import kenlm" 2>/dev/null && [ -x "$VENV/bin/lmplz" ]; then
    echo "kenlm and lmplz already in $VENV"; exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$PY" -m pip download "kenlm==0.3.0" --no-deps --no-binary :all: --no-build-isolation -d "$work" -q
tar xzf "$work"/kenlm-0.3.0.tar.gz -C "$work"
src="$work/kenlm-0.3.0"
CMAKE_BUILD_PARALLEL_LEVEL=${JOBS:-2} "$PY" -m pip install --no-build-isolation -q "$src"
mkdir -p "$src/build"
(cd "$src/build" && cmake .. -DCMAKE_BUILD_TYPE=Release > /dev/null && make -j"${JOBS:-2}" lmplz > /dev/null)
cp "$src/build/bin/lmplz" "$VENV/bin/lmplz"
"$PY" -c "import kenlm" && echo "kenlm and lmplz installed in $VENV"
