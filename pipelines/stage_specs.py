"""The stage table: every stage of a job described once, in pipeline order.

A stage is its transform module, its planner (``pipelines.stages``) and one ``StageSpec``
in ``STAGE_SPECS``. Everything else is derived from the table, read when it is used: the
stage list and its order, the document stages, which stages a config runs by default,
the validation of ``stages:`` and of the sections they need, the document stage each
planner reads, the runner's per-stage choices, the output listing and the order of the
count tables.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from pipelines.config_errors import did_you_mean
from pipelines.manifest import read_manifest

if TYPE_CHECKING:
    from pipelines.config import JobConfig
    from pipelines.stages import StagePlan

__all__ = [
    "DOC_OUTPUTS", "EARLIER_DOCS", "STAGE_SPECS", "StageSpec", "check_stages", "default_stages",
    "doc_stages", "docs_before", "known_stages", "plan_stage", "spec_of", "upstream_of",
]

EARLIER_DOCS = "earlier docs"  # reads: the nearest earlier document stage of the job
SOURCES = ("seeds", "inputs")  # reads: no documents (the crawl seeds, the configured inputs)
DOC_OUTPUTS = "docs/{stage}/  rejected/{stage}/  failed/{stage}/"


def _always(section: Any) -> bool:
    return True


@dataclass(frozen=True)
class StageSpec:
    """One stage. ``planner`` names a function ``"module:function"`` (as an entry point
    does); ``function(config, upstream)`` returns the stage's ``StagePlan``, ``upstream``
    being the document stage it reads ("" for a stage that reads ``SOURCES``). It is
    imported when the stage is planned, so the config's validation, which reads this
    table, imports no stage code (no import cycle through the planners)."""

    name: str
    section: str  # the JobConfig field that configures it: the stage needs it set
    reads: str  # one of SOURCES, an earlier document stage, or EARLIER_DOCS
    makes_docs: bool  # writes docs/<name>/ for later stages; its out count is those rows
    planner: str
    writes: str = DOC_OUTPUTS  # its line of the output listing ({stage}, {index}: the tokens index)
    # Without ``stages:`` it runs when its section is set and this holds for the section.
    by_default: Callable[[Any], bool] = _always
    runs_beam: bool = True  # its work is Beam pipelines: the progress line follows it
    failures_limited: bool = True  # more failures than extract.max_error_ratio fail the job
    owns: tuple[str, ...] = ()  # top-level output folders it rewrites whole (deleted before it runs)
    does: str = ""  # what it does, one line (``python -m pipelines.run --help``, docs/CONFIG.md)

    def __post_init__(self) -> None:
        if not self.name or not self.section:
            raise ValueError("a stage needs a name and a config section")
        if self.reads == self.name:
            raise ValueError(f"stage {self.name!r} cannot read its own documents")
        module, _, function = self.planner.partition(":")
        if not module or not function.isidentifier():
            raise ValueError(f"stage {self.name!r}: planner {self.planner!r} is not 'module:function'")

    def plan_function(self) -> Callable[[JobConfig, str], StagePlan]:
        module, _, function = self.planner.partition(":")
        return getattr(importlib.import_module(module), function)

    def runs_by_default(self, config: JobConfig) -> bool:
        section = getattr(config, self.section)
        return section is not None and self.by_default(section)


STAGE_SPECS: tuple[StageSpec, ...] = (
    StageSpec("crawl", "crawl", "seeds", False, "pipelines.stages:plan_crawl", failures_limited=False, owns=("crawl",),
              writes="crawl/warc/  crawl/fetch_log/  crawl/frontier/   (WARC, fetch log, next frontier)",
              does="fetch the seeds and the links found (politely, per host) into WARC files"),
    StageSpec("extract", "extract", "inputs", True, "pipelines.stages:plan_extract",
              does="read the inputs (and the crawl's WARC files); HTML to text; one document each"),
    StageSpec("clean", "clean", "extract", True, "pipelines.stages:plan_clean",
              does="PII redaction, language ID, quality rules, anomaly detector, quality classifier"),
    StageSpec("dedup_exact", "dedup", EARLIER_DOCS, True, "pipelines.stages:plan_dedup_exact",
              does="drop documents whose normalised text or URL another document has"),
    StageSpec("dedup_minhash", "dedup", "dedup_exact", True, "pipelines.stages:plan_dedup_minhash",
              does="near-duplicate clusters (MinHash-LSH, connected components): keep one each"),
    StageSpec("label", "label", EARLIER_DOCS, True, "pipelines.stages:plan_label",
              does="model labels per label set; uncertain documents to the review queue (review/)"),
    StageSpec("augment", "augment", EARLIER_DOCS, True, "pipelines.stages:plan_augment",
              does="upsampling (repeat counts from scores and labels) and language-model rephrasing"),
    StageSpec("tokenizer", "tokenize", EARLIER_DOCS, False, "pipelines.stages:plan_tokenizer", runs_beam=False,
              writes="tokenizer/tokenizer.model", by_default=lambda tokenize: not tokenize.model,
              does="train a sentencepiece tokenizer on a sample (when tokenize.model is not given)"),
    StageSpec("tokenize", "tokenize", EARLIER_DOCS, False, "pipelines.stages:plan_tokenize",
              writes="{index}  (shards beside it)  rejected/{stage}/",
              does="tokenize, shuffle and write token shards and their index.json"),
)


def known_stages() -> tuple[str, ...]:
    """Every stage, in pipeline order."""
    return tuple(spec.name for spec in STAGE_SPECS)


def doc_stages() -> tuple[str, ...]:
    """The stages that write documents, in pipeline order."""
    return tuple(spec.name for spec in STAGE_SPECS if spec.makes_docs)


def spec_of(name: str) -> StageSpec:
    for spec in STAGE_SPECS:
        if spec.name == name:
            return spec
    raise KeyError(f"unknown stage {name!r}{did_you_mean(name, known_stages())}; known: {list(known_stages())}")


def default_stages(config: JobConfig) -> tuple[str, ...]:
    """The stages a config without ``stages:`` runs: those whose section it sets."""
    return tuple(spec.name for spec in STAGE_SPECS if spec.runs_by_default(config))


def check_stages(config: JobConfig) -> None:
    """``ValueError`` for an unknown stage in ``stages:`` or one whose section is unset."""
    known = known_stages()
    unknown = [s for s in config.stages if s not in known]
    if unknown:
        hints = "".join(did_you_mean(s, known) for s in unknown[:1])
        raise ValueError(f"unknown stages {unknown}{hints}; known: {list(known)}")
    by_section: dict[str, list[str]] = {}
    for spec in STAGE_SPECS:
        by_section.setdefault(spec.section, []).append(spec.name)
    for section, names in by_section.items():
        if set(names) & set(config.stages) and getattr(config, section) is None:
            if len(names) == 1:
                raise ValueError(f"stage {names[0]!r} needs {'an' if section[0] in 'aeiou' else 'a'} {section}: section")
            raise ValueError(f"the {section} stages need a {section}: section")


def docs_before(config: JobConfig, stage: str) -> str:
    """The nearest earlier document stage of this job: configured, and either part of
    this run or finished before (its manifest exists); extract when there is none."""
    names = known_stages()
    earlier = [spec.name for spec in STAGE_SPECS[:names.index(stage)]
               if spec.makes_docs and getattr(config, spec.section) is not None]
    stages = config.active_stages()
    present = [s for s in earlier if s in stages or read_manifest(config.output, s) is not None]
    return present[-1] if present else "extract"


def upstream_of(config: JobConfig, spec: StageSpec) -> str:
    """The document stage ``spec`` reads in this job ("" when it reads none)."""
    if spec.reads in SOURCES:
        return ""
    return docs_before(config, spec.name) if spec.reads == EARLIER_DOCS else spec.reads


def plan_stage(config: JobConfig, name: str) -> StagePlan:
    """The stage's plan, given the document stage it reads in this job."""
    spec = spec_of(name)
    return spec.plan_function()(config, upstream_of(config, spec))
