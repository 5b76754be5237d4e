"""Shared fixtures: the third-party data in ../shared/data and Beam options for tests."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
from apache_beam.options.pipeline_options import PipelineOptions

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("TOKENFACTORY_SHARED_DATA", ROOT.parent / "shared" / "data"))

logging.getLogger("apache_beam").setLevel(logging.WARNING)


def shared(*parts: str) -> Path:
    """A path under ../shared/data; the test is skipped (with the reason) if it is absent."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"shared test data not present: {path}")
    return path


@pytest.fixture
def beam_options() -> PipelineOptions:
    """FnApiRunner: the DirectRunner would try to download the Prism runner."""
    return PipelineOptions(["--runner=FnApiRunner"])
