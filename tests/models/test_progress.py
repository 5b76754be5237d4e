"""Training progress: a bar on a terminal, plain lines on a pipe (models/progress.py)."""

from __future__ import annotations

import io
import time

from models.progress import Steps, Working, format_steps


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_format_steps_has_rate_eta_and_elapsed() -> None:
    assert format_steps("language model", 100, 300, 20.0, postfix="loss 3.250") == (
        "language model: 100/300 steps (5.0/s, ETA 0:00:40) loss 3.250 [0:00:20]")
    assert format_steps("lm", 300, 300, 60.0) == "lm: 300/300 steps (5.0/s) [0:01:00]"
    assert format_steps("lm", 0, 300, 0.0) == "lm: 0/300 steps (0.0/s) [0:00:00]"  # no ETA before a step


def test_plain_lines_on_a_pipe_every_interval_and_at_the_end() -> None:
    out = io.StringIO()
    with Steps(3, "signals autoencoder", out=out, every_s=0.0) as bar:
        for loss in (0.5, 0.25, 0.125):
            bar.update(loss=loss)
    lines = out.getvalue().splitlines()
    assert len(lines) == 4  # one per update (interval 0) and the last
    assert lines[0].startswith("signals autoencoder: 1/3 steps (") and "loss 0.500" in lines[0]
    assert lines[-1].startswith("signals autoencoder: 3/3 steps (") and "loss 0.125" in lines[-1]
    assert "\r" not in out.getvalue()


def test_a_pipe_gets_no_line_per_step() -> None:
    out = io.StringIO()
    with Steps(1000, "language model", out=out, every_s=3600.0) as bar:
        for _ in range(1000):
            bar.update()
    assert out.getvalue().splitlines() == [out.getvalue().splitlines()[-1]]  # the closing line only
    assert "1,000/1,000 steps" in out.getvalue()


def test_a_terminal_gets_a_bar_with_rate_and_eta() -> None:
    out = Terminal()
    with Steps(50, "language model", out=out) as bar:
        for _ in range(50):
            bar.update(loss=2.0)
    text = out.getvalue()
    assert "\r" in text and "language model" in text and "50/50" in text and "step/s" in text
    assert "loss 2.000" in text


def test_working_reports_the_elapsed_time_of_a_silent_call() -> None:
    out = io.StringIO()
    with Working("tokenizer training", out=out, every_s=0.05):
        time.sleep(0.3)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("tokenizer training: running ")
    assert lines[-1].startswith("tokenizer training: done in ")
    quiet = io.StringIO()
    with Working("fast call", out=quiet, every_s=60):
        pass
    assert quiet.getvalue() == ""  # a call shorter than the interval prints nothing on a pipe
