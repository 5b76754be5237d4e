"""Shim for Beam's ``--setup_file`` staging (the metadata lives in pyproject.toml).

    python -m pipelines.run --config ... --runner=DataflowRunner --setup_file=./setup.py

Beam builds an sdist of the project with it and installs that on every worker; the
alternative is the worker image from the Dockerfile (``--sdk_container_image``).
"""

from setuptools import setup

setup()
