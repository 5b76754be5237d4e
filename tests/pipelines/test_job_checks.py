"""The job's own checks: a stage whose records mostly fail ends the job with exit 1 and
its first errors; counts are never reconciled without the runner's metrics."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

import pipelines.job as job
from pipelines.run import main


def jsonl_config(tmp_path: Path, text_field: str, max_error_ratio: float = 0.05, lines: int = 50) -> str:
    data = tmp_path / "docs.jsonl"
    # "body" is in every record but not a string: with text_field: body every record fails
    # in the reader (a field missing from the first record is a config error, test_config.py)
    data.write_text("".join(json.dumps({"id": f"d{i}", "text": f"Document number {i} has some words.", "body": i})
                            + "\n" for i in range(lines)))
    config = tmp_path / "job.yaml"
    config.write_text(f"""
output: {tmp_path / 'out'}
inputs:
  - {{format: jsonl, path: "{data}", text_field: {text_field}}}
stages: [extract]
extract: {{max_error_ratio: {max_error_ratio}}}
beam_args: ["--runner=FnApiRunner"]
""")
    return str(config)


def test_every_record_failing_in_the_reader_fails_the_job(tmp_path, capsys):
    out = io.StringIO()
    code = main(["--config", jsonl_config(tmp_path, "body"), "--log-level", "ERROR"], out=out)
    err = capsys.readouterr().err
    assert code == 1
    assert "stage extract failed" in err and "50 of 50 records failed (100.0% > max_error_ratio 0.05)" in err
    assert "body" in err.split("the first errors:")[1]  # the reader's message names the missing field
    assert "extract" in out.getvalue() and "50" in out.getvalue()  # the table shows the stage's counts
    assert not (tmp_path / "out" / "manifests" / "extract.json").exists()  # it reruns after a fix
    # with the right field the same command resumes nothing and runs the stage
    assert main(["--config", jsonl_config(tmp_path, "text"), "--log-level", "ERROR"], out=io.StringIO()) == 0


def test_failures_up_to_the_ratio_are_allowed(tmp_path):
    assert main(["--config", jsonl_config(tmp_path, "body", max_error_ratio=1.0),
                 "--log-level", "ERROR"], out=io.StringIO()) == 0


def test_error_ratio_decision_boundaries():
    from pipelines.manifest import StageCounts

    class Config:  # the two fields the check reads
        class extract:  # noqa: N801
            max_error_ratio = 0.25
        output = "/nonexistent"

    def report(stage: str, records_in: int, failed: int) -> job.StageReport:
        return job.StageReport(stage, StageCounts(records_in, records_in - failed, 0, failed), False, 0.0, ())

    job.check_error_ratio(Config, report("clean", 4, 1))  # 25% is allowed
    job.check_error_ratio(Config, report("clean", 0, 0))
    job.check_error_ratio(Config, report("crawl", 4, 4))  # fetch failures are outcomes
    with pytest.raises(job.TooManyFailures, match="2 of 4 records failed"):
        job.check_error_ratio(Config, report("clean", 4, 2))


def test_no_metrics_fails_instead_of_reconciling_by_construction(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(job, "metric_totals", lambda result, stage: None)  # a runner without metrics
    code = main(["--config", jsonl_config(tmp_path, "text"), "--log-level", "ERROR"], out=io.StringIO())
    err = capsys.readouterr().err
    assert code == 1 and "MetricsMissing" in err and "cannot be reconciled" in err
    assert not (tmp_path / "out" / "manifests" / "extract.json").exists()


def test_a_stage_whose_counts_do_not_reconcile_exits_1(tmp_path, monkeypatch):
    """A runner that reports one record more than the stage wrote: the table says
    MISMATCH and the job exits 1, not 0."""
    real = job.metric_totals

    def one_more_in(result, stage):
        totals = real(result, stage)
        return {**totals, "records_in": totals["records_in"] + 1}

    monkeypatch.setattr(job, "metric_totals", one_more_in)
    out = io.StringIO()
    code = main(["--config", jsonl_config(tmp_path, "text"), "--log-level", "ERROR", "--no-report"], out=out)
    assert code == 1 and "MISMATCH" in out.getvalue()


def test_an_absent_input_counter_is_zero_not_the_sum(tmp_path):
    """Files written but no records_in counter: the counts must not reconcile."""
    from pipelines.stages import StagePlan

    plan = StagePlan(name="tokenizer", config_hash="x", inputs=(), fingerprint="f", build=lambda p: None)
    counts, _ = job.collect_counts(str(tmp_path), plan, {"records_out": 5})
    assert counts.records_in == 0 and counts.out == 5 and not counts.reconciles


def test_pages_cut_at_the_size_limit_are_counted_and_marked(tmp_path):
    """A page over read.max_payload_bytes is cut (not silently): Doc.truncated and the
    extract stage's truncated_payload counter, shown in the table."""
    import pyarrow.parquet as pq

    from tests.conftest import shared

    config = tmp_path / "job.yaml"
    config.write_text(f"""
output: {tmp_path / 'out'}
inputs:
  - {{format: warc, path: "{shared('warc')}/resiliparse_warcfile.warc.gz"}}
stages: [extract]
read: {{max_payload_bytes: 20000}}
beam_args: ["--runner=FnApiRunner"]
""")
    table = io.StringIO()
    assert main(["--config", str(config), "--log-level", "ERROR"], out=table) == 0
    out = tmp_path / "out"
    rows = [r for f in sorted((out / "docs" / "extract").glob("*.parquet"))
            for r in pq.read_table(f, columns=["id", "truncated"]).to_pylist()]
    cut = sum(r["truncated"] for r in rows)
    manifest = json.loads((out / "manifests" / "extract.json").read_text())
    counted = manifest["extra"]["counters"]["truncated_payload"]
    assert 0 < cut <= counted < 16 and cut < len(rows)  # some of the 16 pages are over 20 KB
    assert f"truncated_payload={counted}" in table.getvalue()


def test_log_lines_and_tracebacks_are_redacted():
    import logging

    from pipelines.run import RedactingFilter

    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(RedactingFilter())
    log = logging.getLogger("tokenfactory.test.redact")
    log.addHandler(handler)
    log.setLevel(logging.INFO)  # whatever level earlier tests left on the root logger
    log.propagate = False
    try:
        log.warning("fetching %s", "s3://AKIAKEY:se/cr+et@bucket/x.jsonl")
        try:
            raise OSError("cannot open https://user:hunter2@example.com/a")
        except OSError:
            log.exception("failed")
    finally:
        log.removeHandler(handler)
    text = stream.getvalue()
    assert "se/cr+et" not in text and "hunter2" not in text and "AKIAKEY" not in text
    assert "s3://***@bucket/x.jsonl" in text and "https://***@example.com/a" in text
