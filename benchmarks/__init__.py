"""Benchmarks: each module is ``python -m benchmarks.<name>`` (docs/BENCHMARKS.md)."""

from __future__ import annotations

import os
from pathlib import Path


def shared_data() -> Path:
    """The shared data folder: ``$TOKENFACTORY_SHARED_DATA``, else ``../shared/data`` beside
    the checkout (as ``tests/conftest.py`` finds it)."""
    given = os.environ.get("TOKENFACTORY_SHARED_DATA")
    return Path(given) if given else Path(__file__).resolve().parents[2] / "shared" / "data"


SHARED_DATA = shared_data()
