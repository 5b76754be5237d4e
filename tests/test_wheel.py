"""The README's install line for training code: a wheel of this checkout (``make wheel``)
holds every package, asks only for the loader's dependencies, and its loader imports and
streams without Beam."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    dist = tmp_path_factory.mktemp("dist")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "-w", str(dist), str(ROOT)], check=True, cwd=tmp_path_factory.mktemp("build"))
    [built] = dist.glob("tokenfactory-*.whl")
    return built


def test_the_wheel_holds_the_packages_and_asks_for_the_loaders_dependencies(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as whl:
        names = whl.namelist()
        meta = whl.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    for module in ("storage/loader.py", "storage/cache.py", "pipelines/run.py", "transforms/clean/language_rules.json",
                   "models/anomaly.py", "pipelines/py.typed"):
        assert module in names, module
    assert not any(n.startswith(("tests/", "benchmarks/")) for n in names)
    base = sorted(line.split(":", 1)[1].strip().split(">")[0].split("=")[0].strip()
                  for line in meta.splitlines() if line.startswith("Requires-Dist:") and "extra ==" not in line)
    assert base == ["fsspec", "numpy", "torch", "xxhash"]
    assert "Provides-Extra: pipeline" in meta and "Provides-Extra: s3" in meta


def test_its_loader_streams_without_beam(wheel: Path, tmp_path: Path) -> None:
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target),
                    str(wheel)], check=True)
    script = f"""
import json, sys
sys.modules["apache_beam"] = None  # any import of Beam fails
sys.path.insert(0, {str(target)!r})
import numpy as np
from storage.loader import Source, TokenDataset, TokenLoader
from storage.shards import encode_shard
import storage.loader
assert storage.loader.__file__.startswith({str(target)!r}), storage.loader.__file__
docs = [np.arange(1 + 100 * d, 60 + 100 * d, dtype=np.uint32) for d in range(8)]
data, n_docs, n_tokens, sha = encode_shard(docs, np.dtype(np.uint32))
open("shard-00000.tfs", "wb").write(data)
json.dump({{"version": "v1", "shards": [{{"name": "shard-00000.tfs", "num_docs": n_docs,
           "num_tokens": n_tokens, "num_bytes": len(data), "sha256": sha}}]}}, open("index.json", "w"))
dataset = TokenDataset([Source("index.json")], seq_len=16, batch_size=2, seed=0)
batches = list(TokenLoader(dataset, num_workers=0))
print("ok", len(batches), int(sum(b["tokens"].numel() for b in batches)))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    word, batches, tokens = done.stdout.split()
    assert word == "ok" and int(batches) > 0 and int(tokens) == int(batches) * 2 * (16 + 1)  # inputs + next token
