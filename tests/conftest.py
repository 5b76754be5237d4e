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
    """A path under ../shared/data. If it is absent the test fails under ``make test``
    (``TOKENFACTORY_REQUIRE_SHARED=1``: CI must not pass by skipping) and is skipped,
    with the reason, elsewhere."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        message = f"shared test data not present: {path} (set TOKENFACTORY_SHARED_DATA to its folder)"
        if os.environ.get("TOKENFACTORY_REQUIRE_SHARED") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return path


@pytest.fixture
def beam_options() -> PipelineOptions:
    """FnApiRunner: the DirectRunner would try to download the Prism runner."""
    return PipelineOptions(["--runner=FnApiRunner"])


@pytest.fixture(autouse=True)
def _root_log_level():
    """A test that runs ``pipelines.run`` sets the root logger's level (``--log-level
    ERROR``); later tests that read warnings with ``caplog`` would see none. Restored
    after every test."""
    root = logging.getLogger()
    level = root.level
    yield
    root.setLevel(level)


@pytest.fixture(autouse=True)
def _no_signal_left():
    """A test that interrupts ``pipelines.run.main`` (a signal, or one raised by hand)
    leaves ``pipelines.interrupts`` holding it (the command's exit code needs it after the
    run); a later test calling ``run_job`` directly would stop as interrupted. Cleared
    after every test."""
    yield
    from pipelines import interrupts

    interrupts._State.signum, interrupts._State.quiet = None, False
    interrupts._restore_stderr()
    logging.disable(logging.NOTSET)
