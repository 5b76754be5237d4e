"""Beam pipeline graphs, the job runner and the commands (``python -m pipelines.<command>``).

Importing the package imports Beam without its notices about optional Google Cloud
clients ("apitools not found", ...), which concern no command here (pipelines/cli.py).
"""

import time as _time

STARTED_MONOTONIC = _time.monotonic()  # the run's total wall time counts from here (pipelines.run)

from pipelines.cli import import_beam_quietly as _import_beam_quietly  # noqa: E402

_import_beam_quietly()

# DoFn specs and option views memoised while graphs are built (pipelines/graph_memo.py);
# TOKENFACTORY_GRAPH_MEMO=0 leaves Beam's own functions in place.
import os as _os

if _os.environ.get("TOKENFACTORY_GRAPH_MEMO", "1") != "0":
    from pipelines.graph_memo import install as _install_graph_memo

    _install_graph_memo()
