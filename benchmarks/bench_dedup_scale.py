"""The dedup stages at scale: wall time, rounds and peak memory vs number of documents.

    .venv/bin/python -m benchmarks.bench_dedup_scale [--sizes 10000 30000 100000]

Each size runs ``python -m pipelines.run`` (extract, dedup_exact, dedup_minhash on the
FnApiRunner with 2 worker processes) in a fresh process on JSONL made like
bench_dedup_quality (30% base chunks, 70% edited copies), and reads the peak RSS of that
process and its children from ``resource.getrusage``.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.bench_dedup_quality import base_documents, edit


def make_corpus(path: Path, n: int, seed: int = 0) -> None:
    rng = random.Random(seed)
    base = base_documents(int(n * 0.3) or 1)
    with path.open("w", encoding="utf-8") as fh:
        for i in range(n):
            text = base[i] if i < len(base) else edit(rng.choice(base), rng.uniform(0.0, 0.15), rng)
            fh.write(json.dumps({"id": f"d{i:07d}", "text": text}) + "\n")


def run(n: int, workers: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "docs.jsonl"
        make_corpus(corpus, n)
        config = Path(tmp) / "job.yaml"
        config.write_text(f"output: {tmp}/out\ninputs:\n  - format: jsonl\n    path: {corpus}\n"
                          f"dedup: {{}}\nbeam_args: ['--runner=FnApiRunner', "
                          f"'--direct_running_mode=multi_processing', '--direct_num_workers={workers}']\n")
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "pipelines.run", "--config", str(config),
                        "--log-level", "WARNING"], check=True, stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - t0
        manifest = json.loads((Path(tmp) / "out" / "manifests" / "dedup_minhash.json").read_text())
        exact = json.loads((Path(tmp) / "out" / "manifests" / "dedup_exact.json").read_text())
    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return {"docs": n, "wall_s": round(wall, 1), "exact_s": exact["extra"]["seconds"],
            "minhash_s": manifest["extra"]["seconds"], "rounds": manifest["extra"]["counters"].get("cc_rounds"),
            "edges": manifest["extra"]["counters"].get("edges"), "near_duplicates": manifest["counts"]["rejected"],
            "peak_rss_mb_so_far": round(peak_mb)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10000, 30000, 100000])
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    for n in args.sizes:
        result = run(n, args.workers)
        sys.stdout.write(json.dumps(result) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
