"""The engine's own output goes to <output>/logs/, not the console (pipelines/engine_log.py)."""

from __future__ import annotations

import io
import logging
import os
from pathlib import Path

from pipelines import engine_log
from pipelines.engine_log import relevant_lines


def console() -> tuple[logging.Handler, io.StringIO]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    logging.getLogger().addHandler(handler)
    return handler, stream


def beam_root_record(message: str) -> logging.LogRecord:
    """A record as Beam's code logs it with ``logging.warning`` (on the root logger)."""
    path = os.path.join(os.sep, "venv", "site-packages", "apache_beam", "utils", "retry.py")
    return logging.getLogger().makeRecord("root", logging.WARNING, path, 1, message, (), None)


def test_beam_and_the_job_server_go_to_the_file_ours_stay_on_the_console(tmp_path: Path) -> None:
    handler, stream = console()
    beam, java = logging.getLogger("apache_beam.runners"), logging.getLogger("tokenfactory.jobserver")
    before = (logging.getLogger("apache_beam").propagate, java.level)
    beam_level = logging.getLogger("apache_beam").level
    logging.getLogger("apache_beam").setLevel(logging.WARNING)  # as a run sets it (earlier tests may not)
    try:
        with engine_log.engine_log(str(tmp_path / "out")) as log:
            assert engine_log.active() is log
            beam.warning("Tags requested but not declared")
            java.info("SLF4J: Failed to load class")
            logging.getLogger().handle(beam_root_record("Waiting for grpc channel to be ready"))
            logging.getLogger("pipelines.job").warning("stage extract: ours")
            assert log.summary() == "3 lines"
        assert engine_log.active() is None
    finally:
        logging.getLogger().removeHandler(handler)
        logging.getLogger("apache_beam").setLevel(beam_level)
    text = Path(log.path).read_text()
    assert log.path == log.final and Path(log.path).parent == tmp_path / "out" / "logs"
    assert Path(log.path).name.startswith("engine-") and log.path.endswith(".log")
    for line in ("WARNING apache_beam.runners: Tags requested but not declared",
                 "INFO tokenfactory.jobserver: SLF4J: Failed to load class",
                 "WARNING root: Waiting for grpc channel to be ready"):
        assert line in text
    assert "ours" not in text
    assert stream.getvalue() == "stage extract: ours\n"  # the console: ours only
    assert (logging.getLogger("apache_beam").propagate, java.level) == before  # put back
    assert not any(isinstance(f, engine_log._BeamOnRoot) for h in logging.getLogger().handlers for f in h.filters)


def test_nothing_logged_leaves_no_file(tmp_path: Path) -> None:
    with engine_log.engine_log(str(tmp_path / "out")) as log:
        assert log.summary() == ""
    assert not (tmp_path / "out" / "logs").exists()


def test_an_output_it_cannot_write_gets_its_log_in_the_temporary_directory(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("a file where the output's folder would be")
    with engine_log.engine_log(str(blocked / "out")) as log:
        logging.getLogger("tokenfactory.jobserver").info("a line")
    assert Path(log.path).read_text().endswith("INFO tokenfactory.jobserver: a line\n")
    assert log.final == log.path and not log.path.startswith(str(tmp_path))
    Path(log.path).unlink()


def test_the_log_masks_credentials(tmp_path: Path) -> None:
    from pipelines.run import RedactingFilter

    with engine_log.engine_log(str(tmp_path / "out"), filters=(RedactingFilter(),)) as log:
        logging.getLogger("tokenfactory.jobserver").info("options: s3://AKIAEXAMPLE:sekrit@bucket/x --hf_token=hf_abc")
    text = Path(log.path).read_text()
    assert "sekrit" not in text and "hf_abc" not in text and "bucket/x" in text


def test_the_tail_is_the_last_error_lines(tmp_path: Path) -> None:
    with engine_log.engine_log(str(tmp_path / "out")) as log:
        java = logging.getLogger("tokenfactory.jobserver")
        java.info("starting")
        for i in range(30):
            java.info("26/12/07 ERROR Executor: task %d failed", i)
        java.info("Caused by: java.lang.OutOfMemoryError: Java heap space")
        java.info("done")
        assert log.summary() == "33 lines, 31 naming an error or exception"
        tail = log.tail(limit=5)
    assert len(tail) == 5 and tail[-1].endswith("Caused by: java.lang.OutOfMemoryError: Java heap space")
    assert tail[0].endswith("task 26 failed")


def test_relevant_lines() -> None:
    lines = ["INFO ok", "Traceback (most recent call last):", "  File x", "ValueError: bad", "Caused by: y",
             "WARN flaky", "SEVERE: z", "x" * 900 + " ERROR "]
    assert relevant_lines(lines, 10) == ["Traceback (most recent call last):", "ValueError: bad", "Caused by: y",
                                         "SEVERE: z", "x" * 500]
    assert relevant_lines(lines, 1) == ["x" * 500]
    assert relevant_lines(["INFO an Errorless line"], 5) == []  # a word starting with Error is not one


def test_mavens_error_is_quoted_plainly() -> None:
    import subprocess

    from pipelines.engines import _last_error

    done = subprocess.CompletedProcess([], 1, stdout="[\x1b[1;31mERROR\x1b[m] Failed to execute goal: Could not find "
                                                  "artifact org.apache.beam:beam-runners-flink-1.19-job-server:jar:2.62.0\n"
                                                  "[\x1b[1;31mERROR\x1b[m] -> [Help 1]\n", stderr="")
    assert _last_error(done) == ("Failed to execute goal: Could not find artifact "
                                 "org.apache.beam:beam-runners-flink-1.19-job-server:jar:2.62.0")
    assert _last_error(subprocess.CompletedProcess([], 1, stdout="", stderr="")) == "no output"


def test_direct_mp_workers_write_to_the_engine_log_not_the_console(tmp_path: Path, capfd) -> None:
    """FnApiRunner's multi_processing SDK workers are shell commands with this process's
    stderr: each printed Beam's import notice and its INFO lines on the console."""
    import json

    from pipelines.run import main

    data = tmp_path / "docs.jsonl"
    data.write_text("".join(json.dumps({"id": f"d{i}", "text": f"document number {i} " * 30}) + "\n"
                            for i in range(6)))
    config = tmp_path / "job.yaml"
    config.write_text(f"output: {tmp_path / 'out'}\ninputs:\n  - {{format: jsonl, path: \"{data}\"}}\n"
                      "stages: [extract]\nbeam_args: []\n")
    capfd.readouterr()
    out = io.StringIO()
    assert main(["--config", str(config), "--engine", "direct-mp", "--no-progress", "--no-report"], out=out) == 0
    console = capfd.readouterr()
    noise = [line for line in (console.out + console.err).splitlines()
             if "apitools" in line or "sdk_worker" in line or "INFO:__main__" in line]
    assert noise == [], noise[:5]
    [log] = (tmp_path / "out" / "logs").glob("engine-*.log")
    text = log.read_text()
    assert "Python sdk harness starting" in text  # the workers' own lines, in the file
    assert f"engine log: {log}" in out.getvalue()
