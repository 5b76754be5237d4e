"""The job runner's decisions without a Beam pipeline: stages whose ``runner`` writes real
Parquet outputs and returns counter totals, as a stage made of several pipelines does.
Resume or rerun, what is cleared first, what the manifest records, the error-ratio
limit and its message, the counts that do and do not reconcile, the failure of a stage
in a job, and what ``pipelines.run`` prints and exits with (fast enough to run against
every mutant of job.py and run.py)."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import pipelines.job as job
import pipelines.run as run
from pipelines.config import load_config
from pipelines.manifest import StageCounts, read_manifest
from pipelines.stages import StagePlan


def job_config(tmp_path: Path, max_error_ratio: float = 0.25, stages: str = "[extract]", sections: str = ""):
    tmp_path.mkdir(parents=True, exist_ok=True)
    data = tmp_path / "docs.jsonl"
    data.write_text('{"id": "d0", "text": "x"}\n')
    path = tmp_path / "job.yaml"
    path.write_text(f"""
output: {tmp_path / 'out'}
inputs:
  - {{format: jsonl, path: "{data}"}}
stages: {stages}
extract: {{max_error_ratio: {max_error_ratio}}}
beam_args: ["--runner=FnApiRunner", "--direct_num_workers=1"]
{sections}""")
    return load_config(str(path))


def write_rows(directory: Path, n: int, name: str = "part-0.parquet", error: str = "boom") -> None:
    """``n`` rows in a Parquet file, with the columns a failure row has."""
    directory.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"error_type": ["ValueError"] * n, "error": [f"{error} {i}" for i in range(n)],
                             "source": [f"in-{i}.jsonl" for i in range(n)], "offset": list(range(n))}),
                   directory / name)


class Stage:
    """A stage's runner: writes ``out``, ``rejected`` and ``failed`` rows under the
    output and returns the counter totals it was given; counts its calls."""

    def __init__(self, output: str, name: str = "extract", out: int = 6, rejected: int = 3, failed: int = 1,
                 totals: dict | None = None, error: str = "boom") -> None:
        self.output, self.name, self.calls = Path(output), name, 0
        self.rows = (out, rejected, failed)
        self.error = error
        self.totals = totals if totals is not None else {
            "records_in": out + rejected + failed, "records_out": out, "rejected_short": 2, "rejected_lang": 1,
            "failed_ValueError": failed, "pii_email": 4, "skipped_dup": 0}

    def __call__(self, options) -> dict:
        self.calls += 1
        out, rejected, failed = self.rows
        write_rows(self.output / "docs" / self.name, out)
        if rejected:
            write_rows(self.output / "rejected" / self.name, rejected)
        if failed:
            write_rows(self.output / "failed" / self.name, failed, error=self.error)
        return dict(self.totals)

    def plan(self, config_hash: str = "h1", fingerprint: str = "f1", **kw) -> StagePlan:
        return StagePlan(name=self.name, config_hash=config_hash, inputs=("in-0.jsonl",), fingerprint=fingerprint,
                         build=lambda p: None, runner=self, **kw)


def options(config):
    return job.pipeline_options(config, [])


def test_a_stage_runs_counts_its_files_and_writes_its_manifest_last(tmp_path):
    config = job_config(tmp_path)
    stage = Stage(config.output)
    extra_file = str(tmp_path / "out" / "extra.json")
    plan = stage.plan(info=lambda: {"model_sha": "abc"}, outputs=lambda totals: [extra_file] * (totals["pii_email"] // 4))
    Path(extra_file).parent.mkdir(parents=True, exist_ok=True)
    Path(extra_file).write_text("{}")
    report = job.run_stage(config, plan, options(config), force=False)
    assert stage.calls == 1 and not report.skipped and report.seconds >= 0
    assert report.counts == StageCounts(10, 6, 3, 1, {"lang": 1, "short": 2}, {"ValueError": 1})
    assert report.counts.reconciles
    assert report.counters == (("pii_email", 4), ("skipped_dup", 0))  # sorted, none of the counted ones
    out = tmp_path / "out"
    assert list(report.outputs) == [str(out / "docs" / "extract" / "part-0.parquet"),
                                    str(out / "rejected" / "extract" / "part-0.parquet"),
                                    str(out / "failed" / "extract" / "part-0.parquet"), extra_file]
    manifest = read_manifest(config.output, "extract")
    assert manifest.counts == report.counts and manifest.outputs == list(report.outputs)
    assert (manifest.config_hash, manifest.inputs_fingerprint, manifest.inputs) == ("h1", "f1", ["in-0.jsonl"])
    assert manifest.extra["counters"] == {"pii_email": 4, "skipped_dup": 0} and manifest.extra["model_sha"] == "abc"
    assert manifest.runner == "FnApiRunner" and manifest.started_at <= manifest.finished_at
    assert manifest.extra["seconds"] == round(manifest.extra["seconds"], 3)


class Clock:
    """``time.perf_counter`` that advances a fixed step at each call."""

    def __init__(self, start: float, step: float) -> None:
        self.now, self.step = start, step

    def __call__(self) -> float:
        value, self.now = self.now, self.now + self.step
        return value


def test_the_report_and_the_manifest_time_the_stage_from_its_start(tmp_path, monkeypatch):
    config = job_config(tmp_path)
    monkeypatch.setattr(job.time, "perf_counter", Clock(1000.0, 2.34567))
    report = job.run_stage(config, Stage(config.output).plan(), options(config), force=False)
    assert report.seconds == pytest.approx(2.34567)  # the first reading after the runner, less the start
    assert read_manifest(config.output, "extract").extra["seconds"] == 2.346


def test_the_runner_gets_the_options_and_the_manifest_the_code_version(tmp_path):
    from pipelines.manifest import code_version

    config = job_config(tmp_path)
    given = []
    stage = Stage(config.output)
    plan = stage.plan()
    plan = StagePlan(**{**plan.__dict__, "runner": lambda opts: given.append(opts) or stage(opts)})
    opts = options(config)
    job.run_stage(config, plan, opts, force=False)
    assert given == [opts]
    assert read_manifest(config.output, "extract").code_version == code_version()


def test_a_manifest_without_counters_resumes_with_none(tmp_path):
    config = job_config(tmp_path)
    stage = Stage(config.output)
    job.run_stage(config, stage.plan(), options(config), force=False)
    path = tmp_path / "out" / "manifests" / "extract.json"
    data = json.loads(path.read_text())
    del data["extra"]["counters"]  # written by a version that did not record them
    path.write_text(json.dumps(data))
    again = job.run_stage(config, stage.plan(), options(config), force=False)
    assert again.skipped and again.counters == () and stage.calls == 1


def test_the_progress_line_shows_only_when_asked(tmp_path, capsys):
    config = job_config(tmp_path)
    stage = Stage(config.output)
    job.run_stage(config, stage.plan(), options(config), force=False)
    assert capsys.readouterr().err == ""
    job.run_stage(config, stage.plan(input_bytes=10_000), options(config), force=True, show_progress=True)
    err = capsys.readouterr().err
    assert err.startswith("extract:") and err.endswith("\n") and err.count("\n") == 1
    assert "  0.0% of input" in err  # the plan's input size: the line shows the share read


def test_run_stage_logs_what_it_decided(tmp_path, monkeypatch, caplog):
    config = job_config(tmp_path)
    stage = Stage(config.output)
    monkeypatch.setattr(job.time, "perf_counter", Clock(0.0, 1.25))
    with caplog.at_level(logging.INFO, logger="pipelines.job"):
        job.run_stage(config, stage.plan(), options(config), force=False)
        job.run_stage(config, stage.plan(), options(config), force=False)
    assert [r.getMessage() for r in caplog.records if r.name == "pipelines.job"] == [
        "stage extract: running on 1 inputs",
        "stage extract: done in 1.2s (in=10 out=6 rejected=3 failed=1)",
        "stage extract: manifest matches config and inputs, skipped"]
    caplog.clear()
    odd = Stage(config.output, totals={"records_in": 12, "failed_ValueError": 1})
    with caplog.at_level(logging.INFO, logger="pipelines.job"):
        job.run_stage(config, odd.plan(fingerprint="f9"), options(config), force=False)
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert errors == ["stage extract does not reconcile: in=12 out=6 rejected=3 failed=1"]


def test_a_matching_manifest_resumes_and_anything_else_reruns(tmp_path):
    config = job_config(tmp_path)
    stage = Stage(config.output)
    first = job.run_stage(config, stage.plan(), options(config), force=False)
    again = job.run_stage(config, stage.plan(), options(config), force=False)
    assert stage.calls == 1 and again.skipped and again.seconds == 0.0
    assert (again.counts, again.outputs, again.counters) == (first.counts, first.outputs, first.counters)
    for changed in (dict(config_hash="h2"), dict(fingerprint="f2")):
        job.run_stage(config, stage.plan(**changed), options(config), force=False)
    assert stage.calls == 3
    assert not job.run_stage(config, stage.plan(fingerprint="f2"), options(config), force=True).skipped
    assert stage.calls == 4
    (tmp_path / "out" / "rejected" / "extract" / "part-0.parquet").unlink()  # an output gone: rerun
    assert not job.run_stage(config, stage.plan(fingerprint="f2"), options(config), force=False).skipped
    assert stage.calls == 5
    # another code version does not resume either
    manifest_path = tmp_path / "out" / "manifests" / "extract.json"
    data = json.loads(manifest_path.read_text())
    data["code_version"] = "older"
    manifest_path.write_text(json.dumps(data))
    job.run_stage(config, stage.plan(fingerprint="f2"), options(config), force=False)
    assert stage.calls == 6


def test_old_outputs_and_owned_folders_are_cleared_before_a_stage_runs(tmp_path):
    config = job_config(tmp_path)
    out = tmp_path / "out"
    write_rows(out / "docs" / "extract", 5, name="stale.parquet")
    write_rows(out / "docs" / "clean", 2)  # another stage's: kept
    report = job.run_stage(config, Stage(config.output).plan(), options(config), force=False)
    assert report.counts.out == 6 and not (out / "docs" / "extract" / "stale.parquet").exists()
    assert (out / "docs" / "clean" / "part-0.parquet").exists()
    # the crawl stage owns crawl/: deleted whole before it runs
    (out / "crawl" / "frontier").mkdir(parents=True)
    (out / "crawl" / "frontier" / "x").write_text("old")
    job.clear_outputs(config.output, job.spec_of("crawl"))
    assert not (out / "crawl").exists() and (out / "docs" / "clean").exists()


def test_counts_that_do_not_reconcile_are_reported_and_recorded(tmp_path, caplog):
    config = job_config(tmp_path)
    stage = Stage(config.output, totals={"records_in": 11, "failed_ValueError": 1})
    with caplog.at_level(logging.ERROR, logger="pipelines.job"):
        report = job.run_stage(config, stage.plan(), options(config), force=False)
    assert report.counts == StageCounts(11, 6, 3, 1, {}, {"ValueError": 1}) and not report.counts.reconciles
    assert "stage extract does not reconcile: in=11 out=6 rejected=3 failed=1" in caplog.text
    assert read_manifest(config.output, "extract").counts == report.counts
    # a stage without document outputs counts its out from records_out
    plan = StagePlan(name="tokenizer", config_hash="x", inputs=(), fingerprint="f", build=lambda p: None)
    counts, outputs = job.collect_counts(config.output, plan, {"records_in": 3, "records_out": 3})
    assert counts == StageCounts(3, 3, 0, 0) and outputs == []
    with pytest.raises(job.MetricsMissing, match="stage tokenizer: the runner reported no metrics"):
        job.collect_counts(config.output, plan, None)


def test_more_failures_than_the_limit_end_the_stage_without_a_manifest(tmp_path):
    long_error = "abcdef   " * 100  # collapsed to single spaces, cut at 300 characters
    config = job_config(tmp_path, max_error_ratio=0.25)
    stage = Stage(config.output, out=1, rejected=0, failed=4, error=long_error,
                  totals={"records_in": 5, "failed_ValueError": 4})
    with pytest.raises(job.TooManyFailures) as raised:
        job.run_stage(config, stage.plan(), options(config), force=False)
    message = str(raised.value)
    assert message.startswith("4 of 5 records failed (80.0% > max_error_ratio 0.25); the first errors:\n  ValueError: ")
    lines = message.split("\n")
    assert len([l for l in lines if l.startswith("  ValueError: ")]) == 3  # the first three only
    first = lines[1]
    assert first.endswith(" [...] (in-0.jsonl@0)") and "  " not in first.strip()
    assert len(first) == len("  ValueError: ") + 300 + len(" [...] (in-0.jsonl@0)")
    assert lines[-1] == "(all of them in failed/extract/)"
    assert raised.value.report.counts.failed == 4 and read_manifest(config.output, "extract") is None
    failed_report = raised.value.report  # the report the job prints: every field, not only the counts
    assert (failed_report.stage, failed_report.skipped) == ("extract", False) and failed_report.seconds >= 0
    assert failed_report.outputs == (str(tmp_path / "out" / "docs" / "extract" / "part-0.parquet"),
                                     str(tmp_path / "out" / "failed" / "extract" / "part-0.parquet"))
    assert failed_report.counters == ()
    # exactly at the limit: allowed
    at = job_config(tmp_path / "at", max_error_ratio=0.8)
    ok = Stage(at.output, out=1, rejected=0, failed=4, totals={"records_in": 5, "failed_ValueError": 4})
    assert job.run_stage(at, ok.plan(), options(at), force=False).counts.failed == 4


def test_first_errors_reads_across_files_up_to_the_limit(tmp_path):
    failed = tmp_path / "failed" / "clean"
    write_rows(failed, 2, name="a.parquet", error="short")
    write_rows(failed, 3, name="b.parquet", error="other")
    assert job.first_errors(str(tmp_path), "clean") == [
        "ValueError: short 0 (in-0.jsonl@0)", "ValueError: short 1 (in-1.jsonl@1)",
        "ValueError: other 0 (in-0.jsonl@0)"]
    assert len(job.first_errors(str(tmp_path), "clean", limit=5)) == 5
    assert job.first_errors(str(tmp_path), "clean", limit=1) == ["ValueError: short 0 (in-0.jsonl@0)"]
    error = "x" * 300
    write_rows(tmp_path / "failed" / "tokenize", 1, error=error[:-2])  # "x...x 0": 300 characters
    assert job.first_errors(str(tmp_path), "tokenize") == [f"ValueError: {error[:-2]} 0 (in-0.jsonl@0)"]
    write_rows(tmp_path / "failed" / "label", 1, error=error[:-1])  # 301 characters: cut at 300
    assert job.first_errors(str(tmp_path), "label") == [f"ValueError: {error[:-1]}  [...] (in-0.jsonl@0)"]  # cut after the space


def test_the_runner_is_fnapi_unless_named_and_the_command_line_wins(tmp_path):
    config = job_config(tmp_path)
    assert job.pipeline_options(config, ["--runner=PrismRunner"]).get_all_options()["runner"] == "PrismRunner"
    assert job.pipeline_options(config, ["--runner", "SparkRunner"]).get_all_options()["runner"] == "SparkRunner"
    bare = SimpleNamespace(beam_args=())
    assert job.pipeline_options(bare, []).get_all_options()["runner"] == "FnApiRunner"
    assert job.pipeline_options(bare, ["--direct_num_workers=3"]).get_all_options()["direct_num_workers"] == 3
    assert job.pipeline_options(config, ["--direct_num_workers=2"]).get_all_options()["direct_num_workers"] == 2


def test_a_runner_without_metrics_gives_none(caplog):
    class NoMetrics:
        def metrics(self):
            raise NotImplementedError("no metrics here")

    with caplog.at_level(logging.WARNING, logger="pipelines.job"):
        assert job.metric_totals(NoMetrics(), "clean") is None
    assert "runner reported no metrics for clean: no metrics here" in caplog.text


def test_a_failing_stage_ends_the_job_with_the_reports_before_it(tmp_path, monkeypatch):
    config = job_config(tmp_path, stages="[extract, dedup_exact]", sections="dedup: {}\n")
    first = Stage(config.output)

    def broken(options):
        raise RuntimeError("engine said no " + "x" * 2000)

    plans = {"extract": first.plan(),
             "dedup_exact": StagePlan(name="dedup_exact", config_hash="c", inputs=(), fingerprint="f",
                                      build=lambda p: None, runner=broken)}
    monkeypatch.setattr(job, "plan_stage", lambda config, stage: plans[stage])
    seen: dict = {}
    real_store_for = job.store_for
    monkeypatch.setattr(job, "configure_filesystems", lambda cfg, args: seen.setdefault("filesystems", list(args)))
    monkeypatch.setattr(job, "store_for", lambda out, args: seen.setdefault("lease", list(args)) and real_store_for(out, args))
    with pytest.raises(job.StageFailed) as raised, caplog_at(logging.ERROR, "pipelines.job") as records:
        job.run_job(config, ["--s3_endpoint_url=http://127.0.0.1:9"])
    # the command line's options reach the driver's filesystems and the lease, after the config's
    assert seen == {"filesystems": ["--s3_endpoint_url=http://127.0.0.1:9"],
                    "lease": ["--runner=FnApiRunner", "--direct_num_workers=1", "--s3_endpoint_url=http://127.0.0.1:9"]}
    assert [(r.getMessage(), r.logged_exc_type) for r in records] == [("stage dedup_exact failed", RuntimeError)]
    failed = raised.value
    assert failed.stage == "dedup_exact" and [r.stage for r in failed.reports] == ["extract"]
    assert str(failed).startswith("stage dedup_exact failed on FnApiRunner: RuntimeError: engine said no x")
    assert str(failed).endswith("x [...]") and len(str(failed)) == len(
        "stage dedup_exact failed on FnApiRunner: RuntimeError: ") + 1000 + len(" [...]")
    assert isinstance(failed.error, RuntimeError)
    assert read_manifest(config.output, "extract") is not None and read_manifest(config.output, "dedup_exact") is None
    # too many failures: the failing stage's own report comes with it
    plans["dedup_exact"] = Stage(config.output, name="dedup_exact", out=0, rejected=0, failed=2,
                                 totals={"records_in": 2, "failed_ValueError": 2}).plan()
    with pytest.raises(job.StageFailed) as raised, caplog_at(logging.ERROR, "pipelines.job") as records:
        job.run_job(config)
    assert [r.stage for r in raised.value.reports] == ["extract", "dedup_exact"]
    assert raised.value.reports[0].skipped and "2 of 2 records failed" in str(raised.value)
    assert str(raised.value).startswith("stage dedup_exact failed on FnApiRunner: TooManyFailures: 2 of 2")
    assert [r.getMessage().split("\n")[0] for r in records] == [
        "stage dedup_exact: 2 of 2 records failed (100.0% > max_error_ratio 0.25); the first errors:"]
    assert str(job.StageFailed("s", ValueError("v"), [])) == "stage s failed: ValueError: v"
    # every stage done: one report each, in order
    plans["dedup_exact"] = Stage(config.output, name="dedup_exact").plan()
    assert [(r.stage, r.skipped) for r in job.run_job(config)] == [("extract", True), ("dedup_exact", False)]


# ---------------------------------------------------------------- what pipelines.run prints

def report(stage: str, counts: StageCounts, skipped: bool = False, seconds: float = 1.25,
           counters: tuple = ()) -> job.StageReport:
    return job.StageReport(stage, counts, skipped, seconds, (), counters)


def test_the_table_stays_aligned_with_long_stage_names_and_ends_with_the_totals():
    table = run.format_table([report("extract", StageCounts(10, 6, 4, 0)),
                              report("dedup_minhash", StageCounts(6, 5, 1, 0), seconds=2.0)],
                             total=(75.5, 3725.0)).split("\n")
    header = f"{'stage':<13} {'in':>9} {'out':>9} {'rejected':>9} {'failed':>9}  {'check':<11} status"
    assert table[0] == header
    assert table[2] == f"{'extract':<13} {10:>9} {6:>9} {4:>9} {0:>9}  {'in=out+r+f':<11} ran in 1.2s"
    assert table[3] == f"dedup_minhash {6:>9} {5:>9} {1:>9} {0:>9}  {'in=out+r+f':<11} ran in 2.0s"
    assert table[4] == "-" * len(header)
    assert table[5].startswith("total: 1m16s wall, 1h02m05s CPU (this process since it started")
    assert run.format_table([report("x", StageCounts(1, 1, 0, 0))]).split("\n")[0].startswith("stage      ")
    cpu = run.format_table([job.StageReport("x", StageCounts(1, 1, 0, 0), False, 1.25, (), (), 3.5)])
    assert cpu.split("\n")[2].endswith("ran in 1.2s, CPU 3.5s")
    wall, cpu = run.run_totals()
    assert wall > 0 and cpu > 0
    assert [run._clock(s) for s in (0.04, 59.94, 60.0, 3599.4, 3600.0)] == [
        "0.0s", "59.9s", "1m00s", "59m59s", "1h00m00s"]


def test_the_table_shows_counts_checks_reasons_and_noted_counters():
    table = run.format_table([
        report("extract", StageCounts(10, 6, 3, 1, {"short": 2, "lang": 1}, {"ValueError": 1}),
               counters=(("pii_email", 4), ("pii_ip", 0), ("other", 9), ("skipped_dup", 2))),
        report("clean", StageCounts(5, 5, 0, 0), skipped=True),
        report("dedup", StageCounts(5, 3, 1, 0)),
    ]).split("\n")
    header = f"{'stage':<10} {'in':>9} {'out':>9} {'rejected':>9} {'failed':>9}  {'check':<11} status"
    assert table[0] == header and table[1] == "-" * len(header)
    assert table[2] == f"{'extract':<10} {10:>9} {6:>9} {3:>9} {1:>9}  {'in=out+r+f':<11} ran in 1.2s"
    assert table[3] == f"{'':<10}   rejected: short=2, lang=1"
    assert table[4] == f"{'':<10}   failed:   ValueError=1"
    assert table[5] == f"{'':<10}   noted:    pii_email=4, skipped_dup=2"
    assert table[6].endswith("in=out+r+f  resumed (manifest matched)")
    assert table[7].endswith(f"{'MISMATCH':<11} ran in 1.2s") and len(table) == 8
    noted = run.format_table([report("x", StageCounts(0, 0, 0, 0), counters=tuple(
        (f"{p}n", 1) for p in ("pii_", "skipped_", "extracted_", "truncated_", "label_", "review_", "missing_",
                               "repeat_", "other_")))]).split("\n")[-1]
    assert noted.endswith("noted:    pii_n=1, skipped_n=1, extracted_n=1, truncated_n=1, label_n=1, review_n=1, "
                          "missing_n=1, repeat_n=1")


def test_the_review_queue_line_names_the_queue_of_the_label_stage(tmp_path):
    out = str(tmp_path)
    assert run.review_queue_line(out, [report("extract", StageCounts(1, 1, 0, 0))]) == ""
    label = report("label", StageCounts(1, 1, 0, 0), counters=(("review_queued", 3),))
    assert run.review_queue_line(out, [label]) == "review queue: none (no uncertain document to queue)"
    from pipelines.manifest import Manifest, write_manifest

    queue = str(tmp_path / "review" / "queue-1")
    write_manifest(out, Manifest("label", "h", "f", "v", StageCounts(1, 1, 0, 0), [], [], "", "", "r",
                                 {"review_queue": queue}))
    assert run.review_queue_line(out, [label]) == (
        f"review queue: {queue} (3 documents)\n"
        f"  review them: python -m pipelines.review serve --queue {queue} --out answers.jsonl")
    none_queued = report("label", StageCounts(1, 1, 0, 0), counters=(("review_queued", 0),))
    assert run.review_queue_line(out, [none_queued]).startswith("review queue: none")
    write_manifest(out, Manifest("label", "h", "f", "v", StageCounts(1, 1, 0, 0), [], [], "", "", "r",
                                 {"review_queue": "s3://KEY:SECRET@bucket/review/q"}))
    line = run.review_queue_line(out, [label])
    assert "SECRET" not in line and "bucket/review/q (3 documents)" in line
    no_counter = report("label", StageCounts(1, 1, 0, 0))  # a label stage that queued nothing
    assert run.review_queue_line(out, [no_counter]) == "review queue: none (no uncertain document to queue)"
    write_manifest(out, Manifest("label", "h", "f", "v", StageCounts(1, 1, 0, 0), [], [], "", "", "r", {}))
    assert run.review_queue_line(out, [label]) == "review queue: none (no uncertain document to queue)"
    write_manifest(out, Manifest("label", "h", "f", "v", StageCounts(1, 1, 0, 0), [], [], "", "", "r",
                                 {"review_queue": "rel/queue-2"}))  # a relative local path is shown absolute
    assert run.review_queue_line(out, [label]).startswith(f"review queue: {os.path.abspath('rel/queue-2')} (3 ")


def _args(**kw) -> SimpleNamespace:
    return SimpleNamespace(**{"force": False, "no_progress": True, "no_report": True, "break_lease": False, **kw})


def test_the_exit_code_says_whether_every_stage_reconciled(tmp_path, monkeypatch, capsys):
    config = job_config(tmp_path)
    good = report("extract", StageCounts(2, 2, 0, 0))
    bad = report("clean", StageCounts(3, 2, 0, 0))
    monkeypatch.setattr(run, "run_job", lambda *a, **k: [good])
    out = io.StringIO()
    assert run._run(_args(), config, [], out) == 0
    assert "in=out+r+f" in out.getvalue() and f"outputs under {config.output}:" in out.getvalue()
    monkeypatch.setattr(run, "run_job", lambda *a, **k: [good, bad])
    assert run._run(_args(), config, [], io.StringIO()) == 1

    def fails(*a, **k):
        raise job.StageFailed("clean", RuntimeError("no"), [good])

    monkeypatch.setattr(run, "run_job", fails)
    out = io.StringIO()
    assert run._run(_args(), config, [], out) == 1
    err = capsys.readouterr().err
    assert "stage clean failed: RuntimeError: no" in err
    assert err.endswith("\nthe stages before it keep their outputs; the same command resumes from there (after a "
                        "fix, if the error needs one: an engine whose worker died needs none)\n")
    assert out.getvalue() == "\n" + run.format_table([good]) + "\n"  # the table of the stages before it
    # with an engine log: its last error lines, before the failure
    from pipelines.engine_log import engine_log

    with engine_log(str(tmp_path / "elog")) as elog:
        logging.getLogger("tokenfactory.jobserver").info("INFO all good")
        logging.getLogger("tokenfactory.jobserver").info("ERROR Executor: Exception in task 3.0")
        assert run._run(_args(), config, [], io.StringIO(), elog) == 1
    err = capsys.readouterr().err
    assert f"\nthe engine's last error lines ({elog.path}):\n" in err
    assert "ERROR Executor: Exception in task 3.0\n" in err and "all good" not in err
    assert err.index("Exception in task") < err.index("stage clean failed")

    def held(*a, **k):
        from pipelines.lease import LeaseHeld
        raise LeaseHeld("another run holds it")

    monkeypatch.setattr(run, "run_job", held)
    assert run._run(_args(), config, [], io.StringIO()) == 2
    assert "output in use: another run holds it\nnothing ran" in capsys.readouterr().err


def test_the_command_line_refuses_bad_combinations_with_exit_2(tmp_path, capsys):
    config = tmp_path / "job.yaml"
    job_config(tmp_path)
    assert run.main(["--config", str(config), "--sdk-workers", "pool"]) == 2
    assert "--sdk-workers pool needs --engine flink or spark (got no engine)" in capsys.readouterr().err
    assert run.main(["--config", str(tmp_path / "missing.yaml")]) == 2
    assert capsys.readouterr().err.startswith("config error: ")


def test_run_passes_its_flags_and_prints_the_table_the_locations_and_the_report(tmp_path, monkeypatch):
    config = job_config(tmp_path)
    good = report("extract", StageCounts(2, 2, 0, 0))
    asked: list = []
    monkeypatch.setattr(run, "run_job", lambda cfg, beam_args, **kw: asked.append((cfg, beam_args, kw)) or [good])
    monkeypatch.setattr(run, "write_run_report", lambda cfg: f"report: {cfg.output}/report.html")
    monkeypatch.setattr(run, "run_totals", lambda: (12.0, 7.0))
    out = io.StringIO()
    assert run._run(SimpleNamespace(force=True, no_progress=False, no_report=False, break_lease=True), config,
                    ["--x=1"], out) == 0
    assert asked == [(config, ["--x=1"], {"force": True, "show_progress": True, "break_lease": True})]
    assert out.getvalue() == ("\n" + run.format_table([good], (12.0, 7.0)) + "\n\n"
                              + run.format_locations(config.output, [good])
                              + "\n" + f"report: {config.output}/report.html\n")
    asked.clear()
    out = io.StringIO()
    assert run._run(_args(), config, [], out) == 0  # --no-progress, --no-report
    assert asked[0][2] == {"force": False, "show_progress": False, "break_lease": False}
    assert "report:" not in out.getvalue()


def test_the_locations_name_each_stage_output_and_the_token_index():
    extract = report("extract", StageCounts(1, 1, 0, 0))
    tokens = job.StageReport("tokenize", StageCounts(1, 1, 0, 0), False, 1.0, ("/out/tokens/v7/index.json",), ())
    unnamed = job.StageReport("tokenize", StageCounts(1, 1, 0, 0), False, 1.0, ("/out/tokens/v7/a.tfs",), ())
    writes = {s: run.spec_of(s).writes for s in ("extract", "tokenize")}
    assert run.format_locations("/out", [extract, tokens, unnamed]) == "\n".join([
        "outputs under /out:",
        "  " + writes["extract"].format(stage="extract", index="tokens/<version>/index.json"),
        "  manifests/extract.json",
        "  " + writes["tokenize"].format(stage="tokenize", index="tokens/v7/index.json"),  # relative to /out
        "  manifests/tokenize.json",
        "  " + writes["tokenize"].format(stage="tokenize", index="tokens/<version>/index.json"),
        "  manifests/tokenize.json"])
    assert "{index}" in writes["tokenize"] and "{stage}" in writes["extract"]


def test_the_run_report_line_and_a_report_that_fails(tmp_path, monkeypatch, caplog):
    import pipelines.report as report_module

    config = job_config(tmp_path)
    seen: list = []
    monkeypatch.setattr(report_module, "write_report", lambda output, cfg: seen.append((output, cfg)) or "r/x.html")
    assert run.write_run_report(config) == f"report: {os.path.abspath('r/x.html')}"
    assert seen == [(config.output, config)]
    monkeypatch.setattr(report_module, "write_report", lambda output, cfg: "s3://b/out/report.html")
    assert run.write_run_report(config) == "report: s3://b/out/report.html"

    def broken(output, cfg):
        raise OSError("disk full")

    monkeypatch.setattr(report_module, "write_report", broken)
    with caplog.at_level(logging.ERROR, logger="pipelines.run"):
        assert run.write_run_report(config) == \
            "report: failed, see the log (python -m pipelines.report regenerates it)"
    assert [r.getMessage() for r in caplog.records if r.name == "pipelines.run"] \
        == ["run report failed (the stages' outputs are complete)"]


def test_only_parquet_files_count_as_a_stage_output(tmp_path):
    out = tmp_path / "out"
    write_rows(out / "docs" / "clean", 1, name="part-0.parquet")
    write_rows(out / "docs" / "clean" / "en", 1, name="part-1.parquet")  # a folder per value (partitioned)
    write_rows(out / "rejected" / "clean", 1)
    write_rows(out / "failed" / "clean", 1)
    for kind in ("docs", "rejected", "failed"):
        (out / kind / "clean" / "_SUCCESS.json").write_text("{}")  # not an output file
    files = job._written_files(str(out), "clean")
    assert files == {"docs": [str(out / "docs" / "clean" / "part-0.parquet"),
                              str(out / "docs" / "clean" / "en" / "part-1.parquet")],
                     "rejected": [str(out / "rejected" / "clean" / "part-0.parquet")],
                     "failed": [str(out / "failed" / "clean" / "part-0.parquet")]}


def test_a_stage_error_is_cut_after_1000_characters():
    assert str(job.StageFailed("clean", ValueError("e" * 1000), [])) == f"stage clean failed: ValueError: {'e' * 1000}"
    assert str(job.StageFailed("clean", ValueError("e" * 1001), [], runner="flink")) \
        == f"stage clean failed on flink: ValueError: {'e' * 1000} [...]"


def test_the_command_line_flags_and_their_defaults():
    args, beam = run.parse_args(["--config", "c.yaml", "--runner=FlinkRunner", "--log-level", "DEBUG",
                                 "--no-progress", "--no-report", "--force"])
    assert (args.config, args.log_level, args.no_progress, args.no_report, args.force) == \
        ("c.yaml", "DEBUG", True, True, True)
    assert beam == ["--runner=FlinkRunner"]  # unknown options are Beam's
    args, beam = run.parse_args(["--config", "c.yaml"])
    assert (args.log_level, args.no_progress, args.no_report, args.force, beam) == ("INFO", False, False, False, [])
    with pytest.raises(SystemExit) as usage:
        run.parse_args(["--force"])  # --config is required
    assert usage.value.code == 2


def test_run_prints_where_the_review_queue_is(tmp_path, monkeypatch):
    from pipelines.manifest import Manifest, write_manifest

    config = job_config(tmp_path)
    label = report("label", StageCounts(2, 2, 0, 0), counters=(("review_queued", 2),))
    queue = str(tmp_path / "out" / "review" / "queue-1")
    write_manifest(config.output, Manifest("label", "h", "f", "v", StageCounts(2, 2, 0, 0), [], [], "", "", "r",
                                           {"review_queue": queue}))
    monkeypatch.setattr(run, "run_job", lambda *a, **k: [label])
    out = io.StringIO()
    assert run._run(_args(), config, [], out) == 0
    assert out.getvalue().endswith("\n" + run.review_queue_line(config.output, [label]) + "\n")
    assert f"review queue: {queue} (2 documents)" in out.getvalue()


def test_help_lists_every_stage_in_order_with_its_section_and_unknown_engines_are_refused(capsys):
    with pytest.raises(SystemExit) as shown:
        run.parse_args(["--help"])
    assert shown.value.code == 0
    text = capsys.readouterr().out
    assert text.startswith("usage: python -m pipelines.run [-h] --config CONFIG")
    specs = run.STAGE_SPECS
    width = max(len(s.name) for s in specs)
    epilog = ["stages, in pipeline order (without --stages or stages:, those whose config section is set;",
              "every config key: docs/CONFIG.md):"]
    epilog += ["  " + s.name.ljust(width) + "  " + (s.section + ":").ljust(10) + " " + s.does for s in specs]
    assert text.rstrip("\n").endswith("\n\n" + "\n".join(epilog))  # line breaks kept as written
    assert [s.name for s in specs][:3] == ["crawl", "extract", "clean"]
    with pytest.raises(SystemExit) as refused:
        run.parse_args(["--config", "c.yaml", "--engine", "dataflow-typo"])
    err = capsys.readouterr().err
    assert refused.value.code == 2 and "unknown engine 'dataflow-typo'; one of: direct, direct-mp" in err
    with pytest.raises(SystemExit) as refused:
        run.parse_args(["--config", "c.yaml", "--engine", "sprak"])
    assert refused.value.code == 2 and "unknown engine 'sprak' (did you mean 'spark'?)" in capsys.readouterr().err
    with pytest.raises(SystemExit) as refused:
        run.parse_args(["--config", "c.yaml", "--sdk-workers", "pol"])
    assert refused.value.code == 2 and "(did you mean 'pool'?)" in capsys.readouterr().err


def test_run_job_hands_force_and_the_progress_flag_to_every_stage(tmp_path, monkeypatch):
    config = job_config(tmp_path, stages="[extract, dedup_exact]", sections="dedup: {}\n")
    monkeypatch.setattr(job, "plan_stage", lambda config, stage: Stage(config.output, name=stage).plan())
    seen: list = []

    def recording(config, plan, options, force, show_progress):
        seen.append((plan.name, force, show_progress))
        return report(plan.name, StageCounts(1, 1, 0, 0))

    monkeypatch.setattr(job, "run_stage", recording)
    job.run_job(config)  # library callers get no progress line unless they ask
    job.run_job(config, force=True, show_progress=True)
    assert seen == [("extract", False, False), ("dedup_exact", False, False),
                    ("extract", True, True), ("dedup_exact", True, True)]


class FakePool:
    """``WorkerPool`` without processes: records its log path; ``fail`` raises on start."""

    made: list = []

    def __init__(self, log, fail: bool = False) -> None:
        self.log, self.fail, self.address = log, fail, "localhost:50123"
        FakePool.made.append(self)

    def __enter__(self):
        if self.fail:
            raise RuntimeError("pool did not start")
        return self

    def __exit__(self, *exc) -> None:
        self.closed = True


@contextlib.contextmanager
def caplog_at(level: int, name: str = "pipelines.run"):
    """The records logged under ``name`` while open (``main`` reconfigures the root
    logger, so pytest's caplog handler is gone by then)."""
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            # the exception's type as logged: a RedactingFilter on a root handler (left by
            # another test's main) replaces exc_info on the same record after this handler
            record.logged_exc_type = record.exc_info[0] if record.exc_info else None
            records.append(record)

    handler = Keep(level)
    logger = logging.getLogger(name)
    logger.addHandler(handler)
    try:
        yield records
    finally:
        logger.removeHandler(handler)


def test_main_wires_the_engine_the_worker_pool_the_stages_and_the_logging(tmp_path, monkeypatch, capsys):
    job_config(tmp_path)
    ran, engine_calls, memory, loaded = [], [], [], []
    real_load = run.load_config
    monkeypatch.setattr(run, "load_config", lambda path, **kw: loaded.append(kw) or real_load(path, **kw))
    monkeypatch.setattr(run, "_run", lambda args, config, beam_args, out, elog=None: ran.append((args, config, beam_args, elog)) or 7)
    monkeypatch.setattr(run, "engine_args", lambda engine, worker_pool, input_bytes:
                        engine_calls.append((engine, worker_pool, input_bytes)) or [f"--runner={engine}"])
    monkeypatch.setattr(run, "cap_malloc_arenas", lambda: memory.append("arenas"))
    monkeypatch.setattr(run, "worker_environment", lambda env: memory.append(env is os.environ))
    monkeypatch.setattr(run, "WorkerPool", FakePool)
    FakePool.made = []
    root = logging.getLogger()
    before = list(root.handlers), root.level, logging.getLogger("apache_beam").level
    try:
        code = run.main(["--config", str(tmp_path / "job.yaml"), "--engine", "spark", "--sdk-workers", "pool",
                         "--stages", " extract , ,", "--log-level", "debug", "--my_beam_option=1"])
        assert code == 7 and memory == ["arenas", True]
        args, config, beam_args, elog = ran[0]
        assert elog is None  # --log-level debug: Beam and the job server on the console, no engine log
        assert loaded[0] == {"output": None, "stages": ("extract",)}  # blanks dropped, names stripped
        data_bytes = os.path.getsize(tmp_path / "docs.jsonl")
        assert engine_calls == [("spark", "localhost:50123", data_bytes)]  # the configured input's size
        assert beam_args == ["--runner=spark", "--my_beam_option=1"]  # the engine's first: the user's win
        [pool] = FakePool.made
        assert str(pool.log).startswith(os.path.join(tempfile.gettempdir(), "tokenfactory-worker-pool-"))
        assert pool.closed  # stopped when the run ends
        assert root.level == logging.DEBUG and logging.getLogger("apache_beam").level == logging.WARNING
        assert any(isinstance(f, run.RedactingFilter) for h in root.handlers for f in h.filters)
        assert [h.formatter._fmt for h in root.handlers] == ["%(asctime)s %(levelname)s %(name)s: %(message)s"]
        run.main(["--config", str(tmp_path / "job.yaml"), "--log-level", "error", "--output", str(tmp_path / "o2")])
        assert logging.getLogger("apache_beam").level == logging.ERROR  # never below the run's level
        assert engine_calls[1:] == [] and ran[1][2] == []  # no engine: no engine options, no pool
        assert ran[1][3] is not None and ran[1][3].path.startswith(str(tmp_path / "o2" / "logs" / "engine-"))
        assert loaded[1] == {"output": str(tmp_path / "o2"), "stages": None}
        assert len(FakePool.made) == 1
        run.main(["--config", str(tmp_path / "job.yaml"), "--log-level", "nonsense"])
        assert root.level == logging.INFO  # an unknown level: INFO
        # auto: a pool for a large input on Flink or Spark, unless the user set --environment_type
        import pipelines.stages as stages_module
        monkeypatch.setattr(stages_module, "configured_input_bytes", lambda config: run.POOL_FROM_BYTES)
        engine_calls.clear()
        with caplog_at(logging.INFO) as records:
            run.main(["--config", str(tmp_path / "job.yaml"), "--engine", "flink"])
        assert engine_calls == [("flink", "localhost:50123", run.POOL_FROM_BYTES)] and len(FakePool.made) == 2
        pool_line = [r.getMessage() for r in records if r.getMessage().startswith("SDK worker pool at ")]
        assert pool_line == [f"SDK worker pool at localhost:50123 (its log: {FakePool.made[1].log}); chosen for "
                             f"{run.POOL_FROM_BYTES / 2**30:.2f} GiB of input (--sdk-workers auto)"]
        engine_calls.clear()
        run.main(["--config", str(tmp_path / "job.yaml"), "--engine", "flink", "--environment_type=LOOPBACK"])
        assert engine_calls == [("flink", "", run.POOL_FROM_BYTES)] and len(FakePool.made) == 2
        assert ran[-1][2] == ["--runner=flink", "--environment_type=LOOPBACK"]
    finally:
        root.handlers[:] = before[0]
        root.setLevel(before[1])
        logging.getLogger("apache_beam").setLevel(before[2])


def test_main_turns_a_missing_engine_or_a_failed_pool_into_exit_2(tmp_path, monkeypatch, capsys):
    job_config(tmp_path)
    config = str(tmp_path / "job.yaml")
    monkeypatch.setattr(run, "_run", lambda *a: 0)

    def missing(engine, worker_pool, input_bytes):
        raise run.EngineMissing("no job server jar for spark (make engines)")

    monkeypatch.setattr(run, "engine_args", missing)
    assert run.main(["--config", config, "--engine", "spark"]) == 2
    assert capsys.readouterr().err == "engine error: no job server jar for spark (make engines)\n"
    monkeypatch.setattr(run, "WorkerPool", lambda log: FakePool(log, fail=True))
    assert run.main(["--config", config, "--engine", "flink", "--sdk-workers", "pool"]) == 2
    assert capsys.readouterr().err == "worker pool error: pool did not start\n"
    logging.getLogger().handlers[:] = [h for h in logging.getLogger().handlers
                                       if not any(isinstance(f, run.RedactingFilter) for f in h.filters)]
