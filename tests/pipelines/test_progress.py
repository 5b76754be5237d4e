"""The live progress line: counts recorded by the stage DoFns, rate and ETA."""

from __future__ import annotations

import io
from collections import Counter

from pipelines.progress import ProgressLine, format_line
from tests.conftest import shared
from transforms import progress


def test_format_line_with_and_without_eta():
    counts = Counter({"in": 1000, "out": 900, "rejected": 90, "failed": 10, "bytes": 250})
    line = format_line("extract", counts, 10.0, total_bytes=1000)
    assert line.startswith("extract: 1,000 in (100/s)  out 900  rejected 90  failed 10")
    assert "25.0% of input" in line and "ETA 0:00:30" in line
    assert "ETA" not in format_line("clean", counts, 10.0, None)


def test_line_shows_what_the_stage_records():
    out = io.StringIO()
    with ProgressLine("demo", total_bytes=100, out=out, every_s=0.01):
        progress.record("demo", "in", 5)
        progress.record("demo", "out", 4)
        progress.record("demo", "bytes", 50)
    assert "demo: 5 in" in out.getvalue().splitlines()[-1] and "50.0% of input" in out.getvalue()


def test_pipeline_run_reports_progress(tmp_path, capsys):
    from pipelines.run import main

    config = tmp_path / "job.yaml"
    config.write_text(f"output: {tmp_path / 'out'}\ninputs:\n  - format: warc\n"
                      f"    path: {shared('warc', 'resiliparse_warcfile.warc.gz')}\n"
                      "beam_args: ['--runner=FnApiRunner']\n")
    assert main(["--config", str(config), "--log-level", "WARNING"], out=io.StringIO()) == 0
    lines = [l for l in capsys.readouterr().err.splitlines() if l.startswith("extract: ")]
    assert lines and lines[-1].startswith("extract: 16 in") and "out 16" in lines[-1]
    assert "100.0% of input" in lines[-1]
