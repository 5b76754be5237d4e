"""The command-line entry points: every console script names a ``pipelines`` command that
``python -m`` runs too, and the commands that run no pipeline print nothing of Beam's."""

from __future__ import annotations

import importlib
import subprocess
import sys
import tomllib

import pytest

from tests.conftest import ROOT

SCRIPTS = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_console_scripts_are_the_python_m_commands(script):
    module, _, function = SCRIPTS[script].partition(":")
    assert module.startswith("pipelines.") and function == "main"
    assert callable(getattr(importlib.import_module(module), function))
    assert 'if __name__ == "__main__":' in (ROOT / (module.replace(".", "/") + ".py")).read_text(encoding="utf-8")


@pytest.mark.parametrize("argv,stderr", [
    (["pipelines.tiers", "status", "--config", "configs/demo.yaml"], ""),
    (["pipelines.quality", "train", "--config", "missing.yaml", "--positive", "x.txt"],
     "config error: missing.yaml: config file not found\n"),
    (["pipelines.labeller", "train", "--config", "missing.yaml", "--set", "topic", "--seed", "x.jsonl"],
     "config error: missing.yaml: config file not found\n"),
    (["pipelines.anomaly", "train", "--config", "missing.yaml"], "config error: missing.yaml: config file not found\n"),
    (["pipelines.report", "--help"], ""),
    (["pipelines.review", "--help"], ""),
    (["pipelines.engines", "--help"], ""),
], ids=["tiers", "quality", "labeller", "anomaly", "report", "review", "engines"])
def test_commands_without_a_pipeline_print_nothing_of_beams(argv, stderr):
    """Beam logs notices about optional Google Cloud clients when it is imported ("apitools
    not found"); these commands import it (the config, the filesystems) but run nothing."""
    result = subprocess.run([sys.executable, "-m", *argv], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.stderr == stderr


def test_run_help_lists_the_stages_in_order_with_what_each_does():
    from pipelines.stage_specs import STAGE_SPECS

    result = subprocess.run([sys.executable, "-m", "pipelines.run", "--help"], cwd=ROOT, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0
    lines = result.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("stages, in pipeline order"))
    rows = [line.split() for line in lines[start + 2:start + 2 + len(STAGE_SPECS)]]
    assert [(r[0], r[1]) for r in rows] == [(s.name, s.section + ":") for s in STAGE_SPECS]
    assert all(" ".join(r[2:]) == s.does != "" for r, s in zip(rows, STAGE_SPECS))
