"""What the commands that run no pipeline do first: logging set up, Beam imported quietly.

The model-training commands (``pipelines.anomaly``, ``pipelines.quality``,
``pipelines.labeller``) and ``pipelines.tiers`` run no Beam pipeline, but they read the
job config (whose stage sections are defined beside their Beam transforms) and the
stages' outputs through Beam's filesystems, so they import Beam. Importing Beam logs
notices about optional Google Cloud clients ("apitools not found", BigQuery storage) that
concern none of them; ``setup_logging`` imports Beam with them held back. Such a command
imports its Beam-using modules after calling it (inside its command function).
"""

from __future__ import annotations

import logging
from typing import Optional

_LOGGER = logging.getLogger(__name__)

__all__ = ["import_beam_quietly", "setup_logging"]


def setup_logging(level: int = logging.INFO, fmt: Optional[str] = None) -> None:
    """Configures the root logger (``fmt``: a logging format, default logging's own),
    keeps Beam's own loggers at WARNING and imports Beam without its import-time notices."""
    if fmt is None:
        logging.basicConfig(level=level, force=True)
    else:
        logging.basicConfig(level=level, force=True, format=fmt)
    logging.getLogger("apache_beam").setLevel(max(level, logging.WARNING))
    import_beam_quietly()


def import_beam_quietly() -> None:
    """Imports Beam with its import-time notices held back (``pipelines/__init__`` does,
    so no command of the package prints them)."""
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        import apache_beam  # noqa: F401  (its import logs on the root logger: held back here)
    finally:
        logging.disable(previous)
