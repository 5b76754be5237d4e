"""Config validation: every mistake gives one error naming the file and the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipelines.config import ConfigError, JobConfig, from_mapping, load_config
from pipelines.config_yaml import read_yaml_file
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
    ("extract:\n  methd: trafilatura\n", "extract.methd", "unknown key (did you mean 'method'?)"),
    ("extract:\n  colour: blue\n", "extract.colour", "unknown key (allowed in extract:"),  # nothing close
    ("extract:\n  timeout_s: fast\n", "extract.timeout_s", "expected a number"),
    ("extract:\n  min_chars: 1.5\n", "extract.min_chars", "expected an integer"),
    ("extract:\n  min_chars: true\n", "extract.min_chars", "expected an integer"),
    ("extract:\n  method: magic\n", "extract", "method must be one of"),
    ("extract: [1, 2]\n", "extract", "expected a mapping"),
    ("stages: [extract, dedupe]\n", "top level", "unknown stages"),
    ("stages: [extract, cleen]\n", "top level", "unknown stages ['cleen'] (did you mean 'clean'?)"),
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
    """Every config in configs/ has known keys and valid values; those that read only
    local files (the examples over ../shared/data and examples/data) load in full: inputs
    matched, models loaded. The others name buckets or URLs, or crawl the demo's site."""
    root = Path(__file__).resolve().parents[2] / "configs"
    loaded = set()
    for path in sorted(root.glob("*.yaml")):
        config = from_mapping(JobConfig, read_yaml_file(str(path)))
        assert config.active_stages(), path.name
        places = [config.output, *(i.path for i in config.inputs), config.clean.langid.model if config.clean else ""]
        if config.crawl is None and not any("://" in p for p in places):
            assert load_config(str(path)).inputs, path.name
            loaded.add(path.name)
    assert {"jsonl.yaml", "parquet.yaml", "warc.yaml", "local.yaml"} <= loaded


def clean_config(tmp_path, lid: str, extra: str = "") -> str:
    return write(tmp_path, good(tmp_path) + f"clean:\n  langid:\n    model: {lid}\n" + extra)


def test_language_codes_are_the_models_labels(tmp_path):
    """lid.176 labels Norwegian Bokmål "no": a config listing "nb" rejected every Norwegian
    document as another language, silently (issue 18, item 4). Aliases resolve; codes the
    model cannot emit are config errors naming the key."""
    lid = str(shared("models", "lid.176.ftz"))
    with pytest.raises(ConfigError, match=r"languages\[0\]: expected a string, got False \(YAML reads no"):
        load_config(clean_config(tmp_path, lid, "    languages: [no]\n"))  # the Norway problem
    config = load_config(clean_config(tmp_path, lid, "    languages: [NB, en, 'no', zh_CN]\n"
                                                     "  rules_languages: [nb]\n"))
    assert config.clean.langid.languages == ("no", "en", "zh") and config.clean.rules_languages == ("no",)
    with pytest.raises(ConfigError, match=r"clean\.langid\.languages: 'xx', 'klingon' are not among the 176 "
                                          r"languages .*lid\.176\.ftz can emit"):
        load_config(clean_config(tmp_path, lid, "    languages: [en, xx, klingon]\n"))
    with pytest.raises(ConfigError, match=r"clean\.rules_languages: 'english' is not among the 176"):
        load_config(clean_config(tmp_path, lid, "  rules_languages: [english]\n"))


def test_missing_or_corrupt_model_fails_before_the_pipeline(tmp_path):
    with pytest.raises(ConfigError, match=r"clean\.langid\.model: model file not found"):
        load_config(clean_config(tmp_path, str(tmp_path / "lid.ftz")))
    corrupt = tmp_path / "corrupt.ftz"
    corrupt.write_bytes(b"\x00not a model" * 50)
    with pytest.raises(ConfigError, match=r"clean\.langid\.model: not a fastText model"):
        load_config(clean_config(tmp_path, str(corrupt)))
    lid = str(shared("models", "lid.176.ftz"))
    with pytest.raises(ConfigError, match=r"clean\.anomaly\.model: .*no trained anomaly detector"):
        load_config(clean_config(tmp_path, lid, f"  anomaly:\n    model: {tmp_path}/anomaly\n"))
    (tmp_path / "a.pt").write_bytes(b"\x00old" * 10)  # a version-1 single-file autoencoder
    with pytest.raises(ConfigError, match=r"clean\.anomaly\.model: .*single file.*retrain"):
        load_config(clean_config(tmp_path, lid, f"  anomaly:\n    model: {tmp_path}/a.pt\n"))
    with pytest.raises(ConfigError, match=r"clean\.quality\.model: .*label 'hq'"):
        load_config(clean_config(tmp_path, lid, f"  quality:\n    model: {lid}\n"))
    config = load_config(clean_config(tmp_path, lid))
    assert config.active_stages() == ("extract", "clean")
    with pytest.raises(ConfigError, match=r"clean\.langid: threshold must be in"):
        load_config(clean_config(tmp_path, f"{lid}\n    threshold: 7"))


# ---------------------------------------------------------------- inputs inside the output (issue 13.5)

import json  # noqa: E402
import re  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from pipelines.config_paths import OUTPUT_AREAS, input_problem, location, may_match_within  # noqa: E402
from pipelines.config_yaml import MAX_CONFIG_BYTES, MAX_DEPTH, MAX_NODES  # noqa: E402
from transforms.crawl.fetcher import FetchPolicy  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def parquet_docs(path: Path, n: int = 5) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"id": [f"d{i}" for i in range(n)], "url": [f"https://e.org/{i}" for i in range(n)],
                             "text": [f"document number {i} " * 20 for i in range(n)]}), path)
    return path


def input_job(tmp_path: Path, output: str, pattern: str, fmt: str = "parquet") -> str:
    return write(tmp_path, f"output: {json.dumps(output)}\ninputs:\n  - format: {fmt}\n"
                           f"    path: {json.dumps(pattern)}\n")


def test_an_input_under_the_output_is_not_deleted_before_it_is_read(tmp_path, capsys):
    """The tester's case: a stage's earlier output given as the input of a job writing to the
    same output. Before, extract cleared docs/extract/ (the input) and ended with exit 0."""
    out = tmp_path / "OUT"
    part = parquet_docs(out / "docs" / "extract" / "part-00000-of-00001.parquet")
    config = input_job(tmp_path, str(out), str(out / "docs" / "extract" / "*.parquet"))
    assert main(["--config", config, "--no-progress", "--no-report", "--runner=FnApiRunner"]) == 2
    err = capsys.readouterr().err
    assert "inputs[0].path" in err and "docs/" in err and "would be lost" in err
    assert pq.read_table(part).num_rows == 5  # still there


@pytest.mark.parametrize("pattern", [
    "{out}/docs/extract/*.parquet",
    "{out}/docs/extract/part-00000-of-00001.parquet",
    "{out}/./docs/../docs//extract/*.parquet",
    "file://{out}/docs/extract/*.parquet",
    "{link}/docs/extract/*.parquet",  # a symlink to the output
    "{out}/*/extract/*.parquet",
    "{out}/d?cs/[e]xtract/*.parquet",
    "{root}/**/*.parquet",  # the output lies below the glob
    "{out}/failed/clean/*.parquet",
    "{out}/crawl/warc/*.parquet",
])
def test_input_patterns_that_reach_the_output_are_refused(tmp_path, pattern):
    out = tmp_path / "root" / "OUT"
    parquet_docs(out / "docs" / "extract" / "part-00000-of-00001.parquet")
    parquet_docs(out / "failed" / "clean" / "part-00000-of-00001.parquet")
    parquet_docs(out / "crawl" / "warc" / "x.parquet")
    os.symlink(out, tmp_path / "link")
    text = pattern.format(out=out, link=tmp_path / "link", root=tmp_path / "root")
    for output in (str(out), str(out) + "/", f"{tmp_path}/root/../root/OUT"):
        with pytest.raises(ConfigError, match=r"inputs\[0\]\.path: .* under the output"):
            load_config(input_job(tmp_path, output, text))


def test_a_matched_file_that_is_a_symlink_into_the_output_is_refused(tmp_path):
    out = tmp_path / "OUT"
    part = parquet_docs(out / "docs" / "clean" / "part.parquet")
    (tmp_path / "data").mkdir()
    os.symlink(part, tmp_path / "data" / "a.parquet")
    with pytest.raises(ConfigError, match=r"matches .*a\.parquet', which is really .*docs/clean/part"):
        load_config(input_job(tmp_path, str(out), str(tmp_path / "data" / "*.parquet")))


@pytest.mark.parametrize("area", OUTPUT_AREAS)
def test_every_area_the_job_writes_is_off_limits_for_inputs(tmp_path, area):
    assert input_problem(f"/j/out/{area}/x/y.jsonl", "/j/out")
    assert input_problem(f"s3://b/out/{area}/*.jsonl", "s3a://b/out/")
    assert not input_problem(f"/j/out/{area}x/y.jsonl", "/j/out")


def test_areas_match_what_a_real_run_writes(tmp_path):
    """Every top-level folder a real job creates under its output is an area."""
    data = parquet_docs(tmp_path / "data" / "docs.parquet")
    out = tmp_path / "out"
    config = input_job(tmp_path, str(out), str(data))
    assert main(["--config", config, "--no-progress", "--runner=FnApiRunner", "--log-level", "WARNING"]) == 0
    written = {p.name for p in out.iterdir()}
    assert {"docs", "manifests", "report"} <= written and written <= set(OUTPUT_AREAS)


def test_inputs_elsewhere_under_the_output_and_remote_overlaps(tmp_path):
    out = tmp_path / "OUT"
    raw = parquet_docs(out / "raw" / "docs.parquet")  # the user's own folder under the output
    assert load_config(input_job(tmp_path, str(out), str(raw))).inputs[0].path == str(raw)
    assert input_problem("s3://bucket/job/docs/extract/*.parquet", "s3a://bucket/job/")
    assert input_problem("gcs://Bucket/job/**", "gs://bucket/job")
    assert not input_problem("s3://bucket/job2/docs/x", "s3://bucket/job")
    assert not input_problem("s3://other/job/docs/x", "s3://bucket/job")
    assert not input_problem(f"{out}/docs/extract/*.parquet", "s3://bucket" + str(out))
    assert location("s3://b/a/../k?.json").parts == ("k?.json",)  # '?' is a glob, not a query
    assert may_match_within(location("/a/*/c"), location("/a/b/c"))
    assert not may_match_within(location("/a/*/d"), location("/a/b/c"))
    assert not may_match_within(location("/a/b"), location("/a/b/c"))  # a folder above: no file in it


def test_seeds_file_in_the_crawl_folder_is_refused(tmp_path):
    out = tmp_path / "OUT"
    (out / "crawl").mkdir(parents=True)
    (out / "crawl" / "seeds.txt").write_text("https://example.org/\n")
    path = write(tmp_path, f"output: {out}\ncrawl:\n  seeds_file: {out}/crawl/seeds.txt\n")
    with pytest.raises(ConfigError, match=r"crawl\.seeds_file: .*crawl/"):
        load_config(path)


def test_dedup_index_and_models_may_live_under_the_output(tmp_path):
    out = tmp_path / "OUT"
    config = load_config(write(tmp_path, good(tmp_path).replace(str(tmp_path / "out"), str(out))
                               + f"dedup:\n  index: {out}/index\n"))
    assert config.dedup.index == f"{out}/index"


@pytest.mark.parametrize("output,message", [
    ("{repo}/../shared/out", "read-only shared data folder"),
    ("{repo}/../shared/data/../data/x/", "read-only shared data folder"),
    ("{tmp}/shared-link/out", "read-only shared data folder"),
    ("{tmp}/a-file", "is an existing file"),
    ("{tmp}/a-file/below", "lies below the file"),
    ("file://{tmp}/out", "file:// URLs are not supported"),
])
def test_bad_outputs_are_config_errors(tmp_path, output, message):
    (tmp_path / "a-file").write_text("x")
    os.symlink(REPO.parent / "shared", tmp_path / "shared-link")
    path = write(tmp_path, good(tmp_path))
    with pytest.raises(ConfigError, match=r"output: .*" + message):
        load_config(path, output=output.format(repo=REPO, tmp=tmp_path))


# ---------------------------------------------------------------- values (issue 13.13)

@pytest.mark.parametrize("extra,key", [
    ("crawl:\n  seeds: [http://x]\n  timeout_s: .nan\n", "crawl.timeout_s"),
    ("crawl:\n  seeds: [http://x]\n  timeout_s: .inf\n", "crawl.timeout_s"),
    ("crawl:\n  seeds: [http://x]\n  min_delay_s: -.inf\n", "crawl.min_delay_s"),
    ("crawl:\n  seeds: [http://x]\n  backoff_s: 1.0e+400\n", "crawl.backoff_s"),
    ("crawl:\n  seeds: [http://x]\n  max_backoff_s: 1" + "0" * 400 + "\n", "crawl.max_backoff_s"),
    ("dedup:\n  minhash:\n    threshold: .NaN\n", "dedup.minhash.threshold"),
])
def test_nan_and_infinite_numbers_are_refused(tmp_path, extra, key):
    with pytest.raises(ConfigError, match=rf"{key}: expected a finite number"):
        load_config(write(tmp_path, good(tmp_path) + extra))


def test_integers_beyond_64_bits_and_zero_max_chars_are_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"crawl\.max_bytes: expected an integer within 64 bits"):
        load_config(write(tmp_path, good(tmp_path) + f"crawl:\n  seeds: [http://x]\n  max_bytes: {1 << 63}\n"))
    assert load_config(write(tmp_path, good(tmp_path) + f"crawl:\n  seeds: [http://x]\n"
                                                         f"  max_bytes: {(1 << 63) - 1}\n")).crawl
    lid = str(shared("models", "lid.176.ftz"))
    with pytest.raises(ConfigError, match=r"clean\.langid: max_chars must be > 0, got 0"):
        load_config(clean_config(tmp_path, f"{lid}\n    max_chars: 0"))
    with pytest.raises(ConfigError, match=r"clean\.quality: max_chars must be > 0, got -1"):
        load_config(clean_config(tmp_path, lid, "  quality:\n    max_chars: -1\n"))


@pytest.mark.parametrize("name", ["timeout_s", "min_delay_s", "backoff_s", "max_backoff_s"])
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_fetch_policy_refuses_nan_and_infinity(name, value):
    with pytest.raises(ValueError, match=f"{name} must be a finite number"):
        FetchPolicy(**{name: value})


# ---------------------------------------------------------------- YAML bounds (issue 13.6)

def laughs(levels: int, key: str = "output") -> str:
    lines = ['l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"l{i}: &l{i} [" + ",".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, levels)]
    return "\n".join(lines) + f"\n{key}: *l{levels - 1}\n"


def test_alias_bomb_is_refused_fast_with_a_short_message(tmp_path):
    import time

    text = laughs(6)  # 9**6 = 531,441 strings from 350 bytes
    assert len(text) < 500
    started = time.perf_counter()
    with pytest.raises(ConfigError, match=f"more than {MAX_NODES:,} values once aliases are expanded") as err:
        load_config(write(tmp_path, text))
    assert time.perf_counter() - started < 5 and len(str(err.value)) < 1000


def test_aliases_within_the_limits_still_work_and_values_are_quoted_short(tmp_path):
    path = write(tmp_path, good(tmp_path) + "extract: &e {min_chars: 5}\n" + laughs(3, "beam_args"))
    with pytest.raises(ConfigError) as err:  # 729 strings: within the limits, but l0 is an unknown key
        load_config(path)
    assert "l0: unknown key" in str(err.value)
    path = write(tmp_path, good(tmp_path) + laughs(4, "stages").replace("l0:", "# l0:", 0))
    text = "output: " + json.dumps(["x" * 100_000] * 3) + "\ninputs: []\n"
    with pytest.raises(ConfigError, match="output: expected a string") as err:
        load_config(write(tmp_path, text))
    assert len(str(err.value)) < 600


@pytest.mark.parametrize("text,message", [
    ("a: &a [*a]\n", "recursive alias"),
    ("a: &a {b: *a}\n", "recursive alias"),
    ("output: " + "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1) + "\n", f"more than {MAX_DEPTH} levels"),
    ("output: " + "[" * 100_000 + "]" * 100_000 + "\n", f"more than {MAX_DEPTH} levels"),
    ("output: x\n#" + "x" * MAX_CONFIG_BYTES + "\n", "over the limit of 1,048,576 bytes"),
    ("output: " + "9" * 5000 + "\n", "not valid YAML"),
    ("output: *nothing\n", "not valid YAML"),
])
def test_yaml_over_the_limits_is_a_config_error(tmp_path, text, message):
    with pytest.raises(ConfigError, match=message):
        load_config(write(tmp_path, text))


def test_unreadable_config_files_are_config_errors(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"output: caf\xe9\n")
    with pytest.raises(ConfigError, match="not UTF-8 text"):
        load_config(str(path))
    with pytest.raises(ConfigError, match="cannot read the config file"):
        load_config(str(tmp_path))
    with pytest.raises(ConfigError, match="1: unknown key"):  # keys of mixed types
        load_config(write(tmp_path, good(tmp_path) + "1: x\ncolour: y\n"))


# ---------------------------------------------------------------- credentials (issue 13.14)

@pytest.mark.parametrize("where", ["input", "output", "beam_args"])
def test_credentials_in_urls_are_refused_without_printing_them(tmp_path, capsys, where):
    secret = "wJalrXUtnFEMI/K7MDENG+bPxRfiCY"
    url = f"s3://AKIAIOSFODNN7:{secret}@bucket/x/*.jsonl"
    text = {"input": f"output: {tmp_path}/o\ninputs:\n  - format: jsonl\n    path: '{url}'\n",
            "output": f"output: '{url}'\ninputs:\n  - format: jsonl\n    path: {tmp_path}/x\n",
            "beam_args": good(tmp_path) + f"beam_args: ['--s3_endpoint_url=http://AKIAIOSFODNN7:{secret}@minio:9000']\n"}
    path = write(tmp_path, text[where])
    assert main(["--config", path]) == 2
    err = capsys.readouterr().err
    assert "credentials in a URL are not accepted" in err
    assert secret not in err and "AKIAIOSFODNN7" not in err and "K7MDENG" not in err


def test_credentials_are_masked_in_every_config_error(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, "output: ['s3://KEY:SECRET@bucket/x']\n"))
    assert "SECRET" not in str(err.value) and "s3://***@bucket/x" in str(err.value)
    with pytest.raises(ConfigError) as err:  # a value cut by the quoting: masked before it is cut
        load_config(write(tmp_path, "output: ['s3://KEY:" + "S" * 5000 + "@bucket/x']\n"))
    assert "SSS" not in str(err.value)
    seeds = load_config(write(tmp_path, good(tmp_path) + "crawl:\n  seeds: ['https://u:p@site.example/']\n"))
    assert seeds.crawl.seeds == ("https://u:p@site.example/",)  # a crawl target, not a location


def test_limits_are_the_documented_ones(tmp_path):
    """The bounds above, pinned: a change here is a change of the product's limits."""
    from pipelines.config import INT_RANGE
    from pipelines.config_errors import MAX_MESSAGE_CHARS, MAX_QUOTE_CHARS

    assert (MAX_CONFIG_BYTES, MAX_NODES, MAX_DEPTH) == (1 << 20, 100_000, 64)
    assert (MAX_QUOTE_CHARS, MAX_MESSAGE_CHARS) == (200, 4000)
    assert INT_RANGE == (-(2 ** 63), 2 ** 63 - 1)
    def nested(n: int) -> str:  # the top mapping, n lists and a scalar: n + 2 levels
        return "output: " + "[" * n + "x" + "]" * n + "\ninputs: []\n"

    with pytest.raises(ConfigError, match="output: expected a string"):  # exactly at the limit
        load_config(write(tmp_path, nested(MAX_DEPTH - 2)))
    with pytest.raises(ConfigError, match=f"nested more than {MAX_DEPTH} levels"):
        load_config(write(tmp_path, nested(MAX_DEPTH - 1)))
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, "output: " + json.dumps(["y" * 50] * 500) + "\n"))
    assert len(str(err.value)) <= MAX_QUOTE_CHARS + 300
    huge = ConfigError("k: " + "z" * 10 * MAX_MESSAGE_CHARS)
    assert len(str(huge)) == MAX_MESSAGE_CHARS + len(" [...]")


def test_outputs_with_glob_characters_in_their_names(tmp_path):
    """An output named like a glob (``run[1]``) is compared literally too."""
    out = tmp_path / "run[1]"
    assert input_problem(f"{out}/docs/extract/*.parquet", str(out))
    assert not input_problem(f"{tmp_path}/run1/docs/extract/*.parquet", str(out))


# ---------------------------------------------------------------- duplicate keys, system outputs (issue 36.8)

def test_a_key_given_twice_is_refused_with_both_lines(tmp_path):
    """The red team's config: a second ``output: /etc`` further down. PyYAML kept the last
    value silently and the job wrote 11 files into /etc."""
    path = write(tmp_path, good(tmp_path) + "extract:\n  min_chars: 5\noutput: /etc\n")
    with pytest.raises(ConfigError, match=r"duplicate key 'output' at line 2, column 1 and again at "
                                          r"line 8, column 1: YAML would silently keep only the last"):
        load_config(path)
    with pytest.raises(ConfigError, match=r"duplicate key 'min_chars' at line 7, column 3"):
        load_config(write(tmp_path, good(tmp_path) + "extract:\n  min_chars: 5\n  min_chars: 6\n"))
    with pytest.raises(ConfigError, match=r"duplicate key 'output'"):  # quoted or not, the same key
        load_config(write(tmp_path, good(tmp_path) + "'output': /tmp/x\n"))
    warc = shared("warc", "warcio_example.warc.gz")
    merged = (f"output: {tmp_path / 'out'}\ninputs:\n  - &in {{format: warc, path: {warc}}}\n"
              f"  - {{<<: *in, format: warc}}\n")  # a merge's key may be overridden: YAML's intent
    assert [i.format for i in load_config(write(tmp_path, merged)).inputs] == ["warc", "warc"]


def test_a_duplicate_key_on_the_command_line_path_exits_2_and_writes_nothing(tmp_path, capsys):
    first, second = tmp_path / "first", tmp_path / "second"
    path = write(tmp_path, good(tmp_path).replace(str(tmp_path / "out"), str(first)) + f"output: {second}\n")
    assert main(["--config", path, "--runner=FnApiRunner", "--no-progress", "--no-report"]) == 2
    assert "config error" in capsys.readouterr().err
    assert not first.exists() and not second.exists()


@pytest.mark.parametrize("output,message", [
    ("/", "is the system folder /:"),
    ("/etc", "is the system folder /etc:"),
    ("/etc/", "is the system folder /etc:"),
    ("/usr/../etc", "is the system folder /etc:"),
    ("{tmp}/etc-link", "is the system folder /etc:"),
    ("/usr", "is the system folder /usr"),
    ("/bin", "is the system folder"),
    ("/sbin", "is the system folder"),
    ("/lib", "is the system folder"),
    ("/var", "is the system folder /var:"),
    ("/boot", "is the system folder /boot:"),
    ("/dev", "is the system folder /dev:"),
    ("/proc", "a pseudo filesystem"),
    ("/proc/self/out", "a pseudo filesystem"),
    ("/sys", "a pseudo filesystem"),
    ("/sys/kernel/out", "a pseudo filesystem"),
    ("~", "is a home folder"),
    ("~/", "is a home folder"),
    ("/root", "is a home folder"),
    ("/home/someone", "is a home folder (/home/someone)"),
    ("/home/someone/", "is a home folder (/home/someone)"),
])
def test_system_and_home_folders_are_not_outputs(tmp_path, output, message):
    os.symlink("/etc", tmp_path / "etc-link")
    with pytest.raises(ConfigError, match=r"output: .*" + re.escape(message)):
        load_config(write(tmp_path, good(tmp_path)), output=output.format(tmp=tmp_path))


@pytest.mark.parametrize("output", ["/home/someone/out", "/tmp/tf-job", "/var/tmp/tf-job", "/usr/local/data/job",
                                    "{tmp}/out", "relative/out", "s3://bucket/etc", "s3://bucket"])
def test_folders_below_system_and_home_folders_are_outputs(tmp_path, output):
    config = load_config(write(tmp_path, good(tmp_path)), output=output.format(tmp=tmp_path))
    assert config.output == output.format(tmp=tmp_path)


def test_a_home_relative_output_is_expanded(tmp_path):
    """Beam's filesystems and the lease took ``~/out`` as it is: a folder named ``~`` in
    the working directory."""
    config = load_config(write(tmp_path, good(tmp_path)), output="~/tf-out")
    assert config.output == os.path.join(os.path.expanduser("~"), "tf-out")


# ---------------------------------------------------------------- reader errors (issue 36.10)

@pytest.mark.parametrize("data,where", [
    (b"output: /tmp/x\x00\n", "character #x0000 at line 1, column 15"),
    (b"output: /tmp/x\ninputs: []\n\x00\x00\x00", "character #x0000 at line 3, column 1"),
    (b"output: /tmp/x\n\x07inputs: []\n", "character #x0007 at line 2, column 1"),
    (b"\x1b[31moutput: /tmp/x\n", "character #x001b at line 1, column 1"),
])
def test_nul_and_control_characters_are_config_errors(tmp_path, capsys, data, where):
    path = tmp_path / "job.yaml"
    path.write_bytes(data)
    with pytest.raises(ConfigError, match=rf"{re.escape(str(path))}: not valid YAML: {where} is not allowed"):
        load_config(str(path))
    assert main(["--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("config error: ") and "Traceback" not in err and len(err.splitlines()) == 1


# ---------------------------------------------------------------- field names on the first record (issue 36.12)

from pipelines.config_inputs import FIELD_CHECK_FILES  # noqa: E402
from tests.s3server import s3_endpoint, s3_env  # noqa: E402,F401  (fixtures)

FIELD_DOCS = [{"doc_id": f"d{i}", "content": f"Document number {i} says something. " * 3,
               "meta": {"url": f"https://example.org/{i}", "lang": "en"}} for i in range(187)]


def write_docs(path: Path, docs: list[dict] = FIELD_DOCS, head: str = "") -> Path:
    """``docs`` as JSONL (plain or compressed by the suffix) or Parquet (``meta`` a struct)."""
    import bz2
    import gzip
    import lzma

    import zstandard

    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".parquet":
        pq.write_table(pa.Table.from_pylist(docs), path)
        return path
    data = (head + "".join(json.dumps(d) + "\n" for d in docs)).encode()
    pack = {".gz": gzip.compress, ".bz2": bz2.compress, ".xz": lzma.compress,
            ".zst": zstandard.ZstdCompressor().compress}.get(path.suffix, lambda b: b)
    path.write_bytes(pack(data))
    return path


def fields_job(tmp_path: Path, pattern: str, fmt: str = "jsonl", fields: str = "") -> str:
    return write(tmp_path, f"output: {tmp_path / 'out'}\ninputs:\n  - {{format: {fmt}, path: \"{pattern}\"{fields}}}\n"
                           "beam_args: ['--runner=FnApiRunner']\n")


def test_a_wrong_text_field_is_refused_before_extract_runs(tmp_path, capsys):
    """The red team's case: ``text_field`` left at ``text`` for records that hold
    ``content``; before, extract ran and failed record by record (exit 1)."""
    data = write_docs(tmp_path / "docs.jsonl")
    config = fields_job(tmp_path, str(data))
    assert main(["--config", config, "--no-progress", "--no-report", "--log-level", "WARNING"]) == 2
    err = capsys.readouterr().err
    assert err == (f"config error: {config}: inputs[0].text_field: 'text' is not a field of the first record of "
                   f"{data} (line 1), whose fields are: doc_id, content, meta; set text_field to the field that "
                   "holds the text\n")
    assert not (tmp_path / "out").exists()
    config = fields_job(tmp_path, str(data), fields=", text_field: content, id_field: doc_id, url_field: meta.url")
    assert main(["--config", config, "--no-progress", "--no-report", "--log-level", "WARNING"]) == 0
    counts = json.loads((tmp_path / "out" / "manifests" / "extract.json").read_text())["counts"]
    assert (counts["records_in"], counts["failed"]) == (187, 0)


@pytest.mark.parametrize("name", ["docs.jsonl", "docs.jsonl.gz", "docs.jsonl.zst", "docs.jsonl.bz2", "docs.jsonl.xz",
                                  "docs.parquet"])
@pytest.mark.parametrize("fields,message", [
    (", text_field: body", r"inputs\[0\]\.text_field: 'body' is not a field of .*, whose fields are: doc_id, "
                           r"content, meta; set text_field to the field that holds the text$"),
    (", text_field: content, id_field: docid", r"inputs\[0\]\.id_field: 'docid' is not a field .*: doc_id, content, "
                                            r"meta; set id_field to .* \(or leave id_field out"),
    (", text_field: content, url_field: meta.uri", r"inputs\[0\]\.url_field: 'meta\.uri' is not a field .* are: "
                                                   r"doc_id, content, meta; meta: meta\.lang, meta\.url; set url_field"),
    (", text_field: meta.url.text", r"text_field: 'meta\.url\.text' .* meta; meta\.url: not an object; set"),
    (", text_field: content.text", r"text_field: 'content\.text' .* meta; content: not an object; set"),
])
def test_field_names_are_checked_in_every_format(tmp_path, name, fields, message):
    data = write_docs(tmp_path / name)
    where = "the schema of" if name.endswith(".parquet") else "the first record of"
    fmt = "parquet" if name.endswith(".parquet") else "jsonl"
    with pytest.raises(ConfigError, match=message) as err:
        load_config(fields_job(tmp_path, str(data), fmt, fields))
    assert f"is not a field of {where} {data}" in str(err.value)


@pytest.mark.parametrize("name", ["docs.jsonl.gz", "docs.parquet"])
def test_fields_the_records_have_pass(tmp_path, name):
    data = write_docs(tmp_path / name)
    fmt = "parquet" if name.endswith(".parquet") else "jsonl"
    config = load_config(fields_job(tmp_path, str(data), fmt, ", text_field: content, id_field: doc_id, "
                                                              "url_field: meta.url, lang_field: meta.language"))
    assert config.inputs[0].url_field == "meta.url"  # lang is counted when missing, not checked


def test_every_matched_file_is_checked_up_to_the_limit(tmp_path):
    good_docs = [{"text": "t", **d} for d in FIELD_DOCS[:3]]
    for i in range(FIELD_CHECK_FILES + 2):
        write_docs(tmp_path / "in" / f"part-{i:03d}.jsonl", good_docs)
    write_docs(tmp_path / "in" / "part-001.jsonl")  # the second file lacks text
    with pytest.raises(ConfigError, match=r"'text' is not a field of the first record of .*part-001\.jsonl"):
        load_config(fields_job(tmp_path, f"{tmp_path}/in/*.jsonl"))
    write_docs(tmp_path / "in" / "part-001.jsonl", good_docs)
    write_docs(tmp_path / "in" / f"part-{FIELD_CHECK_FILES:03d}.jsonl")  # past the limit: the reader's to fail
    assert len(load_config(fields_job(tmp_path, f"{tmp_path}/in/*.jsonl")).inputs) == 1


def test_blank_lines_are_skipped_and_an_unparsable_first_line_is_left_to_the_reader(tmp_path):
    data = write_docs(tmp_path / "docs.jsonl", head="\n  \n")
    with pytest.raises(ConfigError, match=r"first record of .*docs\.jsonl \(line 3\)"):
        load_config(fields_job(tmp_path, str(data)))
    data = write_docs(tmp_path / "broken.jsonl", head="{broken\n")  # a failed/ record with its offset
    assert load_config(fields_job(tmp_path, str(data), fields=", text_field: body")).inputs


def test_remote_inputs_are_checked_too(tmp_path, s3_env):  # noqa: F811
    import boto3

    data = write_docs(tmp_path / "docs.jsonl.gz")
    client = boto3.client("s3")
    client.create_bucket(Bucket="fields")
    client.upload_file(str(data), "fields", "dolma/docs-0000.jsonl.gz")
    with pytest.raises(ConfigError, match=r"'text' is not a field of the first record of "
                                          r"s3://fields/dolma/docs-0000\.jsonl\.gz \(line 1\), whose fields are: "
                                          r"doc_id, content, meta"):
        load_config(fields_job(tmp_path, "s3://fields/dolma/*.jsonl.gz"))


def test_did_you_mean_names_the_closest_only_when_close() -> None:
    from pipelines.config_errors import did_you_mean

    assert did_you_mean("treshold", ["threshold", "languages", "model"]) == " (did you mean 'threshold'?)"
    assert did_you_mean("Threshold", ["threshold"]) == " (did you mean 'threshold'?)"  # case ignored
    assert did_you_mean("colour", ["threshold", "languages"]) == ""
    assert did_you_mean(1, ["threshold"]) == ""  # a YAML key that is not a string
    assert did_you_mean("max_word", ["max_words", "min_words"]) == " (did you mean 'max_words'?)"  # the closest
    assert did_you_mean("abcxy", ["abcde"]) == " (did you mean 'abcde'?)"  # ratio 0.6: the cutoff, kept
    assert did_you_mean("abxy", ["abcd"]) == ""  # ratio 0.5: below it
