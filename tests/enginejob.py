"""The engine test job: every stage on real data, and what "the same output" means.

Inputs: the WARC, WARC.gz and ARC files of ``../shared/data/warc`` and one JSONL file
built here from real text: Leipzig sentences of four languages (six to a document, the
labeller's classes), the McCormick news articles (10 planted near-duplicate pairs) and
six chains of edited copies of Pride and Prejudice passages (each copy a few words away
from the one before, so near-dedup needs more than one star round to join a chain).
Stages: extract → clean → dedup_exact → dedup_minhash → label → tokenizer → tokenize.
"""

from __future__ import annotations

import collections
import contextlib
import glob
import json
import os
import random
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import pyarrow.parquet as pq

from tests.conftest import shared
from tests.labelmodels import LANGS, write_label_data

ROOT = Path(__file__).resolve().parent.parent

DOC_STAGES = ("extract", "clean", "dedup_exact", "dedup_minhash", "label")


@dataclass(frozen=True)
class EngineJob:
    config: str  # the job's YAML (its output is overridden per run)
    root: Path


def _language_docs(sentence_docs: str) -> list[dict[str, str]]:
    by_lang: dict[str, list[dict[str, str]]] = collections.defaultdict(list)
    for line in open(sentence_docs, encoding="utf-8"):
        row = json.loads(line)
        by_lang[row["id"].split("-")[0]].append(row)
    docs = []
    for lang, rows in sorted(by_lang.items()):
        rows.sort(key=lambda r: int(r["id"].split("-")[1]))
        for i in range(0, len(rows), 6):
            docs.append({"id": f"{lang}-{i // 6}", "text": " ".join(r["text"] for r in rows[i:i + 6]),
                         "url": f"https://example.org/{lang}/{i // 6}"})
    return docs


def _edited_chains(chains: int = 6, length: int = 12) -> list[dict[str, str]]:
    words = shared("text", "pg1342_pride_and_prejudice.txt").read_text(encoding="utf-8").split()
    rng = random.Random(7)
    docs = []
    for c in range(chains):
        copy = [w for w in words[5000 + c * 900:5400 + c * 900] if "_" not in w]
        for k in range(length):
            copy = list(copy)
            for _ in range(6):
                copy[rng.randrange(len(copy))] = rng.choice(words[:3000])
            docs.append({"id": f"chain{c}-{k:02d}", "text": " ".join(copy).rstrip(".") + ".",
                         "url": f"https://copies.example/{c}/{k}"})
    return docs


def write_engine_job(root: Path) -> EngineJob:
    labels = write_label_data(root / "labels")
    docs = _language_docs(labels.docs) + _edited_chains()
    for line in shared("neardup", "mccormick_articles_1000.train").read_text(encoding="utf-8").splitlines():
        doc_id, text = line.strip().split(" ", 1)
        docs.append({"id": f"mc-{doc_id}", "text": text, "url": f"https://news.example/{doc_id}"})
    random.Random(3).shuffle(docs)
    jsonl = root / "docs.jsonl"
    jsonl.write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in docs), encoding="utf-8")
    warc = shared("warc")
    config = root / "job.yaml"
    config.write_text(f"""
output: {root / 'out-direct'}
inputs:
  - {{format: warc, path: "{warc}/*.warc.gz"}}
  - {{format: warc, path: "{warc}/*.warc"}}
  - {{format: arc, path: "{warc}/*.arc.gz"}}
  - {{format: jsonl, path: "{jsonl}"}}
extract: {{min_chars: 20}}
clean:
  langid: {{model: "{shared('models', 'lid.176.ftz')}", languages: [{', '.join(LANGS)}]}}
  rules_languages: []
dedup:
  minhash: {{threshold: 0.5, driver_max_edges: 0}}  # the star rounds, on the engine
label:
  review_budget: 20
  sampling: hybrid
  sets:
    - {{name: language, values: [{', '.join(LANGS)}], model: "{labels.model_dir}", accept_threshold: 0.9}}
tokenize: {{vocab_size: 2000, target_shard_bytes: 20000, seed: 3}}
beam_args: ["--runner=FnApiRunner"]
""")
    return EngineJob(str(config), root)


def _rows(out: str, sub: str, columns: list[str] | None = None) -> list[dict[str, Any]]:
    files = sorted(glob.glob(f"{out}/{sub}/**/*.parquet", recursive=True))
    return [r for f in files for r in pq.read_table(f, columns=columns).to_pylist()]


def _manifest(out: str, stage: str) -> dict[str, Any]:
    return json.loads(Path(out, "manifests", f"{stage}.json").read_text())


# index.json fields that name a time or a place, not the tokens: the version name and
# creation time and the lineage fingerprint (a hash of the input manifest's finish time
# and file paths). index.json names no path outside its version (the tokenizer is its
# ``file`` inside it): a test fails if ``tokenizer.path`` comes back.
INDEX_FIELDS_OF_TIME_AND_PLACE = (("version",), ("created_at",),
                                  ("lineage", "input_finished_at"), ("lineage", "input_fingerprint"))


def comparable_index(path: str) -> dict[str, Any]:
    index = json.loads(Path(path).read_text())
    for keys in INDEX_FIELDS_OF_TIME_AND_PLACE:
        parent = index
        for key in keys[:-1]:
            parent = parent[key]
        parent.pop(keys[-1])
    return index


def differences(a: str, b: str, stages: tuple[str, ...] = DOC_STAGES + ("tokenizer", "tokenize")) -> list[str]:
    """What differs between two outputs of the engine job ([] = the same output): kept
    documents (whole rows) per stage, rejected counts per reason, failed counts per error,
    each manifest's counts and counters, the review queue, the tokenizer and the token
    version (index.json but for time and place, and every shard byte for byte)."""
    found = []
    for stage in [s for s in DOC_STAGES if s in stages]:
        docs_a = {r["id"]: r for r in _rows(a, f"docs/{stage}")}
        docs_b = {r["id"]: r for r in _rows(b, f"docs/{stage}")}
        if sorted(docs_a) != sorted(docs_b):
            found.append(f"{stage}: kept ids differ ({len(docs_a)} vs {len(docs_b)}; "
                         f"only in a: {sorted(set(docs_a) - set(docs_b))[:3]}, "
                         f"only in b: {sorted(set(docs_b) - set(docs_a))[:3]})")
        elif docs_a != docs_b:
            changed = [i for i in docs_a if docs_a[i] != docs_b[i]]
            found.append(f"{stage}: {len(changed)} kept documents differ, e.g. {changed[0]}")
        for sub, column in (("rejected", "reason"), ("failed", "error_type")):
            count_a = collections.Counter(r[column] for r in _rows(a, f"{sub}/{stage}", [column]))
            count_b = collections.Counter(r[column] for r in _rows(b, f"{sub}/{stage}", [column]))
            if count_a != count_b:
                found.append(f"{stage}: {sub} by {column} {dict(count_a)} vs {dict(count_b)}")
    for stage in stages:
        ma, mb = _manifest(a, stage), _manifest(b, stage)
        if ma["counts"] != mb["counts"]:
            found.append(f"{stage}: manifest counts {ma['counts']} vs {mb['counts']}")
        if ma["extra"].get("counters") != mb["extra"].get("counters"):
            found.append(f"{stage}: counters {ma['extra'].get('counters')} vs {mb['extra'].get('counters')}")
    if "tokenize" in stages:
        found += _queue_and_tokens(a, b)
    return found


def _queue_and_tokens(a: str, b: str) -> list[str]:
    found = []
    queues = [sorted(glob.glob(f"{o}/review/queue-*/tasks.jsonl")) for o in (a, b)]
    if not queues[0] or not queues[1]:
        found.append(f"review queue missing: {queues}")
    elif Path(queues[0][-1]).read_bytes() != Path(queues[1][-1]).read_bytes():
        found.append("review queues differ")
    if Path(a, "tokenizer", "tokenizer.model").read_bytes() != Path(b, "tokenizer", "tokenizer.model").read_bytes():
        found.append("tokenizer.model bytes differ")
    index_a, index_b = (sorted(glob.glob(f"{o}/tokens/*/index.json"))[-1] for o in (a, b))
    if comparable_index(index_a) != comparable_index(index_b):
        found.append("index.json differs (beyond its version, time and paths)")
    for shard in json.loads(Path(index_a).read_text())["shards"]:
        name = shard["name"]
        pa_, pb_ = (os.path.join(os.path.dirname(i), name) for i in (index_a, index_b))
        if not os.path.exists(pb_) or Path(pa_).read_bytes() != Path(pb_).read_bytes():
            found.append(f"shard {name} differs")
    return found


def run(argv: list[str]) -> tuple[int, str]:
    """``python -m pipelines.run`` in this process, quiet; (exit code, its table)."""
    import io

    from pipelines.run import main

    out = io.StringIO()
    code = main(argv + ["--log-level", "WARNING", "--no-progress", "--no-report"], out=out)
    return code, out.getvalue()


def crawl(tmp_path: Path, engine: str) -> tuple[str, str]:
    """The crawl stage (then extract) against the local test site on ``engine``: (the
    output folder, the site's URL)."""
    from tests.httpsite import Site

    with Site(slow_s=1.5) as site:
        config = tmp_path / f"crawl-{engine}.yaml"
        config.write_text(f"""
output: {tmp_path / engine}
crawl:
  seeds: ["{site.url}/", "{site.url}/missing.html"]
  user_agent: "testbot/1.0"
  min_delay_s: 0.0
  timeout_s: 1.0
  max_retries: 1
  backoff_s: 0.05
  max_bytes: 1000000
  max_depth: 3
extract: {{min_chars: 20}}
beam_args: ["--runner=FnApiRunner"]
""")
        code, table = run(["--config", str(config), "--engine", engine])
    assert code == 0, table
    return str(tmp_path / engine), site.url


def crawl_view(out: str, site: str) -> dict:
    """What a crawl must agree on (the site's port and fetch times aside)."""
    def rows(sub: str) -> list[dict]:
        return [r for f in sorted(glob.glob(f"{out}/{sub}/*.parquet")) for r in pq.read_table(f).to_pylist()]

    port = site.rsplit(":", 1)[1]
    log = sorted((r["url"].replace(site, ""), r["attempt"], r["status"],
                  (r["error"] or "").replace(f"port={port}", "port=PORT"),
                  (r["redirect_to"] or "").replace(site, ""), r["depth"]) for r in rows("crawl/fetch_log"))
    frontier = sorted(line.strip() for f in glob.glob(f"{out}/crawl/frontier/*.txt") for line in open(f))
    docs = sorted((d["url"].replace(site, ""), d["text"]) for d in rows("docs/extract"))
    counts = {s: json.loads(Path(out, "manifests", f"{s}.json").read_text())["counts"] for s in ("crawl", "extract")}
    return {"log": log, "frontier": frontier, "docs": docs, "counts": counts}


def cluster_cli(kind: str, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """``python -m pipelines.engines cluster KIND ARGS`` with ``env`` (its
    ``TOKENFACTORY_CLUSTERS`` says where the cluster lives)."""
    return subprocess.run([sys.executable, "-m", "pipelines.engines", "cluster", kind, *args], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300)


def left_running(pids: list[int]) -> list[int]:
    """Those of ``pids`` or of their process groups (executors) still running."""
    from pipelines import clusters

    return sorted({p for pid in pids for p in [pid, *clusters.group_members(pid)] if clusters._alive(p)})


@contextlib.contextmanager
def cluster_up(kind: str, folder: Path) -> Iterator[dict]:
    """A cluster of ``kind`` in ``folder`` (``TOKENFACTORY_CLUSTERS`` of this process too,
    which the engines' options read) while the block runs: its status, with ``env`` for
    the commands run on it; down at the end, and nothing of it left running."""
    from pipelines import clusters

    env = {**os.environ, "TOKENFACTORY_CLUSTERS": str(folder)}
    before = os.environ.get("TOKENFACTORY_CLUSTERS")
    os.environ["TOKENFACTORY_CLUSTERS"] = str(folder)
    try:
        up = cluster_cli(kind, "up", env=env)
        assert up.returncode == 0, up.stderr[-3000:]
        yield {**json.loads(cluster_cli(kind, "status", env=env).stdout), "env": env}
    finally:
        state = clusters.read_state(folder / kind) or {"processes": {}}
        pids = [int(p) for p in state["processes"].values()]
        down = cluster_cli(kind, "down", env=env)
        if before is None:
            os.environ.pop("TOKENFACTORY_CLUSTERS", None)
        else:
            os.environ["TOKENFACTORY_CLUSTERS"] = before
        assert down.returncode == 0, down.stderr
        assert left_running(pids) == [], f"cluster processes outlived `cluster {kind} down`"
