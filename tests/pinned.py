"""Outputs pinned before optimising (issue 37, item 2): a fixed corpus through extract →
clean → dedup_exact → dedup_minhash → tokenize, and a digest of everything a user gets
from it. A speed change must leave the digest as it is; a change meant to alter outputs
rewrites it, and says so in its commit:

    .venv/bin/python -m tests.pinned --write

The corpus is built here from ../shared/data: the McCormick news articles (10 planted
near-duplicate pairs), Lingua's sentences of six languages (12 to a document; the job
keeps English and German), 20 exact copies of articles under other ids and 10 under the
same URL. Ids, shuffle and shards depend on the corpus's file name below its folder, not
on where the test puts it (``transforms.doc.document_id``).
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import io
import json
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from tests.conftest import shared

GOLDEN = Path(__file__).resolve().parent / "golden" / "pinned_outputs.json"
STAGES = ("extract", "clean", "dedup_exact", "dedup_minhash")
LANGUAGES = ("en", "de", "fr", "es", "zh", "ja")
INDEX_TIME_AND_PLACE = ("version", "created_at", "lineage")


def corpus() -> list[dict[str, str]]:
    docs = []
    for line in shared("neardup", "mccormick_articles_1000.train").read_text(encoding="utf-8").splitlines():
        doc_id, text = line.strip().split(" ", 1)
        docs.append({"id": f"mc-{doc_id}", "text": text, "url": f"https://news.example/{doc_id}"})
    for lang in LANGUAGES:
        lines = shared("langid", "lingua_sentences", f"{lang}.txt").read_text(encoding="utf-8").splitlines()
        docs += [{"id": f"{lang}-{i}", "text": " ".join(lines[i * 12:(i + 1) * 12]),
                  "url": f"https://lang.example/{lang}/{i}"} for i in range(20)]
    docs += [{**docs[i], "id": f"copy-{i}", "url": f"https://copies.example/{i}"} for i in range(0, 400, 20)]
    docs += [{**docs[i + 1], "id": f"same-url-{i}", "text": docs[i + 1]["text"] + " Updated."}
             for i in range(500, 600, 10)]
    return docs


def write_job(root: Path) -> str:
    """The corpus and the job's config under ``root``; returns the config's path."""
    root.mkdir(parents=True, exist_ok=True)
    data = root / "data"
    data.mkdir(exist_ok=True)
    (data / "corpus.jsonl").write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in corpus()),
                                       encoding="utf-8")
    config = root / "job.yaml"
    config.write_text(f"""
output: {root / 'out'}
inputs:
  - {{format: jsonl, path: "{data / '*.jsonl'}"}}
stages: [extract, clean, dedup_exact, dedup_minhash, tokenize]
extract: {{min_chars: 20}}
clean:
  langid: {{model: "{shared('models', 'lid.176.ftz')}", languages: [en, de]}}
dedup:
  minhash: {{threshold: 0.5}}
tokenize: {{model: "{shared('models', 'spm_test_model_botchan.model')}", target_shard_bytes: 20000, seed: 3}}
beam_args: ["--runner=FnApiRunner"]
""")
    return str(config)


def _sha(items: Any) -> str:
    return hashlib.sha256(json.dumps(items, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def _rows(out: Path, sub: str, columns: list[str]) -> list[dict[str, Any]]:
    return [r for f in sorted(glob.glob(f"{out}/{sub}/**/*.parquet", recursive=True))
            for r in pq.read_table(f, columns=columns).to_pylist()]


def digest(out: Path) -> dict[str, Any]:
    """What the run gave, part by part: counts in the clear, the rest as sha256."""
    found: dict[str, Any] = {}
    for stage in STAGES:
        manifest = json.loads((out / "manifests" / f"{stage}.json").read_text())
        kept = sorted(r["id"] for r in _rows(out, f"docs/{stage}", ["id"]))
        rejected = sorted((r["id"], r["reason"], r["reason_detail"])
                          for r in _rows(out, f"rejected/{stage}", ["id", "reason", "reason_detail"]))
        found[stage] = {"counts": manifest["counts"], "kept_ids": _sha(kept), "rejected": _sha(rejected)}
    found["near_duplicate_edges"] = _sha(sorted((r["id"], r["dup_cluster"]) for r in _rows(
        out, "rejected/dedup_minhash", ["id", "dup_cluster"])))
    [index_path] = glob.glob(f"{out}/tokens/*/index.json")
    index = json.loads(Path(index_path).read_text())
    shards = {s["name"]: hashlib.sha256(Path(index_path).with_name(s["name"]).read_bytes()).hexdigest()
              for s in index["shards"]}
    comparable = {k: v for k, v in index.items() if k not in INDEX_TIME_AND_PLACE}
    found["tokens"] = {"num_docs": index["num_docs"], "num_tokens": index["num_tokens"],
                       "shards": _sha(shards), "index": _sha(comparable)}
    return found


def run_and_digest(root: Path) -> dict[str, Any]:
    from pipelines.run import main

    config = write_job(root)
    table = io.StringIO()
    code = main(["--config", config, "--log-level", "WARNING", "--no-progress", "--no-report"], out=table)
    if code != 0:
        raise RuntimeError(f"the pinned job failed (exit {code}):\n{table.getvalue()}")
    return digest(root / "out")


def main(argv: list[str] | None = None) -> int:
    import tempfile

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help=f"rewrite {GOLDEN.name}")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        found = run_and_digest(Path(tmp))
    text = json.dumps(found, indent=1, sort_keys=True) + "\n"
    if args.write:
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
