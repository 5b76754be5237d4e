"""Upsampling's effect on tokens per epoch: the tokenize stage without and with a 10% of the
documents written 3 times.

    .venv/bin/python -m benchmarks.bench_upsample [--docs 2000] [--shard-kib 64]

~3,000-character documents cut from the books in ../shared/data/text, the Mistral
tokenizer (32,000 pieces) from ../shared/data/models. The upsampled 10% is chosen by a hash
of the document id (the books carry no quality score; a quality decile is chosen the same
way by the augment stage, by score instead of hash): ``repeats = 3``, rule ``top10_x3``.
Both runs go through ``TokenizeToShards`` on the FnApiRunner, seed 0. Reported for each:
documents and entries, tokens written, repeat tokens and their share, shards, the loader's
tokens per epoch (``TokenDataset.epoch_tokens``, seq_len 2,048, batches of 8) and its
repeat share, and where the copies of a document land: the smallest distance between two
copies in shard numbers (around the circle of shards, the distance the placement rule
keeps), how many copy pairs share a shard, and the share of copy pairs that meet in one
loader group (``buffer_shards`` = 4 consecutive shards in an epoch's shard order), over 20
epochs: the loader shuffles the shards each epoch, so two copies in different shards
meet in one group by chance, (buffer_shards - 1) / (shards - 1) of the pairs expected.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import apache_beam as beam
import pyarrow.parquet as pq
from apache_beam.options.pipeline_options import PipelineOptions

from benchmarks import SHARED_DATA
from storage.loader import Source, TokenDataset
from storage.repeats import min_copy_distance, upsampling_summary
from transforms.doc import Doc
from transforms.tokenize.tokenize import TokenizeConfig, TokenizeToShards

ROOT = Path(__file__).resolve().parents[1]
DATA = SHARED_DATA
MODEL = DATA / "models" / "mistral_tokenizer.model.v1.model"
SEQ, BATCH, BUFFER = 2048, 8, 4
EPOCHS = 20  # epochs whose shard orders are searched for copies meeting in one loader group


def documents(n: int, upsample: bool) -> list[Doc]:
    text = "".join(p.read_text(encoding="utf-8") for p in sorted((DATA / "text").glob("*.txt")))
    texts = [text[i:i + 3000] for i in range(0, len(text) - 3000, 3000)][:n]
    docs = []
    for i, body in enumerate(texts):
        doc_id = f"doc{i:06d}"
        chosen = upsample and hashlib.sha256(doc_id.encode()).digest()[0] < 256 // 10  # ~10%
        docs.append(Doc(id=doc_id, url="", text=body, source="books", fetched_at="",
                        repeats=3 if chosen else 1, repeat_rules=("top10_x3",) if chosen else ()))
    return docs


def tokenize(docs: list[Doc], directory: Path, shard_bytes: int) -> tuple[dict[str, Any], float]:
    """Writes the shards and a minimal index.json (what the loader reads); returns the index."""
    t0 = time.perf_counter()
    with beam.Pipeline(options=PipelineOptions(["--runner=FnApiRunner"])) as pipeline:
        out = (pipeline | beam.Create(docs)
               | TokenizeToShards(TokenizeConfig(target_shard_bytes=shard_bytes), str(MODEL), str(directory)))
        out.kept | beam.Map(json.dumps) | beam.io.WriteToText(str(directory / "records"), shard_name_template="")
    seconds = time.perf_counter() - t0
    records = sorted((json.loads(line) for line in open(directory / "records")), key=lambda r: r["name"])
    summary = upsampling_summary(records)
    index = {"version": directory.name, "dtype": records[0]["dtype"], "num_shards": len(records),
             "num_docs": sum(r["num_docs"] for r in records), "num_tokens": sum(r["num_tokens"] for r in records),
             "repeat_docs": summary["repeat_docs"], "repeat_tokens": summary["repeat_tokens"], "upsampling": summary,
             "shards": [{k: r[k] for k in ("name", "num_docs", "num_tokens", "num_bytes", "sha256", "documents",
                                           "repeat_docs", "repeat_tokens")} for r in records]}
    (directory / "index.json").write_text(json.dumps(index))
    return index, seconds


def placement(index: dict[str, Any], directory: Path) -> dict[str, Any]:
    """Where the copies of each upsampled document landed, in shard numbers and in the
    loader's groups of epoch 0."""
    shards = len(index["shards"])
    number = {s["name"]: i for i, s in enumerate(index["shards"])}
    where: dict[str, list[int]] = {}
    for entry in index["shards"]:
        for row in pq.read_table(directory / entry["documents"], columns=["id", "copy"]).to_pylist():
            where.setdefault(row["id"], []).append(number[entry["name"]])
    copies = {k: v for k, v in where.items() if len(v) > 1}
    dataset = TokenDataset([Source(str(directory / "index.json"))], seq_len=SEQ, batch_size=BATCH,
                           buffer_shards=BUFFER)
    pairs = [(a, b) for v in copies.values() for a, b in itertools.combinations(v, 2)]
    names = [s["name"] for s in index["shards"]]
    same_group = 0
    for epoch in range(EPOCHS):
        group_of = {name: g for g, group in enumerate(dataset.groups(epoch)[0]) for name in group.shards}
        same_group += sum(group_of[names[a]] == group_of[names[b]] for a, b in pairs)
    return {"upsampled_docs": len(copies),
            "min_copy_distance": min((min_copy_distance(v, shards) for v in copies.values()), default=None),
            "copy_pairs": len(pairs), "pairs_same_shard": sum(a == b for a, b in pairs),
            "pairs_same_group": same_group / EPOCHS / len(pairs) if pairs else 0.0,
            "pairs_same_group_expected": (BUFFER - 1) / (shards - 1) if shards > 1 else 1.0}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=2000, help="at most this many (the books hold ~1,100)")
    parser.add_argument("--shard-kib", type=int, default=64, help="tokenize.target_shard_bytes in KiB")
    args = parser.parse_args(argv)
    if args.docs < 10 or args.shard_kib < 1:
        parser.error("--docs must be >= 10 and --shard-kib >= 1")
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, upsample in (("plain", False), ("top10% x3", True)):
            directory = Path(tmp) / name.replace(" ", "_").replace("%", "")
            index, seconds = tokenize(documents(args.docs, upsample), directory, args.shard_kib * 1024)
            epoch = TokenDataset([Source(str(directory / "index.json"))], seq_len=SEQ,
                                 batch_size=BATCH).epoch_tokens()
            rows[name] = {"documents": index["upsampling"]["documents"], "entries": index["num_docs"],
                          "tokens": index["num_tokens"], "repeat_tokens": index["repeat_tokens"],
                          "shards": index["num_shards"], "epoch_tokens": epoch.tokens,
                          "epoch_repeat_tokens": epoch.repeat_tokens, "epoch_repeat_share": epoch.repeat_share,
                          "seconds": seconds, **placement(index, directory)}
            docs = rows[name]["documents"]
    write = sys.stdout.write
    write(f"{docs} documents of ~3,000 characters, Mistral tokenizer, {args.shard_kib} KiB shards, "
          f"epoch: seq_len {SEQ}, batches of {BATCH}, groups of {BUFFER} shards\n")
    write(f"{'run':<11}{'entries':>8}{'tokens':>11}{'repeat':>10}{'share':>7}{'shards':>7}"
          f"{'epoch tokens':>14}{'repeat':>10}{'share':>7}{'min dist':>9}{'same shard':>11}{'same group':>11}"
          f"{'time':>7}\n")
    for name, r in rows.items():
        share = r["repeat_tokens"] / r["tokens"]
        dist = "-" if r["min_copy_distance"] is None else str(r["min_copy_distance"])
        group = f"{r['pairs_same_group']:.1%}" if r["copy_pairs"] else "-"
        same = f"{r['pairs_same_shard']}/{r['copy_pairs']}" if r["copy_pairs"] else "-"
        write(f"{name:<11}{r['entries']:>8,}{r['tokens']:>11,}{r['repeat_tokens']:>10,}{share:>7.1%}{r['shards']:>7}"
              f"{r['epoch_tokens']:>14,}{r['epoch_repeat_tokens']:>10,}{r['epoch_repeat_share']:>7.1%}{dist:>9}"
              f"{same:>11}{group:>11}{r['seconds']:>6.1f}s\n")
    plain, up = rows["plain"], rows["top10% x3"]
    write(f"tokens per epoch x{up['epoch_tokens'] / plain['epoch_tokens']:.3f} "
          f"({up['upsampled_docs']} documents x3 = {up['upsampled_docs'] / up['documents']:.1%} of the documents); "
          f"copy pairs in one loader group: {up['pairs_same_group']:.1%} over {EPOCHS} epochs "
          f"(chance: {up['pairs_same_group_expected']:.1%})\n")
    write(json.dumps(rows) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
