"""Tier copy MB/s between a local folder and an S3 endpoint (moto_server on 127.0.0.1).

    .venv/bin/python -m benchmarks.bench_tiers [--mb 200]

Writes a dataset version of ``--mb`` MB of random-token shards (16 MB each), then copies it
local → S3 (demote) and S3 → local (promote) through ``storage.tiers.copy_version``
(streamed sha256 verification, ``.partial`` + rename, index.json last), and compares
with a bare ``fs.put`` / ``fs.get`` of the same files. moto keeps objects in memory, so
this measures our copy path and the HTTP round trips, not a real network.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np

from storage.shards import encode_shard
from storage.tiers import StorageConfig, copy_version


def start_moto() -> tuple[subprocess.Popen, str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    exe = shutil.which("moto_server", path=os.path.dirname(sys.executable)) or "moto_server"
    proc = subprocess.Popen([exe, "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(150):
        try:
            urllib.request.urlopen(url, timeout=1).close()
            return proc, url
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("moto_server did not start")


def make_version(root: Path, mb: int) -> None:
    rng = np.random.default_rng(0)
    directory = root / "v1"
    (directory / "documents").mkdir(parents=True)
    shards = []
    for i in range(max(1, mb // 16)):
        docs = [rng.integers(0, 32000, size=8192).astype(np.uint16) for _ in range(1024)]
        data, n_docs, n_tokens, sha = encode_shard(docs, np.dtype(np.uint16))
        name = f"shard-{i:05d}.tfs"
        (directory / name).write_bytes(data)
        shards.append({"name": name, "num_docs": n_docs, "num_tokens": n_tokens, "num_bytes": len(data), "sha256": sha})
    (directory / "documents" / "part-00000-of-00001.parquet").write_bytes(b"x")
    (directory / "index.json").write_text(json.dumps({"version": "v1", "shards": shards}))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mb", type=int, default=200)
    args = parser.parse_args(argv)
    proc, endpoint = start_moto()
    os.environ.update({"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
                       "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": endpoint})
    try:
        import boto3
        import fsspec

        boto3.client("s3").create_bucket(Bucket="bench")
        with tempfile.TemporaryDirectory() as tmp:
            warm = Path(tmp) / "warm"
            make_version(warm, args.mb)
            size = sum(p.stat().st_size for p in (warm / "v1").rglob("*") if p.is_file())
            storage = StorageConfig(warm=str(warm), cold="s3://bench/cold", hot=str(Path(tmp) / "hot"))
            t0 = time.perf_counter(); copy_version("v1", storage.warm, storage.cold, storage); up = time.perf_counter() - t0
            t0 = time.perf_counter(); copy_version("v1", storage.cold, storage.hot, storage); down = time.perf_counter() - t0
            fs = fsspec.filesystem("s3")
            t0 = time.perf_counter(); fs.put(str(warm / "v1"), "s3://bench/raw/v1", recursive=True); raw_up = time.perf_counter() - t0
            t0 = time.perf_counter(); fs.get("s3://bench/raw/v1", str(Path(tmp) / "raw"), recursive=True); raw_down = time.perf_counter() - t0
    finally:
        proc.terminate()
    mb = size / 1e6
    sys.stdout.write(f"{mb:.0f} MB version\n")
    sys.stdout.write(f"demote local -> S3: ours {mb / up:7.1f} MB/s, bare fs.put {mb / raw_up:7.1f} MB/s\n")
    sys.stdout.write(f"promote S3 -> local: ours {mb / down:7.1f} MB/s, bare fs.get {mb / raw_down:7.1f} MB/s\n")
    sys.stdout.write(json.dumps({"mb": mb, "up": mb / up, "down": mb / down, "raw_up": mb / raw_up,
                                 "raw_down": mb / raw_down}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
