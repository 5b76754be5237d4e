"""Ctrl-C and ``kill`` during a run (issue 36, item 13): one line naming the stage, what is
kept and the command that resumes; exit 130 (143); no tracebacks; nothing left running."""

from __future__ import annotations

import logging
import shlex
import signal
import subprocess
from pathlib import Path

import pytest

import pipelines.run as run
from pipelines import interrupts
from tests.interruptjob import ROOT, STAGES, interrupt_run, write_dedup_job


def test_ctrl_c_during_a_later_stage_ends_with_one_line_and_the_command_resumes(tmp_path):
    """FnApiRunner, interrupted in dedup_minhash. Before: exit 1 as a failed stage, 93
    lines on stderr with 3 tracebacks (Beam's KeyboardInterrupt inside a DoFn)."""
    config = write_dedup_job(tmp_path)
    out = tmp_path / "out"
    argv = ["--config", config, "--stages", STAGES, "--no-progress", "--no-report", "--log-level", "WARNING"]
    ended = interrupt_run(argv + ["--force"], out / "work" / "dedup_minhash")
    lines = ended.stderr.splitlines()
    assert ended.returncode == 130, ended.stderr[-3000:]
    assert "Traceback" not in ended.stderr and "ERROR" not in ended.stderr and len(lines) <= 3, ended.stderr
    prefix = ("interrupted in stage dedup_minhash: outputs of finished stages (extract, dedup_exact) are kept; "
              "resume with: ")
    assert lines[-1].startswith(prefix), lines
    command = shlex.split(lines[-1][len(prefix):])
    assert command[1:] == ["-m", "pipelines.run", *argv]  # without --force, which would rerun every stage
    assert ended.left == [], f"processes of the run still alive: {ended.left}"
    assert not (out / "_lease.json").exists()  # released on the way out
    assert {p.name for p in (out / "manifests").iterdir()} == {"extract.json", "dedup_exact.json"}
    again = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    rows = {line.split()[0]: line for line in again.stdout.splitlines() if line.startswith(tuple(STAGES.split(",")))}
    assert "resumed (manifest matched)" in rows["extract"] and "resumed (manifest matched)" in rows["dedup_exact"]
    assert "ran in" in rows["dedup_minhash"]


def test_a_signal_ends_the_run_once_with_128_plus_its_number_and_silences_the_logging():
    root = logging.getLogger()
    level, before = root.level, signal.getsignal(signal.SIGINT)
    root.setLevel(logging.INFO)
    try:
        with interrupts.handled():
            assert signal.getsignal(signal.SIGINT) is interrupts._on_signal
            with pytest.raises(SystemExit) as ended:
                interrupts._on_signal(signal.SIGINT, None)
            assert ended.value.code == 130 and interrupts.received() == signal.SIGINT
            assert interrupts.exit_code() == 130
            interrupts._on_signal(signal.SIGTERM, None)  # a second signal while unwinding: ignored
            assert interrupts.received() == signal.SIGINT
            assert logging.root.manager.disable == logging.CRITICAL
        assert logging.root.manager.disable == logging.NOTSET  # back for callers that go on
        assert signal.getsignal(signal.SIGINT) is before
        with interrupts.handled():
            assert interrupts.received() is None
            with pytest.raises(SystemExit) as ended:
                interrupts._on_signal(signal.SIGTERM, None)
            assert ended.value.code == 143
        root.setLevel(logging.DEBUG)
        with interrupts.handled():
            with pytest.raises(SystemExit):
                interrupts._on_signal(signal.SIGINT, None)
            assert logging.root.manager.disable == logging.NOTSET  # at DEBUG the logging stays on
    finally:
        root.setLevel(level)
        logging.disable(logging.NOTSET)


def test_other_threads_cannot_write_to_stderr_while_an_interrupted_run_unwinds(capsys):
    """Beam's SDK harness prints a failed instruction's traceback to stderr itself (not
    through logging): CI saw gRPC's UNAVAILABLE traceback after a Ctrl-C on Prism."""
    import sys
    import threading

    def harness(text: str) -> None:
        thread = threading.Thread(target=lambda: print(text, file=sys.stderr))
        thread.start()
        thread.join()

    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.INFO)
    try:
        with interrupts.handled():
            harness("before the signal")  # a running job's stderr is untouched
            with pytest.raises(SystemExit):
                interrupts._on_signal(signal.SIGINT, None)
            harness("Traceback (most recent call last): from the harness")
            print("the one line", file=sys.stderr)  # the main thread's line gets through
        harness("after the run")  # handled() gives stderr back to callers that go on
        root.setLevel(logging.DEBUG)
        with interrupts.handled():
            with pytest.raises(SystemExit):
                interrupts._on_signal(signal.SIGINT, None)
            harness("at DEBUG other threads still write")
    finally:
        root.setLevel(level)
        logging.disable(logging.NOTSET)
    err = capsys.readouterr().err
    assert err.splitlines() == ["before the signal", "the one line", "after the run",
                                "at DEBUG other threads still write"]
    interrupts._State.quiet = True
    interrupts.stay_quiet()  # the interpreter's end after an interrupted command: quiet too
    harness("at the interpreter's end")
    assert capsys.readouterr().err == ""


def test_the_resume_command_drops_force_and_masks_credentials():
    command = run.resume_command(["--config", "c.yaml", "--force", "--s3_secret_access_key=wJalr/XUt",
                                  "--s3_session_token", "FQoGZX", "--output", "s3://KEY:SECRET@b/out",
                                  "--engine", "spark"])
    words = shlex.split(command)
    assert words[1:] == ["-m", "pipelines.run", "--config", "c.yaml", "--s3_secret_access_key=***",
                         "--s3_session_token", "***", "--output", "s3://***@b/out", "--engine", "spark"]
    assert "wJalr" not in command and "FQoGZX" not in command and "SECRET" not in command
    assert shlex.split(run.resume_command(["--config", "a b.yaml"]))[-1] == "a b.yaml"  # quoted for the shell


def test_the_line_says_where_the_run_stopped(monkeypatch):
    monkeypatch.setattr(interrupts._State, "signum", signal.SIGINT)
    line = run.interrupted_line(["--config", "c.yaml"], "clean", ["extract"])
    assert line.startswith("interrupted in stage clean: outputs of finished stages (extract) are kept; "
                           "resume with: ") and line.endswith(" -m pipelines.run --config c.yaml")
    assert run.interrupted_line(["--config", "c.yaml"], "extract", []).startswith(
        "interrupted in stage extract: no stage had finished; resume with: ")
    assert run.interrupted_line(["--config", "c.yaml"], None, []).startswith(
        "interrupted while no stage was running (finished stages keep their outputs); run again with: ")
    monkeypatch.setattr(interrupts._State, "signum", signal.SIGTERM)
    assert run.interrupted_line([], "clean", []).startswith("interrupted (SIGTERM) in stage clean: ")


def _interrupted_in_dedup_exact(tmp_path, monkeypatch, capsys, runner):
    """``pipelines.run`` over extract (a real stage) then dedup_exact run by ``runner``:
    it must end as interrupted in dedup_exact (130, the one line); (stderr, the job's config)."""
    import pipelines.job as job
    from pipelines.stages import StagePlan
    from tests.pipelines.test_job_decisions import Stage, job_config

    config = job_config(tmp_path, stages="[extract, dedup_exact]", sections="dedup: {}\n")
    plans = {"extract": Stage(config.output).plan(),
             "dedup_exact": StagePlan(name="dedup_exact", config_hash="c", inputs=(), fingerprint="f",
                                      build=lambda p: None, runner=runner)}
    monkeypatch.setattr(job, "plan_stage", lambda config, stage: plans[stage])
    code = run.main(["--config", str(Path(tmp_path) / "job.yaml"), "--no-progress", "--no-report", "--log-level", "WARNING"])
    err = capsys.readouterr().err
    assert code == 130
    assert err.splitlines()[-1].startswith("interrupted in stage dedup_exact: outputs of finished stages "
                                           "(extract) are kept; resume with: "), err
    return err, config


def test_a_stage_interrupted_inside_beam_is_not_reported_as_failed(tmp_path, monkeypatch, capsys):
    """Beam turns the signal's SystemExit inside a DoFn into a RuntimeError: the job must
    still end as interrupted (exit 130, the one line), not as a failed stage (exit 1)."""
    def interrupted_in_beam(options):
        try:
            interrupts._on_signal(signal.SIGINT, None)
        except SystemExit:
            raise RuntimeError("SystemExit: 130 [while running 'Edges/LinkSub']") from None

    err, _ = _interrupted_in_dedup_exact(tmp_path, monkeypatch, capsys, interrupted_in_beam)
    assert "stage dedup_exact failed" not in err and "Traceback" not in err and len(err.splitlines()) == 1


def test_a_signal_whose_exit_was_swallowed_still_ends_the_run_and_the_stage_is_not_recorded(
        tmp_path, monkeypatch, capsys):
    """The signal's SystemExit raised inside a ``__del__`` running in the main thread is
    printed as "Exception ignored" (hidden by the quiet hook) and the stage runs to its
    end: seen once on CI as exit 0 with the interrupted stage's manifest written. The run
    must still end as interrupted, and that stage must rerun on resume."""
    import gc

    from pipelines.manifest import read_manifest

    class SignalledWhileCollected:
        def __del__(self):
            interrupts._on_signal(signal.SIGINT, None)

    def swallowed(options):
        SignalledWhileCollected()  # collected at once: __del__'s SystemExit is "ignored"
        gc.collect()
        return {"records_in": 0}

    err, config = _interrupted_in_dedup_exact(tmp_path, monkeypatch, capsys, swallowed)
    assert read_manifest(config.output, "dedup_exact") is None and read_manifest(config.output, "extract")
    assert "Exception ignored" not in err and "Traceback" not in err
