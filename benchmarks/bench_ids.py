"""What unique document ids cost the extract stage (issue 36, item 1).

    .venv/bin/python -m benchmarks.bench_ids [--docs 100000] [--rounds 5]

A JSONL input of ``--docs`` documents (about 1.2 KB of text each, every 50th id repeated
once) is read in this process on FnApiRunner, in two pipelines per round, interleaved:

* ``read``: the readers (``ReadInputs``' DoFn: parse, document ids from file and offset,
  the 8-byte hash of each own id) and a count;
* ``read + duplicate ids``: the same plus ``CountDuplicateIds`` (one array of hashes per
  file range grouped by file: the shuffle that counts ids repeated inside one input).

Beside them, the per-record cost of the id functions alone (``document_id`` and
``own_id_hash``, timed in a loop).

CPU of this process (user + system) per pipeline, the median of ``--rounds``; beside them
the whole ``extract`` stage run alone by ``python -m pipelines.run`` (CPU of its process
tree), once per round, so the added cost is a share of what a user pays for the stage.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that, equal_to

from transforms.readers.files import match_pattern
from transforms.doc import document_id
from transforms.readers.inputs import ID_HASHES, CountDuplicateIds, _ReadInputFn, own_id_hash
from transforms.readers.warc import WarcLimits
from transforms.routing import FAILED

WORDS = ("river stone garden window lantern harbor meadow copper violet thunder pillow orchard canyon "
         "marble feather glacier").split()


def write_corpus(path: Path, docs: int, seed: int = 0) -> int:
    """``docs`` JSONL documents; every 50th reuses the id before it. Returns the repeats."""
    rng = random.Random(seed)
    repeats = 0
    with path.open("w") as fh:
        for i in range(docs):
            doc_id = f"d{i - 1}" if i % 50 == 49 else f"d{i}"
            repeats += i % 50 == 49
            text = " ".join(rng.choice(WORDS) for _ in range(180))
            fh.write(json.dumps({"id": doc_id, "text": text}) + "\n")
    return repeats


def read_pipeline(path: str, docs: int, with_ids: bool) -> float:
    """CPU seconds of this process for one FnApiRunner pipeline over ``path``."""
    start = os.times()
    with beam.Pipeline(options=PipelineOptions(["--runner=FnApiRunner"])) as p:
        read = (p | beam.Create([("jsonl", ref) for ref in match_pattern(path)])
                | beam.ParDo(_ReadInputFn("extract", WarcLimits(), {})).with_outputs(FAILED, ID_HASHES,
                                                                                      main="records"))
        assert_that(read.records | beam.combiners.Count.Globally(), equal_to([docs]))
        if with_ids:
            _ = read[ID_HASHES] | CountDuplicateIds("extract")
    end = os.times()
    return (end.user - start.user) + (end.system - start.system)


def extract_stage(path: str, out: str) -> float:
    """CPU seconds of the process tree of ``pipelines.run --stages extract``."""
    config = Path(out).with_suffix(".yaml")
    config.write_text(f"output: {out}\ninputs:\n  - {{format: jsonl, path: \"{path}\"}}\n"
                      "stages: [extract]\nbeam_args: ['--runner=FnApiRunner']\n")
    before = os.times()
    subprocess.run([sys.executable, "-m", "pipelines.run", "--config", str(config), "--force", "--no-report",
                    "--no-progress", "--log-level", "WARNING"], check=True, stdout=subprocess.DEVNULL)
    after = os.times()
    return (after.children_user - before.children_user) + (after.children_system - before.children_system)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--docs", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "docs.jsonl"
        repeats = write_corpus(path, args.docs)
        times: dict[str, list[float]] = {"read": [], "read + duplicate ids": [], "extract stage": []}
        for _ in range(args.rounds):
            times["read"].append(read_pipeline(str(path), args.docs, with_ids=False))
            times["read + duplicate ids"].append(read_pipeline(str(path), args.docs, with_ids=True))
            times["extract stage"].append(extract_stage(str(path), f"{tmp}/out"))
        manifest = json.loads(Path(tmp, "out", "manifests", "extract.json").read_text())
    median = {k: statistics.median(v) for k, v in times.items()}
    start = time.process_time()
    for i in range(100_000):
        document_id("2024/part-00001.jsonl", i * 1200, f"d{i}")
        own_id_hash(f"d{i}")
    id_functions_us = (time.process_time() - start) * 10
    added = median["read + duplicate ids"] - median["read"]
    result = {
        "docs": args.docs, "repeated_ids": repeats, "rounds": args.rounds,
        "cpu_s_median": {k: round(v, 2) for k, v in median.items()},
        "cpu_s_all": {k: [round(x, 2) for x in v] for k, v in times.items()},
        "duplicate_ids_added_cpu_s": round(added, 2),
        "id_functions_us_per_record": round(id_functions_us, 2),
        "duplicate_ids_share_of_extract_stage": round(added / median["extract stage"], 3),
        "extract_stage_docs_per_cpu_s": round(args.docs / median["extract stage"]),
        "extract_counts": manifest["counts"], "extract_counters": manifest["extra"].get("counters"),
        "when": time.strftime("%Y-%m-%d %H:%M"),
    }
    json.dump(result, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
