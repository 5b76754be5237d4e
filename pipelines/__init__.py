"""Beam pipeline graphs, the job runner and the commands (``python -m pipelines.<command>``).

Importing the package imports Beam without its notices about optional Google Cloud
clients ("apitools not found", ...), which concern no command here (pipelines/cli.py).
"""

from pipelines.cli import import_beam_quietly as _import_beam_quietly

_import_beam_quietly()
