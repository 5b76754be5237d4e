"""Command line: ``python -m pipelines.run --config configs/X.yaml [--stages a,b]
[--output URL] [--force] [--break-lease] [any Beam pipeline option]``.

Exit status: 0 when every stage ran (or was resumed) and its counts reconcile,
1 when a stage does not reconcile or fails (the stages before it keep their outputs and
resume on the next run), 2 on a configuration error or when another live run holds the
output (``<output>/_lease.json``; nothing ran; ``--break-lease`` takes it anyway and logs
the owner it broke), 130 after Ctrl-C and 143 after ``kill`` (one line: the stage, what
is kept, the command that resumes). Log lines and messages mask URL credentials and
secret option values.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import shlex
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional, Sequence, TextIO

import pipelines
from pipelines import interrupts
from pipelines.config import ConfigError, JobConfig, load_config
from pipelines.config_errors import choice_of
from pipelines.engine_log import EngineLog, engine_log
from pipelines.engines import (ENGINES, POOL_FROM_BYTES, SDK_WORKER_CHOICES, EngineMissing, WorkerPool,
                               available_memory_bytes, engine_args, local_memory_refusal, sdk_workers_for)
from pipelines.job import JobInterrupted, StageFailed, StageReport, process_cpu_seconds, run_job
from pipelines.lease import LeaseHeld
from pipelines.manifest import read_manifest
from pipelines.memory import cap_malloc_arenas, worker_environment
from pipelines.stage_specs import STAGE_SPECS, spec_of
from storage.redact import redact_args, redact_text, redact_url

_LOGGER = logging.getLogger(__name__)


def stages_help() -> str:
    """The stages, in pipeline order, one line each: name, config section, what it does."""
    width = max(len(spec.name) for spec in STAGE_SPECS)
    lines = ["stages, in pipeline order (without --stages or stages:, those whose config section is set;",
             "every config key: docs/CONFIG.md):"]
    lines += [f"  {spec.name:<{width}}  {spec.section + ':':<10} {spec.does}" for spec in STAGE_SPECS]
    return "\n".join(lines)


def parse_args(argv: Optional[Sequence[str]]) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(
        prog="python -m pipelines.run",
        description="Run tokenfactory stages. Unknown --options are Beam pipeline options.",
        epilog=stages_help(), formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--config", required=True, help="YAML job config (configs/*.yaml)")
    parser.add_argument("--stages", help="comma-separated stages to run (default: all configured)")
    parser.add_argument("--output", help="output URL, overrides the config's output")
    parser.add_argument("--force", action="store_true", help="rerun stages even when resumable")
    parser.add_argument("--break-lease", action="store_true",
                        help="take the output's lease even from a live run (its owner is logged; that run "
                             "stops at its next stage boundary): for a run you know is gone whose lease "
                             "has not expired yet")
    parser.add_argument("--engine", type=choice_of("engine", ENGINES), metavar="{" + ",".join(ENGINES) + "}",
                        help="run on this engine: " + "; ".join(f"{e.name}: {e.description}"
                                                                for e in ENGINES.values())
                        + " (its Beam options come before yours, so yours win)")
    parser.add_argument("--no-memory-check", action="store_true",
                        help="with --engine direct or direct-mp: run even when the input looks too large "
                             "for this machine's free memory (FnApiRunner keeps shuffles in memory)")
    parser.add_argument("--sdk-workers", type=choice_of("--sdk-workers value", SDK_WORKER_CHOICES), default="auto",
                        metavar="{" + ",".join(SDK_WORKER_CHOICES) + "}",
                        help="with --engine flink or spark: where the Python SDK workers run. loopback: "
                             "in this process; pool: in processes of a worker pool this command starts "
                             "on 127.0.0.1 and stops at the end, each job's workers exiting with the job "
                             "(the choice for jobs larger than memory: docs/RUNNING_AT_SCALE.md); auto "
                             f"(default): pool for inputs of {POOL_FROM_BYTES >> 20} MiB or more, unless "
                             "you pass --environment_type")
    parser.add_argument("--log-level", default="INFO", help="logging level (default INFO)")
    parser.add_argument("--no-progress", action="store_true",
                        help="no live progress line on stderr (shown for in-process runners)")
    parser.add_argument("--no-report", action="store_true",
                        help="do not write report/report.json and report/report.html")
    return parser.parse_known_args(argv)


def format_table(reports: Sequence[StageReport], total: Optional[tuple[float, float]] = None) -> str:
    """The per-stage count table printed at the end of a run; ``total`` = (wall, CPU)
    seconds of the whole run, its last line."""
    width = max([10] + [len(r.stage) for r in reports])  # dedup_minhash is 13
    header = f"{'stage':<{width}} {'in':>9} {'out':>9} {'rejected':>9} {'failed':>9}  {'check':<11} status"
    lines = [header, "-" * len(header)]
    for r in reports:
        c = r.counts
        check = "in=out+r+f" if c.reconciles else "MISMATCH"
        status = ("resumed (manifest matched)" if r.skipped
                  else f"ran in {r.seconds:.1f}s" + (f", CPU {r.cpu_seconds:.1f}s" if r.cpu_seconds else ""))
        if not r.skipped and dict(r.counters).get("version_reused"):
            status += "; identical token version reused, nothing rewritten"
        lines.append(f"{r.stage:<{width}} {c.records_in:>9} {c.out:>9} {c.rejected:>9} {c.failed:>9}  "
                     f"{check:<11} {status}")
        reasons = ", ".join(f"{k}={v}" for k, v in c.rejected_by_reason.items())
        errors = ", ".join(f"{k}={v}" for k, v in c.failed_by_error.items())
        if reasons:
            lines.append(f"{'':<{width}}   rejected: {reasons}")
        if errors:
            lines.append(f"{'':<{width}}   failed:   {errors}")
        noted = ", ".join(f"{k}={v}" for k, v in r.counters
                          if v and k.startswith(("pii_", "skipped_", "extracted_", "truncated_", "label_", "review_",
                                                "missing_", "repeat_", "duplicate_id", "duplicate_url_fragment")))
        if noted:
            lines.append(f"{'':<{width}}   noted:    {noted}")
    if total is not None:
        lines.append("-" * len(header))
        lines.append(f"total: {_clock(total[0])} wall, {_clock(total[1])} CPU (this process since it started, "
                     "with the SDK workers and job servers it waited for)")
    return "\n".join(lines)


def _shown_path(path: str) -> str:
    """A printed path: local ones absolute, URLs with their credentials masked."""
    return os.path.abspath(path) if "://" not in path else redact_url(path)


def run_totals() -> tuple[float, float]:
    """(wall, CPU) seconds since this process imported ``pipelines``."""
    return time.monotonic() - pipelines.STARTED_MONOTONIC, process_cpu_seconds()


def _clock(seconds: float) -> str:
    """``42.3s`` under a minute, ``3m05s`` / ``1h02m03s`` above."""
    if seconds < 60:
        return f"{seconds:.1f}s"
    whole = int(round(seconds))
    hours, rest = divmod(whole, 3600)
    return (f"{hours}h{rest // 60:02d}m{rest % 60:02d}s" if hours else f"{rest // 60}m{rest % 60:02d}s")


def format_locations(output: str, reports: Sequence[StageReport]) -> str:
    """Where each stage's outputs are: its ``writes`` line of the stage table."""
    lines = [f"outputs under {output}:"]
    base = output.rstrip("/") + "/"
    for r in reports:
        index = next((o for o in r.outputs if o.endswith("index.json")), "tokens/<version>/index.json")
        index = index[len(base):] if index.startswith(base) else index  # relative to the output, as the rest
        lines.append("  " + spec_of(r.stage).writes.format(stage=r.stage, index=index))
        lines.append(f"  manifests/{r.stage}.json")
    return "\n".join(lines)


def review_queue_line(output: str, reports: Sequence[StageReport]) -> str:
    """Where this run's label stage queued documents for human review, with the command
    that opens the queue; "" when the job has no label stage. A resumed stage names
    the queue of the run that wrote it (its manifest's ``review_queue``)."""
    report = next((r for r in reports if r.stage == "label"), None)
    if report is None:
        return ""
    queued = dict(report.counters).get("review_queued", 0)
    manifest = read_manifest(output, "label")
    queue = str(manifest.extra.get("review_queue", "")) if manifest is not None else ""
    if not queued or not queue:
        return "review queue: none (no uncertain document to queue)"
    shown = _shown_path(queue)
    return (f"review queue: {shown} ({queued} documents)\n"
            f"  review them: python -m pipelines.review serve --queue {shown} --out answers.jsonl")


def write_run_report(config: JobConfig) -> str:
    """Writes the run report; a failure is logged and never fails the job (its stages
    ran). Returns the line to print."""
    from pipelines.report import write_report

    try:
        path = write_report(config.output, config)
    except Exception:  # the report is a view of the outputs, not one of them
        _LOGGER.exception("run report failed (the stages' outputs are complete)")
        return "report: failed, see the log (python -m pipelines.report regenerates it)"
    return f"report: {_shown_path(path)}"


class RedactingFilter(logging.Filter):
    """Masks the credentials of every URL in a log line (``s3://KEY:SECRET@b`` →
    ``s3://***@b``) and the value of every secret option (``--hf_token=***``: Beam logs
    the options it does not know with their values), whichever module logged it."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        redacted = redact_text(message)
        if redacted != message:
            record.msg, record.args = redacted, ()
        if record.exc_info and record.exc_info[1] is not None:
            text = logging.Formatter().formatException(record.exc_info)
            record.exc_info, record.exc_text = None, redact_text(text)
        return True


def _stderr(text: str) -> None:
    sys.stderr.write(redact_text(text))


def resume_command(argv: Sequence[str]) -> str:
    """The command that resumes this run: the same arguments without ``--force`` (which
    would run the finished stages again), secrets masked as in every message
    (``storage.redact.redact_args``)."""
    words = [word for word in redact_args(argv) if word != "--force"]
    python = sys.executable or "python"
    if os.path.abspath(python).startswith(os.getcwd() + os.sep):
        python = os.path.relpath(python)
    return shlex.join([python, "-m", "pipelines.run", *words])


def interrupted_line(argv: Sequence[str], stage: Optional[str], finished: Sequence[str]) -> str:
    """The one line a run ends with after Ctrl-C or ``kill``: where it was, what is kept,
    and the command that resumes."""
    name = {signal.SIGINT: "", signal.SIGTERM: " (SIGTERM)"}.get(interrupts.received(), "")
    if stage is None:
        return (f"interrupted{name} while no stage was running (finished stages keep their outputs); "
                f"run again with: {resume_command(argv)}")
    kept = (f"outputs of finished stages ({', '.join(finished)}) are kept" if finished
            else "no stage had finished")
    return f"interrupted{name} in stage {stage}: {kept}; resume with: {resume_command(argv)}"


def main(argv: Optional[Sequence[str]] = None, out: Optional[TextIO] = None) -> int:
    """Runs the command; after Ctrl-C (or ``kill``) the run unwinds (lease, job server,
    worker pool released) and ends with one line and exit 128 + the signal's number
    (``pipelines.interrupts``). ``out``: where the table goes (default: ``sys.stdout`` as
    it is at the call)."""
    out = out if out is not None else sys.stdout
    arguments = list(sys.argv[1:] if argv is None else argv)
    with interrupts.handled():
        try:
            return _main(arguments, out)
        except JobInterrupted as stopped:
            _stderr(interrupted_line(arguments, stopped.stage, stopped.finished) + "\n")
        except BaseException:
            if interrupts.received() is None:
                raise
            _stderr(interrupted_line(arguments, None, ()) + "\n")
    return interrupts.exit_code()


def _main(argv: Optional[Sequence[str]], out: TextIO) -> int:
    args, beam_args = parse_args(argv)
    if args.sdk_workers == "pool" and args.engine not in ("flink", "spark"):
        _stderr(f"--sdk-workers pool needs --engine flink or spark (got {args.engine or 'no engine'})\n")
        return 2
    # This process hosts the LOOPBACK SDK workers; the processes it starts (SDK workers of
    # multi_processing, the job server) inherit the cap (pipelines/memory.py).
    cap_malloc_arenas()
    worker_environment(os.environ)
    level = getattr(logging, str(args.log_level).upper(), logging.INFO)
    # force: importing Beam may already have configured the root logger at WARNING.
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        force=True)
    for handler in logging.getLogger().handlers:
        handler.addFilter(RedactingFilter())
    logging.getLogger("apache_beam").setLevel(max(level, logging.WARNING))
    stages = tuple(s.strip() for s in args.stages.split(",") if s.strip()) if args.stages else None
    try:
        config = load_config(args.config, output=args.output, stages=stages)
    except ConfigError as exc:
        _stderr(f"config error: {exc}\n")
        return 2
    input_bytes = 0
    if args.engine:
        from pipelines.stages import configured_input_bytes

        input_bytes = configured_input_bytes(config)
    refusal = None if args.no_memory_check else local_memory_refusal(args.engine, input_bytes,
                                                                     available_memory_bytes())
    if refusal:
        _stderr(f"engine error: {refusal}\nnothing ran\n")
        return 2
    sdk_workers = sdk_workers_for(args.sdk_workers, args.engine, input_bytes, beam_args)
    with contextlib.ExitStack() as stack:
        # Beam's and the job server's own output go to <output>/logs/ (all of it on the
        # console with --log-level debug)
        elog = (stack.enter_context(engine_log(config.output, filters=(RedactingFilter(),)))
                if level > logging.DEBUG else None)
        try:
            pool = ""
            if sdk_workers == "pool":
                log = elog.path if elog is not None else os.path.join(
                    tempfile.gettempdir(), f"tokenfactory-worker-pool-{os.getpid()}.log")
                pool = stack.enter_context(WorkerPool(log=Path(log))).address
                logging.getLogger(__name__).info(
                    "SDK worker pool at %s (its log: %s)%s", pool, log,
                    f"; chosen for {input_bytes / 2**30:.2f} GiB of input (--sdk-workers auto)"
                    if args.sdk_workers == "auto" else "")
            if args.engine:
                beam_args = engine_args(args.engine, worker_pool=pool, input_bytes=input_bytes) + list(beam_args)
        except EngineMissing as exc:
            _stderr(f"engine error: {exc}\n")
            return 2
        except RuntimeError as exc:  # the worker pool did not start
            _stderr(f"worker pool error: {exc}\n")
            return 2
        return _run(args, config, beam_args, out, elog)


def _run(args: argparse.Namespace, config: JobConfig, beam_args: list[str], out: TextIO,
         elog: Optional[EngineLog] = None) -> int:
    try:
        reports = run_job(config, beam_args, force=args.force, show_progress=not args.no_progress,
                          break_lease=args.break_lease)
    except LeaseHeld as held:
        _stderr(f"output in use: {held}\nnothing ran\n")
        return 2
    except ConfigError as exc:  # the runner's name, an output this user cannot write
        _stderr(f"config error: {exc}\nnothing ran\n")
        return 2
    except StageFailed as failed:  # the traceback is in the log above
        if failed.reports:
            out.write("\n" + format_table(failed.reports) + "\n")
        tail = elog.tail() if elog is not None else []
        if tail:
            _stderr(f"\nthe engine's last error lines ({_shown_path(elog.final)}):\n" + "\n".join(f"  {t}" for t in tail) + "\n")
        _stderr(f"\n{failed}\nthe stages before it keep their outputs; the same command "
                         "resumes from there (after a fix, if the error needs one: an engine "
                         "whose worker died needs none)\n")
        return 1
    out.write("\n" + format_table(reports, run_totals()) + "\n\n" + format_locations(config.output, reports) + "\n")
    queue = review_queue_line(config.output, reports)
    if queue:
        out.write(queue + "\n")
    summary = elog.summary() if elog is not None else ""
    if elog is not None and summary:  # nothing logged: no file (pipelines/engine_log.py)
        out.write(f"engine log: {_shown_path(elog.final)} ({summary})\n")
    if not args.no_report:
        out.write(write_run_report(config) + "\n")
    return 0 if all(r.counts.reconciles for r in reports) else 1


if __name__ == "__main__":
    code = main()
    interrupts.stay_quiet()  # the interpreter's end after Ctrl-C prints nothing either
    sys.exit(code)
