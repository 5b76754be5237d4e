"""End to end: ``python -m pipelines.run`` on real WARC files and on a local website."""

from __future__ import annotations

import glob
import io
import json
import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipelines.run import main
from tests.conftest import shared
from tests.httpsite import UTF8_TEXT, Site
from transforms.doc import DOC_SCHEMA


def read_rows(pattern: str) -> list[dict]:
    rows = []
    for path in sorted(glob.glob(pattern)):
        rows.extend(pq.read_table(path).to_pylist())
    return rows


def warc_config(tmp_path: Path, extra: str = "") -> str:
    warc = shared("warc")
    path = tmp_path / "job.yaml"
    path.write_text(f"""
output: {tmp_path / 'out'}
inputs:
  - format: warc
    path: {warc}/*.warc.gz
  - format: warc
    path: {warc}/*.warc
  - format: arc
    path: {warc}/*.arc.gz
beam_args: ["--runner=FnApiRunner"]
{extra}""")
    return str(path)


def run(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    code = main(argv + ["--log-level", "WARNING"], out=out)
    return code, out.getvalue()


def test_warc_job_end_to_end_and_resume(tmp_path):
    config = warc_config(tmp_path)
    code, table = run(["--config", config])
    assert code == 0, table
    out = tmp_path / "out"
    manifest = json.loads((out / "manifests" / "extract.json").read_text())
    counts = manifest["counts"]
    assert counts["records_in"] == counts["out"] + counts["rejected"] + counts["failed"]
    # 16 CC + 1 whirlwind + 24 dolma (incl. 1 text/plain resource) + 3 warcio + 1 clipped
    assert counts["records_in"] == 45 and counts["failed"] == 1
    assert counts["rejected_by_reason"] == {"content_type": 2}
    docs = read_rows(f"{out}/docs/extract/part-*.parquet")
    assert len(docs) == counts["out"] == 42
    assert pq.read_schema(glob.glob(f"{out}/docs/extract/*.parquet")[0]).equals(DOC_SCHEMA)
    assert all(d["text"] and d["id"] for d in docs)
    assert any("Escopete" in d["text"] for d in docs)
    failed = read_rows(f"{out}/failed/extract/*.parquet")
    assert failed[0]["source"].endswith("resiliparse_clipped.warc.gz") and failed[0]["offset"] == 0
    assert len(failed[0]["raw"]) == os.path.getsize(shared("warc", "resiliparse_clipped.warc.gz"))
    rejected = read_rows(f"{out}/rejected/extract/*.parquet")
    assert {r["reason"] for r in rejected} == {"content_type"}
    assert "extract" in table and "in=out+r+f" in table
    # which extractor made each HTML page's text: the cascade's fallback share
    methods = {k: v for k, v in manifest["extra"]["counters"].items() if k.startswith("extracted_")}
    assert set(methods) <= {"extracted_resiliparse", "extracted_trafilatura"}
    assert methods.get("extracted_resiliparse", 0) > 0 and methods.get("extracted_trafilatura", 0) > 0
    assert sum(methods.values()) <= counts["records_in"] and "extracted_resiliparse=" in table

    code, table = run(["--config", config])
    assert code == 0 and "resumed (manifest matched)" in table

    code, table = run(["--config", warc_config(tmp_path, "extract:\n  min_chars: 500\n")])
    assert code == 0 and "ran in" in table and "too_short" in table

    graph = json.loads((out / "manifests" / "extract.json").read_text())["extra"]["graph"]
    assert graph["pipelines"] == 1 and graph["transforms"] > 20 and graph["build_cpu_s"] > 0
    assert "translate_cpu_s" not in graph  # measured only when asked (benchmarks.bench_pipeline --stage-cpu)

    os.environ["TOKENFACTORY_MEASURE_TRANSLATION"] = "1"
    try:
        code, table = run(["--config", config, "--force"])
    finally:
        del os.environ["TOKENFACTORY_MEASURE_TRANSLATION"]
    assert code == 0 and "ran in" in table
    assert len(glob.glob(f"{out}/docs/extract/*.parquet")) == 1  # old shards were cleared
    again = json.loads((out / "manifests" / "extract.json").read_text())["extra"]["graph"]
    assert (again["pipelines"], again["transforms"]) == (1, graph["transforms"]) and again["translate_cpu_s"] > 0


def test_crawl_then_extract_end_to_end(tmp_path):
    with Site(slow_s=1.5) as site:
        config = tmp_path / "crawl.yaml"
        config.write_text(f"""
output: {tmp_path / 'out'}
crawl:
  seeds: ["{site.url}/", "{site.url}/missing.html"]
  user_agent: "testbot/1.0"
  min_delay_s: 0.0
  timeout_s: 1.0
  max_retries: 1
  backoff_s: 0.05
  max_bytes: 1000000
  max_depth: 3
extract:
  min_chars: 20
beam_args: ["--runner=FnApiRunner"]
""")
        code, table = run(["--config", str(config)])
    assert code == 0, table
    out = tmp_path / "out"
    crawl = json.loads((out / "manifests" / "crawl.json").read_text())["counts"]
    assert crawl["records_in"] == crawl["out"] + crawl["rejected"] + crawl["failed"]
    assert crawl["failed_by_error"] == {"redirect_loop": 1, "timeout": 1}
    assert len(glob.glob(f"{out}/crawl/warc/*.warc.gz")) == 1
    log = read_rows(f"{out}/crawl/fetch_log/*.parquet")
    assert any(r["url"].endswith("/robots.txt") for r in log)
    assert any(r["url"].endswith("/flaky.html") and r["status"] == 500 for r in log)
    frontier = {line.strip() for f in glob.glob(f"{out}/crawl/frontier/*.txt") for line in open(f)}
    assert frontier == {"http://other.example/page", "http://elsewhere.example/landing"}
    docs = {d["url"].rsplit("/", 1)[-1]: d for d in read_rows(f"{out}/docs/extract/*.parquet")}
    assert UTF8_TEXT.strip()[:40] in docs["charset.html"]["text"]
    assert docs["charset.html"]["title"] == "Umlaute"
    extract = json.loads((out / "manifests" / "extract.json").read_text())["counts"]
    assert extract["records_in"] == extract["out"] + extract["rejected"] + extract["failed"]
    assert extract["rejected_by_reason"]["http_status"] >= 3  # 404, 301, 302 responses


def jsonl_config(tmp_path: Path, runner_args: list[str]) -> str:
    data = tmp_path / "in"
    data.mkdir()
    for i in range(4):
        lines = [json.dumps({"id": f"{i}-{j}", "text": f"document {i}-{j} " * 5}) for j in range(25)]
        (data / f"part{i}.jsonl").write_text("\n".join(lines + ["{broken"]) + "\n")
    path = tmp_path / "job.yaml"
    path.write_text(f"output: {tmp_path / 'out'}\ninputs:\n  - format: jsonl\n    path: {data}/*.jsonl\n"
                    f"beam_args: {json.dumps(runner_args)}\n")
    return str(path)


@pytest.mark.parametrize("runner_args", [
    ["--runner=FnApiRunner", "--direct_running_mode=multi_processing", "--direct_num_workers=2"],
    ["--runner=PortableRunner", "--job_endpoint=embed", "--environment_type=LOOPBACK"],
], ids=["multi_processing", "portable_loopback"])
def test_smoke_other_runners(tmp_path, runner_args):
    code, table = run(["--config", jsonl_config(tmp_path, runner_args)])
    assert code == 0, table
    counts = json.loads((tmp_path / "out" / "manifests" / "extract.json").read_text())["counts"]
    assert (counts["records_in"], counts["out"], counts["failed"]) == (104, 100, 4)
    assert counts["failed_by_error"] == {"bad_record": 4}  # from the runner's metrics
    assert len(read_rows(f"{tmp_path}/out/failed/extract/*.parquet")) == 4


def test_clean_stage_end_to_end_with_trained_models(tmp_path, capsys):
    """extract -> pipelines.anomaly train -> pipelines.quality train -> clean, per-language routing."""
    from pipelines.anomaly import main as anomaly_main
    from pipelines.quality import main as quality_main

    warc = shared("warc")
    config = tmp_path / "job.yaml"
    config.write_text(f"""
output: {tmp_path / 'out'}
inputs:
  - format: warc
    path: {warc}/*.warc.gz
clean:
  langid:
    model: {shared('models', 'lid.176.ftz')}
    languages: [en, es, de]
    threshold: 0.5
    route_by_language: true
  anomaly:
    model: {tmp_path / 'models' / 'anomaly'}
    contamination: 0.1
    flag_rate: 0.1
  quality:
    model: {tmp_path / 'models' / 'quality.bin'}
    threshold: 0.05
beam_args: ["--runner=FnApiRunner"]
""")
    code, table = run(["--config", str(config), "--stages", "extract"])
    assert code == 0, table
    book = str(shared("text", "pg1342_pride_and_prejudice.txt"))
    assert anomaly_main(["train", "--config", str(config), "--reference", book, "--steps", "100"]) == 0
    current = (tmp_path / "models" / "anomaly" / "CURRENT").read_text()
    capsys.readouterr()
    # the same corpus sample, reference, settings and code: reused, nothing trained
    assert anomaly_main(["train", "--config", str(config), "--reference", book, "--steps", "100"]) == 0
    assert "anomaly detector unchanged: reusing" in capsys.readouterr().out
    assert (tmp_path / "models" / "anomaly" / "CURRENT").read_text() == current
    assert quality_main(["train", "--config", str(config), "--positive",
                         str(shared("text", "pg1342_pride_and_prejudice.txt"))]) == 0
    code, table = run(["--config", str(config)])
    assert code == 0, table
    out = tmp_path / "out"
    counts = json.loads((out / "manifests" / "clean.json").read_text())["counts"]
    assert counts["records_in"] == 40
    assert counts["records_in"] == counts["out"] + counts["rejected"] + counts["failed"]
    kept = read_rows(f"{out}/docs/clean/*/*.parquet")
    assert len(kept) == counts["out"] > 0
    for lang in {d["lang"] for d in kept}:
        assert glob.glob(f"{out}/docs/clean/{lang}/part-*.parquet")
    assert all(d["signals"] and d["anomaly_score"] is not None and d["quality_score"] is not None
               and d["anomaly_scores"]["perplexity"] is not None for d in kept)
    rejected = read_rows(f"{out}/rejected/clean/*.parquet")
    assert all(r["reason"] and r["reason_detail"] for r in rejected)
    assert {"language", "anomaly"} & {r["reason"] for r in rejected}
    code, table = run(["--config", str(config)])
    assert "resumed" in table.split("clean", 1)[1].splitlines()[0]


def test_a_failing_stage_ends_the_job_cleanly_and_resumes(tmp_path, capsys):
    """Every document too short → the tokenizer has nothing to train on: exit 1, the
    finished stages' table, a one-line reason naming the stage; a fixed rerun resumes."""
    data = tmp_path / "docs.jsonl"
    data.write_text("".join(json.dumps({"id": f"d{i}", "text": f"short text number {i}. " * 3}) + "\n"
                            for i in range(20)))
    config = tmp_path / "job.yaml"
    body = (f"output: {tmp_path / 'out'}\ninputs:\n  - format: jsonl\n    path: {data}\n"
            "tokenize:\n  vocab_size: 400\nbeam_args: ['--runner=FnApiRunner']\n")
    config.write_text(body + "extract:\n  min_chars: 100000\n")
    code, table = run(["--config", str(config), "--no-progress"])
    assert code == 1
    assert "extract" in table and "ran in" in table and "tokenizer " not in table
    err = capsys.readouterr().err
    assert "stage tokenizer failed on FnApiRunner: ValueError: no documents to train the tokenizer on" in err
    config.write_text(body + "extract:\n  min_chars: 10\n")
    code, table = run(["--config", str(config), "--no-progress"])
    assert code == 0 and "tokenize " in table
