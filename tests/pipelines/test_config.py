"""Config validation: every mistake gives one error naming the file and the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipelines.config import ConfigError, JobConfig, load_config
from pipelines.run import main
from tests.conftest import shared


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "job.yaml"
    path.write_text(text)
    return str(path)


GOOD = """
output: {out}
inputs:
  - format: warc
    path: {warc}
"""


def good(tmp_path: Path) -> str:
    return GOOD.format(out=tmp_path / "out", warc=shared("warc", "warcio_example.warc.gz"))


def test_good_config_loads(tmp_path):
    config = load_config(write(tmp_path, good(tmp_path)))
    assert isinstance(config, JobConfig) and config.active_stages() == ("extract",)
    assert config.extract.method == "cascade"


@pytest.mark.parametrize("extra,key,message", [
    ("colour: blue\n", "colour", "unknown key"),
    ("extract:\n  methd: trafilatura\n", "extract.methd", "unknown key"),
    ("extract:\n  timeout_s: fast\n", "extract.timeout_s", "expected a number"),
    ("extract:\n  min_chars: 1.5\n", "extract.min_chars", "expected an integer"),
    ("extract:\n  min_chars: true\n", "extract.min_chars", "expected an integer"),
    ("extract:\n  method: magic\n", "extract", "method must be one of"),
    ("extract: [1, 2]\n", "extract", "expected a mapping"),
    ("stages: [extract, dedupe]\n", "top level", "unknown stages"),
    ("stages: extract\n", "stages", "expected a list"),
    ("crawl:\n  min_delay_s: 1\n", "crawl", "needs seeds or seeds_file"),
    ("crawl:\n  seeds: [http://x]\n  max_depth: -1\n", "crawl", "max_depth must be >= 0"),
    ("crawl:\n  seeds: [http://x]\n  allow_patterns: ['(']\n", "crawl", "invalid URL pattern"),
    ("crawl:\n  seeds: [http://x]\n  respect_robots: 'no'\n", "crawl.respect_robots", "expected a boolean"),
])
def test_bad_values_name_file_and_key(tmp_path, extra, key, message):
    path = write(tmp_path, good(tmp_path) + extra)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    text = str(err.value)
    assert text.startswith(path) and key in text and message in text


def test_missing_input_names_the_key(tmp_path):
    path = write(tmp_path, f"output: {tmp_path}/o\ninputs:\n  - format: jsonl\n    path: {tmp_path}/none/*.jsonl\n")
    with pytest.raises(ConfigError, match=r"inputs\[0\]\.path: no file matches"):
        load_config(path)
    path = write(tmp_path, f"output: {tmp_path}/o\ninputs:\n  - format: jsonl\n    path: {tmp_path}/x.jsonl\n")
    with pytest.raises(ConfigError, match=r"inputs\[0\]\.path: cannot read"):
        load_config(path)


def test_missing_seeds_file_and_required_keys(tmp_path):
    path = write(tmp_path, f"output: {tmp_path}/o\ncrawl:\n  seeds_file: {tmp_path}/seeds.txt\n")
    with pytest.raises(ConfigError, match=r"crawl\.seeds_file: cannot read"):
        load_config(path)
    path = write(tmp_path, "inputs: []\n")
    with pytest.raises(ConfigError, match="output: required key is missing"):
        load_config(path)
    path = write(tmp_path, f"output: {tmp_path}/o\ninputs:\n  - path: x\n")
    with pytest.raises(ConfigError, match=r"inputs\[0\]\.format: required key"):
        load_config(path)


def test_not_yaml_and_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(write(tmp_path, "output: [unclosed\n"))
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(str(tmp_path / "nope.yaml"))
    with pytest.raises(ConfigError, match="expected a mapping"):
        load_config(write(tmp_path, "- just\n- a list\n"))


def test_cli_reports_config_error_and_exits_2(tmp_path, capsys):
    path = write(tmp_path, good(tmp_path) + "bogus: 1\n")
    assert main(["--config", path]) == 2
    err = capsys.readouterr().err
    assert "config error" in err and path in err and "bogus" in err


def test_command_line_overrides(tmp_path):
    config = load_config(write(tmp_path, good(tmp_path)), output="/elsewhere", stages=("extract",))
    assert config.output == "/elsewhere" and config.stages == ("extract",)


def test_shipped_configs_are_valid():
    root = Path(__file__).resolve().parents[2] / "configs"
    for name in ("local.yaml",):
        assert load_config(str(root / name)).inputs


def clean_config(tmp_path, lid: str, extra: str = "") -> str:
    return write(tmp_path, good(tmp_path) + f"clean:\n  langid:\n    model: {lid}\n" + extra)


def test_missing_or_corrupt_model_fails_before_the_pipeline(tmp_path):
    with pytest.raises(ConfigError, match=r"clean\.langid\.model: model file not found"):
        load_config(clean_config(tmp_path, str(tmp_path / "lid.ftz")))
    corrupt = tmp_path / "corrupt.ftz"
    corrupt.write_bytes(b"\x00not a model" * 50)
    with pytest.raises(ConfigError, match=r"clean\.langid\.model: not a fastText model"):
        load_config(clean_config(tmp_path, str(corrupt)))
    lid = str(shared("models", "lid.176.ftz"))
    with pytest.raises(ConfigError, match=r"clean\.anomaly\.model: model file not found"):
        load_config(clean_config(tmp_path, lid, f"  anomaly:\n    model: {tmp_path}/a.pt\n"))
    with pytest.raises(ConfigError, match=r"clean\.quality\.model: .*label 'hq'"):
        load_config(clean_config(tmp_path, lid, f"  quality:\n    model: {lid}\n"))
    config = load_config(clean_config(tmp_path, lid))
    assert config.active_stages() == ("extract", "clean")
    with pytest.raises(ConfigError, match=r"clean\.langid: threshold must be in"):
        load_config(clean_config(tmp_path, f"{lid}\n    threshold: 7"))
