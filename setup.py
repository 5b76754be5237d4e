"""Shim for Beam's ``--setup_file`` staging (the metadata lives in pyproject.toml).

    python -m pipelines.run --config ... --runner=DataflowRunner --setup_file=./setup.py

Beam builds an sdist of the project with it and installs that on every worker, without
extras: the ``pipeline`` extra's dependencies must already be on the worker (or be listed
with ``--requirements_file``). The alternative is the worker image from the Dockerfile
(``--sdk_container_image``), which installs ``.[pipeline]``.
"""

from setuptools import setup

setup()
