"""Running a job: stage by stage, skipping stages whose manifest matches (resume).

For each stage: plan it (config hash + input fingerprint), skip it if its manifest
matches and its outputs exist, else clear its old outputs, run its Beam pipeline,
count what it wrote and write its manifest last.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from dataclasses import dataclass
from typing import Optional, Sequence

from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.runners.runner import PipelineResult

from pipelines import interrupts
from pipelines.beam_runs import counter_totals, graph_cost, run_pipeline
from pipelines.config import JobConfig, configure_filesystems
from pipelines.job_servers import shared_job_server
from pipelines.lease import OutputLease, store_for
from pipelines.preflight import check_runner, probe_output
from pipelines.progress import ProgressLine
from pipelines.stage_specs import StageSpec, plan_stage, spec_of
from pipelines.stages import StagePlan
from pipelines.manifest import (
    Manifest,
    StageCounts,
    clear_stage,
    code_version,
    list_files,
    now_iso,
    outputs_exist,
    parquet_rows,
    read_manifest,
    stage_dirs,
    write_manifest,
)

_LOGGER = logging.getLogger(__name__)

DEFAULT_RUNNER = "FnApiRunner"


@dataclass(frozen=True)
class StageReport:
    stage: str
    counts: StageCounts
    skipped: bool
    seconds: float
    outputs: tuple[str, ...]
    counters: tuple[tuple[str, int], ...] = ()  # other counters: pii_*, skipped_*, ...
    cpu_seconds: float = 0.0  # this process's CPU and that of the children it waited for


def process_cpu_seconds() -> float:
    """User + system CPU of this process and of the child processes it has waited for."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def pipeline_options(config: JobConfig, cli_args: Sequence[str]) -> PipelineOptions:
    """Config defaults first, command line last (argparse keeps the last value)."""
    args = list(config.beam_args) + list(cli_args)
    if not any(a == "--runner" or a.startswith("--runner=") for a in args):
        args.append(f"--runner={DEFAULT_RUNNER}")
    return PipelineOptions(args)


def metric_totals(result: PipelineResult, stage: str) -> Optional[dict[str, int]]:
    """Counter totals of one stage's namespace, or None if the runner has no metrics."""
    try:
        return counter_totals(result, stage)
    except (NotImplementedError, AttributeError, KeyError) as exc:
        _LOGGER.warning("runner reported no metrics for %s: %s", stage, exc)
        return None


class MetricsMissing(RuntimeError):
    """The runner reported no metrics for a stage: its counts cannot be checked."""


def _written_files(output: str, stage: str) -> dict[str, list[str]]:
    docs, rejected, failed = stage_dirs(output, stage)
    return {
        "docs": list_files(docs, "*.parquet") + list_files(docs, "*/*.parquet"),
        "rejected": list_files(rejected, "*.parquet"),
        "failed": list_files(failed, "*.parquet"),
    }


def collect_counts(output: str, plan: StagePlan, totals: Optional[dict[str, int]]) -> tuple[StageCounts, list[str]]:
    """Counts from the files written (out, rejected, failed) and the metrics (in).

    Without metrics the input count is unknown and ``in == out + rejected + failed``
    cannot be checked, so the stage fails (``MetricsMissing``) rather than reconciling by
    construction. A counter that was never incremented is absent: 0."""
    if totals is None:
        raise MetricsMissing(f"stage {plan.name}: the runner reported no metrics, so the stage's input "
                             "count is unknown and its counts cannot be reconciled; run it on a runner "
                             "that reports Beam counters (FnApiRunner, Flink, Spark, Prism, Dataflow)")
    files = _written_files(output, plan.name)
    metrics = totals
    out = parquet_rows(files["docs"]) if spec_of(plan.name).makes_docs else metrics.get("records_out", 0)
    rejected = parquet_rows(files["rejected"])
    failed = parquet_rows(files["failed"])
    records_in = metrics.get("records_in", 0)
    by_reason = {k[len("rejected_"):]: v for k, v in sorted(metrics.items()) if k.startswith("rejected_")}
    by_error = {k[len("failed_"):]: v for k, v in sorted(metrics.items()) if k.startswith("failed_")}
    counts = StageCounts(records_in, out, rejected, failed, by_reason, by_error)
    outputs = files["docs"] + files["rejected"] + files["failed"]
    if plan.outputs is not None:
        outputs += plan.outputs(totals)
    return counts, outputs


def clear_outputs(output: str, spec: StageSpec) -> None:
    """Deletes the stage's manifest and outputs, then the top-level folders it owns."""
    clear_stage(output, spec.name)
    for area in spec.owns:
        directory = FileSystems.join(output, area)
        if FileSystems.exists(directory):
            FileSystems.delete([directory])


def run_stage(config: JobConfig, plan: StagePlan, options: PipelineOptions, force: bool,
              show_progress: bool = False) -> StageReport:
    version = code_version()
    previous = read_manifest(config.output, plan.name)
    if (not force and previous is not None
            and previous.matches(plan.config_hash, plan.fingerprint, version)
            and outputs_exist(previous)):
        _LOGGER.info("stage %s: manifest matches config and inputs, skipped", plan.name)
        return StageReport(plan.name, previous.counts, True, 0.0, tuple(previous.outputs),
                           tuple(previous.extra.get("counters", {}).items()))
    spec = spec_of(plan.name)
    clear_outputs(config.output, spec)
    started, t0, cpu0 = now_iso(), time.perf_counter(), process_cpu_seconds()
    _LOGGER.info("stage %s: running on %d inputs", plan.name, len(plan.inputs))
    line = (ProgressLine(plan.name, plan.input_bytes) if show_progress and spec.runs_beam
            else contextlib.nullcontext())
    graph_cost(reset=True)
    with line:
        if plan.runner is not None:
            totals: Optional[dict[str, int]] = plan.runner(options)
        else:
            totals = metric_totals(run_pipeline(options, plan.build), plan.name)
    interrupts.raise_if_received()  # an interrupted stage writes no manifest, even if it ended
    counts, outputs = collect_counts(config.output, plan, totals)
    other = {k: v for k, v in sorted((totals or {}).items())
             if k not in ("records_in", "records_out") and not k.startswith(("rejected_", "failed_"))}
    seconds, cpu = time.perf_counter() - t0, process_cpu_seconds() - cpu0
    if not counts.reconciles:
        _LOGGER.error("stage %s does not reconcile: in=%d out=%d rejected=%d failed=%d", plan.name,
                      counts.records_in, counts.out, counts.rejected, counts.failed)
    report = StageReport(plan.name, counts, False, seconds, tuple(outputs), tuple(other.items()), cpu)
    check_error_ratio(config, report)  # no manifest: the stage reruns after a fix
    write_manifest(config.output, Manifest(
        stage=plan.name, config_hash=plan.config_hash, inputs_fingerprint=plan.fingerprint,
        code_version=version, counts=counts, inputs=list(plan.inputs), outputs=outputs,
        started_at=started, finished_at=now_iso(),
        runner=str(options.view_as(StandardOptions).runner),
        extra={"seconds": round(seconds, 3), "cpu_seconds": round(cpu, 3), "counters": other, "graph": graph_cost().as_dict(),
               **(plan.info() if plan.info else {})},
    ))
    _LOGGER.info("stage %s: done in %.1fs (in=%d out=%d rejected=%d failed=%d)", plan.name, seconds,
                 counts.records_in, counts.out, counts.rejected, counts.failed)
    return report


def error_ratio_limit(config: JobConfig, stage: str) -> Optional[float]:
    """The share of a stage's records that may fail before the job fails:
    ``extract.max_error_ratio`` for every stage the table limits (the readers' failures
    count in the extract stage's), none for the crawl (fetch errors are outcomes of a crawl)."""
    return config.extract.max_error_ratio if spec_of(stage).failures_limited else None


def first_errors(output: str, stage: str, limit: int = 3) -> list[str]:
    """The first ``limit`` failures of a stage as ``error_type: error (source@offset)``."""
    import pyarrow.parquet as pq

    lines: list[str] = []
    for path in _written_files(output, stage)["failed"]:
        with FileSystems.open(path, compression_type="uncompressed") as fh:
            table = pq.read_table(fh, columns=["error_type", "error", "source", "offset"])
        for row in table.slice(0, limit - len(lines)).to_pylist():
            error = " ".join(str(row["error"]).split())
            error = error if len(error) <= 300 else error[:300] + " [...]"
            lines.append(f"{row['error_type']}: {error} ({row['source']}@{row['offset']})")
        if len(lines) >= limit:
            break
    return lines


class TooManyFailures(RuntimeError):
    """More of a stage's records failed than the job allows; carries the stage's report."""

    def __init__(self, message: str, report: StageReport) -> None:
        super().__init__(message)
        self.report = report


def check_error_ratio(config: JobConfig, report: StageReport) -> None:
    limit = error_ratio_limit(config, report.stage)
    counts = report.counts
    if limit is None or counts.records_in == 0 or counts.failed / counts.records_in <= limit:
        return
    errors = "\n".join("  " + line for line in first_errors(config.output, report.stage))
    raise TooManyFailures(
        f"{counts.failed} of {counts.records_in} records failed ({counts.failed / counts.records_in:.1%} > "
        f"max_error_ratio {limit:g}); the first errors:\n{errors}\n(all of them in failed/{report.stage}/)",
        report)


class StageFailed(RuntimeError):
    """A stage raised: carries the reports of the stages that finished before it."""

    def __init__(self, stage: str, error: BaseException, reports: list[StageReport],
                 runner: str = "") -> None:
        # an engine's error can be a page of Java and gRPC text: the log has it all
        text = str(error)
        text = text if len(text) <= 1000 else text[:1000] + " [...]"
        where = f" on {runner}" if runner else ""
        super().__init__(f"stage {stage} failed{where}: {type(error).__name__}: {text}")
        self.stage = stage
        self.error = error
        self.reports = reports


class JobInterrupted(Exception):
    """A signal (Ctrl-C, ``kill``) ended the run during ``stage``; ``finished`` are the
    stages that ended before it (run or resumed), whose outputs and manifests stay."""

    def __init__(self, stage: str, finished: Sequence[str]) -> None:
        super().__init__(f"interrupted in stage {stage}")
        self.stage, self.finished = stage, tuple(finished)


def stop_if_interrupted(stage: str, reports: Sequence[StageReport]) -> None:
    """``JobInterrupted`` if a signal interrupted the run (``pipelines.interrupts``)."""
    if interrupts.received() is not None:
        _LOGGER.debug("stage %s interrupted", stage, exc_info=True)
        raise JobInterrupted(stage, [r.stage for r in reports]) from None


def run_job(config: JobConfig, cli_args: Sequence[str] = (), force: bool = False,
            show_progress: bool = False, break_lease: bool = False) -> list[StageReport]:
    """Runs the config's stages in order; returns one report per stage. A stage that
    raises ends the job with ``StageFailed`` (the stages before it keep their outputs
    and manifests, so a rerun resumes after them); another live run on the same output
    ends it with ``LeaseHeld`` before any stage, unless ``break_lease`` (its lease is
    taken, its owner logged), and so does a ``ConfigError`` for a runner Beam does not
    know or an output this user cannot write. A signal during a stage ends it with
    ``JobInterrupted`` once the lease and the job server are released."""
    options = pipeline_options(config, cli_args)
    check_runner(options)  # ConfigError before the lease: a misspelt runner fails no stage
    configure_filesystems(config, cli_args)  # the driver's own reads and writes of the output
    probe_output(config.output)  # ConfigError: an output this user cannot write
    reports: list[StageReport] = []
    # one run per output (LeaseHeld before anything is touched); a lost lease stops the
    # job at the next stage boundary
    lease = OutputLease(store_for(config.output, list(config.beam_args) + list(cli_args)))
    # Flink/Spark: one job server JVM for every pipeline
    with lease.acquire(break_lease=break_lease), shared_job_server(options):
        for stage in config.active_stages():
            try:
                lease.check()
                plan = plan_stage(config, stage)
                reports.append(run_stage(config, plan, options, force, show_progress))
            except TooManyFailures as exc:
                _LOGGER.error("stage %s: %s", stage, exc)
                raise StageFailed(stage, exc, reports + [exc.report],
                                  str(options.view_as(StandardOptions).runner)) from exc
            except Exception as exc:
                stop_if_interrupted(stage, reports)  # Beam turns the signal's exit into a RuntimeError
                _LOGGER.error("stage %s failed", stage, exc_info=True)
                raise StageFailed(stage, exc, reports,
                                  str(options.view_as(StandardOptions).runner)) from exc
            except BaseException:
                stop_if_interrupted(stage, reports)
                raise
        interrupts.raise_if_received()  # after the last stage: exit 128 + signum all the same
    return reports
