"""Model files: local copies of remote models, checksums, clear load errors."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from typing import Any

import fsspec

_LOGGER = logging.getLogger(__name__)

__all__ = ["CACHE_DIR", "CURRENT", "ModelError", "local_copy", "read_current", "read_version_meta", "sha256_file"]

CACHE_DIR = os.environ.get("TOKENFACTORY_MODEL_CACHE",
                           os.path.join(os.path.expanduser("~"), ".cache", "tokenfactory", "models"))


class ModelError(ValueError):
    """A model file is missing, unreadable or not the kind of model expected."""


def sha256_file(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def local_copy(url: str) -> str:
    """A local path for ``url``: the path itself when local, else a cached download
    (written to a temporary name, then renamed, so a killed download is never used)."""
    protocol = fsspec.core.split_protocol(url)[0]
    if protocol in (None, "file", "local"):
        path = url.split("://", 1)[-1] if protocol else url
        if not os.path.isfile(path):
            raise ModelError(f"model file not found: {url}")
        return path
    name = hashlib.sha256(url.encode()).hexdigest()[:16] + "-" + os.path.basename(url.rstrip("/"))
    target = os.path.join(CACHE_DIR, name)
    if os.path.isfile(target):
        return target
    os.makedirs(CACHE_DIR, exist_ok=True)
    try:
        with fsspec.open(url, "rb") as src, tempfile.NamedTemporaryFile(dir=CACHE_DIR, delete=False) as tmp:
            for block in iter(lambda: src.read(1 << 20), b""):
                tmp.write(block)
    except Exception as exc:
        raise ModelError(f"cannot download model {url}: {exc}") from exc
    os.replace(tmp.name, target)
    _LOGGER.info("downloaded %s to %s", url, target)
    return target


CURRENT = "CURRENT"  # in a directory of model versions: the name of the version in use


def read_current(model_dir: str, missing: str) -> str:
    """The version named by ``<model_dir>/CURRENT``; ``missing`` says what to do when
    there is none (the ``ModelError`` names the directory)."""
    try:
        with open(local_copy(f"{model_dir.rstrip('/')}/{CURRENT}"), encoding="utf-8") as fh:
            version = fh.read().strip()
    except (OSError, ModelError) as exc:
        raise ModelError(f"{model_dir}: {missing}") from exc
    if not version:
        raise ModelError(f"{model_dir}/{CURRENT} is empty")
    return version


def read_version_meta(model_dir: str, version: str = "") -> tuple[str, dict[str, Any]]:
    """(version, its ``meta.json``) of a versioned model directory (``CURRENT`` without
    ``version``), read as JSON without loading the model. ``ModelError`` when there is no
    such version or its metadata is not a JSON object."""
    version = version or read_current(model_dir, "no CURRENT version")
    path = f"{model_dir.rstrip('/')}/{version}/meta.json"
    try:
        with open(local_copy(path), encoding="utf-8") as fh:
            meta = json.load(fh)
    except (OSError, ValueError) as exc:
        raise ModelError(f"{path}: unreadable model metadata: {exc}") from exc
    if not isinstance(meta, dict):
        raise ModelError(f"{path}: not a JSON object")
    return version, meta
