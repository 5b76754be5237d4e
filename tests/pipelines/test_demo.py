"""The demo's page-area labels: every module the demo crawl may reach has an area."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from pipelines.demo import AREAS, MODULE_AREA, area_of

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
