"""The stage table (``pipelines.stage_specs``): the decisions it holds, and that a new
stage is its transform plus one entry."""

from __future__ import annotations

import dataclasses
import io
import json
from pathlib import Path

import apache_beam as beam
import pytest

from pipelines import stage_specs
from pipelines.config import ConfigError, InputConfig, JobConfig, load_config
from pipelines.job import StageReport, error_ratio_limit
from pipelines.outputs import WriteStageOutputs
from pipelines.run import format_locations, main
from pipelines.stage_specs import (
    EARLIER_DOCS,
    STAGE_SPECS,
    StageSpec,
    doc_stages,
    docs_before,
    known_stages,
    plan_stage,
    spec_of,
    upstream_of,
)
from pipelines.stages import ReadDocs, StagePlan, upstream_docs
from pipelines.manifest import StageCounts
from transforms.routing import CountFn, StageOutputs


def test_stage_order():
    assert known_stages() == ("crawl", "extract", "clean", "dedup_exact", "dedup_minhash", "label",
                              "augment", "tokenizer", "tokenize")


def test_which_stages_make_documents():
    assert doc_stages() == ("extract", "clean", "dedup_exact", "dedup_minhash", "label", "augment")


def test_what_each_stage_reads_and_which_section_configures_it():
    assert {s.name: (s.section, s.reads) for s in STAGE_SPECS} == {
        "crawl": ("crawl", "seeds"), "extract": ("extract", "inputs"), "clean": ("clean", "extract"),
        "dedup_exact": ("dedup", EARLIER_DOCS), "dedup_minhash": ("dedup", "dedup_exact"),
        "label": ("label", EARLIER_DOCS), "augment": ("augment", EARLIER_DOCS),
        "tokenizer": ("tokenize", EARLIER_DOCS),
        "tokenize": ("tokenize", EARLIER_DOCS)}
    sections = {f.name for f in dataclasses.fields(JobConfig)}
    for i, spec in enumerate(STAGE_SPECS):
        assert spec.section in sections
        if spec.reads not in stage_specs.SOURCES + (EARLIER_DOCS,):  # a named, earlier document stage
            assert spec.reads in doc_stages() and known_stages().index(spec.reads) < i


def test_the_runners_per_stage_choices():
    assert [s.name for s in STAGE_SPECS if not s.failures_limited] == ["crawl"]  # fetch errors are outcomes
    assert [s.name for s in STAGE_SPECS if not s.runs_beam] == ["tokenizer"]  # no progress line
    assert {s.name: s.owns for s in STAGE_SPECS if s.owns} == {"crawl": ("crawl",)}

    class Config:
        class extract:  # noqa: N801
            max_error_ratio = 0.25

    assert error_ratio_limit(Config, "crawl") is None and error_ratio_limit(Config, "tokenize") == 0.25


def test_the_tokenizer_is_trained_by_default_only_without_a_model():
    by_default = spec_of("tokenizer").by_default
    assert by_default(type("Tokenize", (), {"model": ""})) is True
    assert by_default(type("Tokenize", (), {"model": "sp.model"})) is False


@pytest.mark.parametrize("stages, message", [
    (("crawl",), "stage 'crawl' needs a crawl: section"),
    (("clean",), "stage 'clean' needs a clean: section"),
    (("dedup_minhash",), "the dedup stages need a dedup: section"),
    (("label",), "stage 'label' needs a label: section"),
    (("tokenizer",), "the tokenize stages need a tokenize: section"),
    (("extract", "dedupe"), "unknown stages ['dedupe'] (did you mean 'dedup_exact'?); known: ['crawl', 'extract', "),
    (("extract", "zzz"), "unknown stages ['zzz']; known: ['crawl', 'extract', "),
])
def test_a_stage_needs_its_section(stages, message):
    with pytest.raises(ValueError) as raised:
        JobConfig(output="out", inputs=(InputConfig("jsonl", "x.jsonl"),), stages=stages)
    assert str(raised.value).startswith(message)


def test_the_output_listing_of_each_kind_of_stage():
    def report(stage: str, outputs: tuple[str, ...] = ()) -> StageReport:
        return StageReport(stage, StageCounts(0, 0, 0, 0), False, 0.0, outputs)

    listing = format_locations("out", [report("crawl"), report("clean"), report("tokenizer"),
                                       report("tokenize", ("out/tokens/v1/a.bin", "out/tokens/v1/index.json"))])
    assert listing.splitlines() == [
        "outputs under out:",
        "  crawl/warc/  crawl/fetch_log/  crawl/frontier/   (WARC, fetch log, next frontier)",
        "  manifests/crawl.json",
        "  docs/clean/  rejected/clean/  failed/clean/",
        "  manifests/clean.json",
        "  tokenizer/tokenizer.model",
        "  manifests/tokenizer.json",
        "  tokens/v1/index.json  (shards beside it)  rejected/tokenize/",  # relative to the output, as the rest
        "  manifests/tokenize.json",
    ]


# --------------------------------------------------------------- a new stage: one entry


class PassThrough(beam.PTransform):
    """The new stage's transform: keeps every document, counting it in and kept."""

    def __init__(self, stage: str) -> None:
        super().__init__()
        self._stage = stage

    def expand(self, docs: beam.PCollection) -> StageOutputs:
        kept = (docs | "CountIn" >> beam.ParDo(CountFn(self._stage, "in"))
                | "CountKept" >> beam.ParDo(CountFn(self._stage, "kept")))
        return StageOutputs(kept=kept, rejected=docs.pipeline | "NoRejected" >> beam.Create([]),
                            failed=docs.pipeline | "NoFailed" >> beam.Create([]))


def plan_passthrough(config: JobConfig, upstream: str) -> StagePlan:
    files, fingerprint = upstream_docs(config, upstream)

    def build(pipeline: beam.Pipeline) -> None:
        (pipeline | "ReadDocs" >> ReadDocs(files) | "Pass" >> PassThrough("passthrough")
         | "WriteOutputs" >> WriteStageOutputs(config.output, "passthrough"))

    return StagePlan(name="passthrough", config_hash=config.section_hash("extract"), inputs=tuple(files),
                     fingerprint=fingerprint, build=build)


@pytest.fixture
def with_passthrough(monkeypatch):
    """The table with a document stage between extract and clean (configured by the
    always-present extract: section, so it runs by default)."""
    spec = StageSpec("passthrough", "extract", EARLIER_DOCS, True, f"{__name__}:plan_passthrough")
    monkeypatch.setattr(stage_specs, "STAGE_SPECS", STAGE_SPECS[:2] + (spec,) + STAGE_SPECS[2:])


def _job(tmp_path: Path, stages: str = "") -> str:
    data = tmp_path / "docs.jsonl"
    if not data.exists():  # rewritten, it would be a new input and rerun every stage
        data.write_text("".join(json.dumps({"id": f"d{i}", "text": f"Document number {i} has some words."}) + "\n"
                                for i in range(12)))
    config = tmp_path / "job.yaml"
    config.write_text(f"""
output: {tmp_path / 'out'}
inputs:
  - {{format: jsonl, path: "{data}"}}
{stages}
beam_args: ["--runner=FnApiRunner"]
""")
    return str(config)


def test_a_new_stage_is_one_entry_in_the_table(tmp_path, with_passthrough):
    config = load_config(_job(tmp_path))
    # the stage list, the document stages and the default stages
    assert known_stages()[:3] == ("crawl", "extract", "passthrough")
    assert doc_stages()[:2] == ("extract", "passthrough")
    assert config.active_stages() == ("extract", "passthrough")
    # validation of stages:
    assert load_config(_job(tmp_path, "stages: [passthrough]")).active_stages() == ("passthrough",)
    with pytest.raises(ConfigError, match=r"unknown stages \['reshuffle'\]; known: \['crawl', 'extract', "
                                          r"'passthrough', 'clean'"):
        load_config(_job(tmp_path, "stages: [reshuffle]"))
    # planning (it reads extract's documents) and running: counts, listing, report
    out = io.StringIO()
    assert main(["--config", _job(tmp_path), "--log-level", "ERROR", "--no-progress"], out=out) == 0
    printed = out.getvalue()
    row = next(line for line in printed.splitlines() if line.startswith("passthrough"))
    assert row.split()[:6] == ["passthrough", "12", "12", "0", "0", "in=out+r+f"]
    assert "  docs/passthrough/  rejected/passthrough/  failed/passthrough/\n  manifests/passthrough.json" in printed
    report = json.loads((tmp_path / "out" / "report" / "report.json").read_text())
    assert [(s["stage"], s["in"], s["out"]) for s in report["stages"]] == [("extract", 12, 12),
                                                                           ("passthrough", 12, 12)]
    assert plan_stage(config, "passthrough").inputs == tuple(
        json.loads((tmp_path / "out" / "manifests" / "passthrough.json").read_text())["inputs"])
    assert all("/docs/extract/" in path for path in plan_stage(config, "passthrough").inputs)
    # resume: a rerun finds its manifest matching
    out = io.StringIO()
    assert main(["--config", _job(tmp_path), "--log-level", "ERROR", "--no-progress", "--no-report"],
                out=out) == 0
    assert next(line for line in out.getvalue().splitlines()
                if line.startswith("passthrough")).endswith("resumed (manifest matched)")
    # later stages read its documents
    assert docs_before(config, "tokenize") == "passthrough"
    assert upstream_of(config, spec_of("label")) == "passthrough"


def test_every_planner_resolves_and_a_malformed_one_is_refused():
    for spec in STAGE_SPECS:
        assert callable(spec.plan_function()), spec.name
        assert spec.plan_function().__name__ == f"plan_{spec.name}"
    with pytest.raises(ValueError, match="not 'module:function'"):
        StageSpec("x", "extract", EARLIER_DOCS, True, "pipelines.stages.plan_extract")
