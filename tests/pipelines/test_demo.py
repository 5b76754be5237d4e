"""The demo (``make run``): its page-area labels, its training budget, and the whole job."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from pipelines.demo import AREAS, MODULE_AREA, area_of
from tests.conftest import shared

ROOT = Path(__file__).resolve().parents[2]


def test_every_crawlable_module_has_an_area_of_the_taxonomy():
    config = yaml.safe_load((ROOT / "configs" / "demo.yaml").read_text())
    pattern = config["crawl"]["allow_patterns"][0]
    modules = re.search(r"/\((.*?)\)\(", pattern).group(1).split("|")
    assert len(modules) > 80
    assert sorted(m for m in modules if m not in MODULE_AREA) == []
    assert set(config["label"]["sets"][0]["values"]) == set(AREAS)


def test_area_of_urls():
    assert area_of("http://127.0.0.1:8765/json.decoder.html") == "internet"
    assert area_of("http://127.0.0.1:8765/collections.abc.html") == "text_data"
    assert area_of("http://127.0.0.1:8765/index.html") == ""


def test_the_demo_trains_within_its_budget():
    """The demo's language model: steps x windows x tokens within DEMO_LM_TOKEN_BUDGET (the
    count of training tokens, not seconds: 300 x 32 x 256 took 35 CPU-s of the demo)."""
    from pipelines.demo import DEMO_LM_BATCH, DEMO_LM_STEPS, DEMO_LM_TOKEN_BUDGET, DEMO_LM_WINDOW, demo_lm_args

    assert DEMO_LM_STEPS * DEMO_LM_BATCH * DEMO_LM_WINDOW <= DEMO_LM_TOKEN_BUDGET <= 250_000
    assert demo_lm_args() == ["--steps", str(DEMO_LM_STEPS), "--batch-size", str(DEMO_LM_BATCH),
                              "--window", str(DEMO_LM_WINDOW)]


@pytest.mark.slow
def test_the_demo_end_to_end(tmp_path, capsys):
    """``make run``'s job (pydoc site, crawl, every stage, the detector and labeller trained):
    every stage reconciles, the detector is trained at the demo's size, the review queue is
    printed once, the report names the config as run, and a second run resumes everything."""
    import json

    from pipelines import demo
    from pipelines.demo import DEMO_LM_BATCH, DEMO_LM_STEPS, DEMO_LM_WINDOW

    template = (ROOT / "configs" / "demo.yaml").read_text()
    config = tmp_path / "demo.yaml"
    config.write_text(template.replace(".models/lid.176.ftz", str(shared("models", "lid.176.ftz"))))
    out = tmp_path / "out"
    assert demo.main(["--config", str(config), "--output", str(out), "--no-progress"]) == 0
    printed = capsys.readouterr().out
    stages = yaml.safe_load(template)["stages"]
    for stage in stages:
        counts = json.loads((out / "manifests" / f"{stage}.json").read_text())["counts"]
        assert counts["records_in"] == counts["out"] + counts["rejected"] + counts["failed"], stage
    assert json.loads((out / "manifests" / "tokenize.json").read_text())["counts"]["out"] > 20
    current = (out / "models" / "anomaly" / "CURRENT").read_text().strip()
    lm = json.loads((out / "models" / "anomaly" / current / "meta.json").read_text())["lm"]
    assert (lm["steps"], lm["batch_size"], lm["max_tokens"]) == (DEMO_LM_STEPS, DEMO_LM_BATCH, DEMO_LM_WINDOW)
    assert printed.count("review queue:") == 1 and printed.count("pipelines.review serve") == 1
    report = json.loads((out / "report" / "report.json").read_text())
    assert report["config"] == str(out / "demo.yaml") and (out / "demo.yaml").exists()
    assert "make run" in (out / "demo.yaml").read_text().splitlines()[1]
    assert report["run_time"]["stages_cpu_s"] > 0
    # again: every stage resumes, the detector is reused, nothing is trained
    assert demo.main(["--config", str(config), "--output", str(out), "--no-progress"]) == 0
    again = capsys.readouterr().out
    assert "anomaly detector unchanged: reusing" in again and "labeller already trained" in again
    table = again.rsplit("stage ", 1)[1]
    assert all("resumed (manifest matched)" in table.split(f"\n{s} ", 1)[1].splitlines()[0] for s in stages)
    assert (out / "models" / "anomaly" / "CURRENT").read_text().strip() == current
