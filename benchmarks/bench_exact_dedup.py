"""Exact text dedup per core: our dedup_exact stage vs dolma 1.2.1's ``dolma dedupe``.

    .venv/bin/python -m benchmarks.bench_exact_dedup [--docs 30000] [--rounds 3]

(``make bench-env`` creates .bench-venv-dolma with dolma 1.2.1 and the boto pins PEERS.md
gives.) The corpus: ``--docs`` documents of ~1.2 KB of real book text (``../shared/data/
text``), every 10th an exact copy of an earlier one under its own id. Both sides dedupe by
the text alone:

* ours: ``python -m pipelines.run --stages dedup_exact --force`` (``exact_url: false``;
  FnApiRunner, one process) over the Parquet that our extract stage wrote once before the
  rounds (untimed); exact: sha1 of the normalised text, documents grouped by it;
* dolma: ``dolma dedupe`` with ``dedupe.documents.key: $.text``, one process, its Rust
  Bloom filter sized for the corpus at a 1e-6 false-positive rate (probabilistic: a
  false positive drops a distinct document), over the same documents as JSONL.gz.

CPU seconds (user + system) of each process tree, the median of ``--rounds`` interleaved
rounds; documents per CPU-second; what each side marked as duplicates.
"""

from __future__ import annotations

import argparse
import glob
import gzip
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks import SHARED_DATA

ROOT = Path(__file__).resolve().parents[1]
DOLMA = ROOT / ".bench-venv-dolma" / "bin" / "dolma"


def corpus(n: int, seed: int = 0) -> list[dict[str, str]]:
    words = " ".join((SHARED_DATA / "text" / name).read_text(encoding="utf-8")
                     for name in ("pg1342_pride_and_prejudice.txt", "pg2701_moby_dick.txt")).split()
    rng = random.Random(seed)
    docs: list[dict[str, str]] = []
    for i in range(n):
        if i % 10 == 9:
            text = docs[rng.randrange(len(docs))]["text"]
        else:
            start = rng.randrange(len(words) - 200)
            text = " ".join(words[start:start + 200])
        docs.append({"id": f"d{i}", "text": text, "source": "bench", "added": "2026-12-07T00:00:00Z"})
    return docs


def cpu_of(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> float:
    """CPU seconds of the process tree of ``args`` (its children included)."""
    before = os.times()
    subprocess.run(args, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    after = os.times()
    return (after.children_user - before.children_user) + (after.children_system - before.children_system)


def ours_job(root: Path, docs: list[dict[str, str]]) -> str:
    (root / "in").mkdir(parents=True)
    (root / "in" / "docs.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    config = root / "ours.yaml"
    config.write_text(f"output: {root / 'ours'}\ninputs:\n  - {{format: jsonl, path: \"{root / 'in' / '*.jsonl'}\"}}\n"
                      "dedup: {exact_url: false}\nbeam_args: ['--runner=FnApiRunner']\n")
    subprocess.run([sys.executable, "-m", "pipelines.run", "--config", str(config), "--stages", "extract",
                    "--no-report", "--no-progress", "--log-level", "WARNING"], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL)
    return str(config)


def dolma_args(root: Path, n: int) -> list[str]:
    documents = root / "dolma" / "documents"
    documents.mkdir(parents=True, exist_ok=True)
    return [str(DOLMA), "dedupe", "--documents", str(documents / "*.jsonl.gz"),
            "--dedupe.name", "exact", "--dedupe.documents.key", "$.text",
            "--dedupe.documents.attribute_name", "duplicate_text",
            "--bloom_filter.file", str(root / "dolma" / "bloom.bin"), "--no-bloom_filter.read_only",
            "--bloom_filter.estimated_doc_count", str(n),
            "--bloom_filter.desired_false_positive_rate", "1e-6", "--processes", "1"]


def dolma_marked(root: Path) -> int:
    marked = 0
    for path in glob.glob(str(root / "dolma" / "attributes" / "exact" / "*.jsonl.gz")):
        with gzip.open(path, "rt") as fh:
            marked += sum(bool(json.loads(line)["attributes"].get("duplicate_text")) for line in fh)
    return marked


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=30_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    if not DOLMA.exists():
        sys.stderr.write(f"{DOLMA} is missing: make bench-env installs dolma 1.2.1\n")
        return 2
    docs = corpus(args.docs)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        config = ours_job(root, docs)
        dolma = dolma_args(root, args.docs)
        with gzip.open(root / "dolma" / "documents" / "part-0.jsonl.gz", "wt") as fh:
            fh.write("".join(json.dumps(d) + "\n" for d in docs))
        env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
        times: dict[str, list[float]] = {"ours": [], "dolma": []}
        for _ in range(args.rounds):
            times["ours"].append(cpu_of([sys.executable, "-m", "pipelines.run", "--config", config, "--stages",
                                         "dedup_exact", "--force", "--no-report", "--no-progress",
                                         "--log-level", "WARNING"], ROOT))
            for stale in (root / "dolma" / "bloom.bin", root / "dolma" / "attributes"):
                subprocess.run(["rm", "-rf", str(stale)], check=True)
            times["dolma"].append(cpu_of(dolma, root, env))
        manifest = json.loads((root / "ours" / "manifests" / "dedup_exact.json").read_text())
        marked = dolma_marked(root)
    median = {k: statistics.median(v) for k, v in times.items()}
    result = {
        "docs": args.docs, "exact_copies": sum(1 for i in range(args.docs) if i % 10 == 9),
        "cpu_s_median": {k: round(v, 2) for k, v in median.items()},
        "cpu_s_all": {k: [round(x, 2) for x in v] for k, v in times.items()},
        "docs_per_cpu_s": {k: round(args.docs / v) for k, v in median.items()},
        "ours_over_dolma_per_core": round(median["dolma"] / median["ours"], 2),
        "ours_rejected": manifest["counts"]["rejected_by_reason"], "dolma_marked_duplicates": marked,
    }
    json.dump(result, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
