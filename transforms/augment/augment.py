"""The augment stage: upsampling annotations and language-model rephrasing.

Annotate, then select: every document of the upstream stage leaves this stage, with
``repeats`` and ``repeat_rules`` set by the upsampling rules (tokenize writes the
repeats). Documents the rephrase selection picks are split into chunks, sent to the
backend once per template, the outputs checked and rejoined into a new document
(``source: synthetic``, ``provenance``: parent, template, model, parameters), which then
passes the clean stage's checks (language ID, signals and rules, anomaly score, quality
model) and a near-duplicate check against every original before it is kept.

What the stage counts: records in = the upstream documents + one generation per
(selected document, template); out = the documents written (originals + kept
generations); every other generation is in ``rejected/augment/`` (a reason per check)
or ``failed/augment/`` (the backend's error after its retries, with the requests).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Iterator, Optional, Sequence

import apache_beam as beam

from transforms.augment.chunks import join_chunks, split_chunks
from transforms.augment.config import AugmentConfig, RephraseConfig, Selection
from transforms.augment.select import matches, quality_cut, repeats_for
from transforms.doc import SYNTHETIC_SOURCE, Doc, Failure, Provenance, Rejected, stable_id
from transforms.routing import FAILED, REJECTED, CountFn, StageOutputs

__all__ = ["Augment", "AugmentReason", "annotate_repeats", "assemble_generation", "synthetic_id"]


class AugmentReason:
    """Reason codes of ``rejected/augment/`` besides the clean checks' own."""

    LENGTH_RATIO = "length_ratio"  # the rejoined generation is too short or too long for its parent
    NEAR_DUPLICATE = "near_duplicate"  # it shares a MinHash band with an original document


def _cuts(selections: Sequence[Selection], quantiles: Sequence[float]) -> list[Optional[float]]:
    return [quality_cut(quantiles, s.top_quality_fraction) if s.needs_quantile and s.top_quality_fraction
            else None for s in selections]


def annotate_repeats(doc: Doc, config: AugmentConfig, quantiles: Sequence[float]) -> Doc:
    """``doc`` with its repeat count and the rules that set it (1 and () when the
    section's ``select`` leaves it out or no rule matches)."""
    select_cut, *rule_cuts = _cuts([config.select] + [r.when for r in config.upsample], quantiles)
    if not config.upsample or not matches(doc, config.select, select_cut):
        return doc
    repeats, names = repeats_for(doc, config.upsample, config.max_repeats, rule_cuts)
    if repeats == doc.repeats and names == tuple(doc.repeat_rules):
        return doc
    return dataclasses.replace(doc, repeats=repeats, repeat_rules=names)


def rephrase_selected(doc: Doc, config: AugmentConfig, quantiles: Sequence[float]) -> bool:
    """Whether the rephrasing applies to ``doc`` (the section's and rephrase's selections).
    Synthetic documents of an earlier run are never rephrased again."""
    rephrase = config.rephrase
    if rephrase is None or doc.source == SYNTHETIC_SOURCE:
        return False
    select_cut, rephrase_cut = _cuts([config.select, rephrase.select], quantiles)
    return matches(doc, config.select, select_cut) and matches(doc, rephrase.select, rephrase_cut)


def synthetic_id(parent_id: str, template: str, parameters: str) -> str:
    """The id of a generation: the same parent, template and parameters, the same id."""
    return stable_id(SYNTHETIC_SOURCE, parent_id, template, parameters)


@dataclasses.dataclass(frozen=True)
class _Parent:
    """What a generation keeps of its parent (not its text: only its length)."""

    id: str
    source: str
    url: str
    title: str
    lang: str
    chars: int


def assemble_generation(parent: _Parent, template: str, model: str, parameters: str,
                        results: Sequence[Any], rephrase: RephraseConfig, stage: str) -> Any:
    """One generation from its chunks' results (``RephraseResult``, any order): a
    synthetic ``Doc``; a ``Rejected`` (a chunk's output failed ``check_generation``, or
    the rejoined text's length ratio to the parent is out of range); or a ``Failure``
    (a chunk's request failed after its retries: the requests are the raw input)."""
    from transforms.augment.rephrase import check_generation

    ordered = sorted(results, key=lambda r: r.request.chunk)
    provenance = Provenance(parent_id=parent.id, parent_source=parent.source, template=template,
                            model=model, parameters=parameters, chunks=len(ordered))
    doc = Doc(id=synthetic_id(parent.id, template, parameters), url=parent.url, text="",
              source=SYNTHETIC_SOURCE, fetched_at="", title=parent.title, lang_hint=parent.lang,
              provenance=provenance)
    failed = [r for r in ordered if r.error]
    if failed:
        first = failed[0]
        raw = json.dumps([{"key": r.request.key, "chunk": r.request.chunk, "template": template,
                           "prompt": r.request.prompt, "parameters": json.loads(parameters)}
                          for r in ordered], ensure_ascii=False).encode("utf-8")
        return Failure(stage=stage, error_type=first.error_type or "generation_failed",
                       error=f"generation {doc.id} of {parent.id} ({template}), chunk {first.request.chunk} "
                             f"of {len(ordered)}: {first.error} after {first.attempts} attempts",
                       source=parent.source, offset=0, raw=raw)
    texts = []
    for result in ordered:
        text, reason = check_generation(result.request, result.text, rephrase.max_output_ratio)
        if reason:
            shown = text if isinstance(text, str) else ""
            return Rejected(dataclasses.replace(doc, text=shown), reason,
                            f"chunk {result.request.chunk} of {len(ordered)} ({template})")
        texts.append(text)
    joined = join_chunks(texts)
    done = dataclasses.replace(doc, text=joined)
    ratio = len(joined) / max(1, parent.chars)
    if not rephrase.min_length_ratio <= ratio <= rephrase.max_length_ratio:
        return Rejected(done, AugmentReason.LENGTH_RATIO,
                        f"{len(joined)} chars for a parent of {parent.chars}: ratio {ratio:.3f} outside "
                        f"[{rephrase.min_length_ratio}, {rephrase.max_length_ratio}]")
    return done


class _AssembleFn(beam.DoFn):
    def __init__(self, rephrase: RephraseConfig, model: str, parameters: str, stage: str) -> None:
        self._rephrase, self._model, self._parameters, self._stage = rephrase, model, parameters, stage

    def process(self, element: tuple[tuple[str, str], dict[str, list[Any]]]) -> Iterator[Any]:
        (_, template), joined = element
        parents, results = joined["parent"], joined["results"]
        if not parents:  # results without a parent cannot happen: a parent makes the requests
            return
        out = assemble_generation(parents[0], template, self._model, self._parameters, list(results),
                                  self._rephrase, self._stage)
        if isinstance(out, Rejected):
            yield beam.pvalue.TaggedOutput(REJECTED, out)
        elif isinstance(out, Failure):
            yield beam.pvalue.TaggedOutput(FAILED, out)
        else:
            yield out


def _near_duplicate_route(element: tuple[str, dict[str, list[Any]]]) -> Iterator[Any]:
    """Join of synthetic id → (its doc, the originals sharing a band with it)."""
    _, joined = element
    originals = sorted(joined["originals"])
    for doc in joined["docs"]:
        if originals:
            yield beam.pvalue.TaggedOutput(REJECTED, Rejected(
                doc, AugmentReason.NEAR_DUPLICATE, f"shares a MinHash band with original {originals[0]}"))
        else:
            yield doc


def _pairs(element: tuple[bytes, dict[str, list[str]]]) -> Iterator[tuple[str, str]]:
    _, joined = element
    if joined["original"]:
        smallest = min(joined["original"])
        for node in set(joined["synthetic"]):
            yield node, smallest


class Augment(beam.PTransform):
    """``Doc`` → ``StageOutputs``: originals annotated with repeats, plus the kept
    generations; rejected and failed generations."""

    def __init__(self, config: AugmentConfig, stage: str = "augment", clean: Any = None,
                 minhash: Any = None, cache_dir: str = "") -> None:
        super().__init__()
        self._config = config
        self._stage = stage
        self._clean = clean  # CleanConfig: the checks a generation passes (None: no clean checks)
        self._minhash = minhash  # MinHashConfig of the near-duplicate check
        self._cache_dir = cache_dir

    def expand(self, docs: beam.PCollection[Doc]) -> StageOutputs:
        config, stage = self._config, self._stage
        docs = docs | "CountIn" >> beam.ParDo(CountFn(stage, "in"))
        selections = [config.select] + [r.when for r in config.upsample]
        if config.rephrase is not None:
            selections.append(config.rephrase.select)
        if any(s.needs_quantile for s in selections):
            quantiles = beam.pvalue.AsSingleton(
                docs
                | "QualityScores" >> beam.FlatMap(lambda d: [d.quality_score] if d.quality_score is not None else [])
                | "Quantiles" >> beam.ApproximateQuantiles.Globally(1001), default_value=[])
        else:
            quantiles = beam.pvalue.AsSingleton(docs.pipeline | "NoQuantiles" >> beam.Create([[]]))
        originals = docs | "Upsample" >> beam.Map(annotate_repeats, config, quantiles=quantiles)
        kept = [originals | "CountKeptOriginals" >> beam.ParDo(CountFn(stage, "kept"))]
        rejected: list[beam.PCollection] = []
        failed: list[beam.PCollection] = []
        if config.rephrase is not None:
            self._rephrase(originals, quantiles, kept, rejected, failed)
        if not rejected:
            rejected.append(docs.pipeline | "NoRejected" >> beam.Create([]))
        if not failed:
            failed.append(docs.pipeline | "NoFailures" >> beam.Create([]))
        return StageOutputs(
            kept=tuple(kept) | "AllKept" >> beam.Flatten(),
            rejected=tuple(rejected) | "AllRejected" >> beam.Flatten(),
            failed=tuple(failed) | "AllFailed" >> beam.Flatten(),
        )

    def _rephrase(self, originals: beam.PCollection[Doc], quantiles: Any, kept: list, rejected: list,
                  failed: list) -> None:
        from transforms.augment.generate import Generate
        from transforms.augment.rephrase import make_request
        from transforms.dedup.dedup import BandKeys, MinHashConfig

        config, stage = self._config, self._stage
        rephrase = config.rephrase
        assert rephrase is not None
        templates = resolve_templates(rephrase)
        params = generation_params(rephrase)
        parameters = params.as_json()

        def requests(doc: Doc) -> Iterator[Any]:
            chunks = split_chunks(doc.text, rephrase.chunk_chars)
            for template in templates:
                for i, chunk in enumerate(chunks):
                    yield make_request(doc.id, i, chunk, template, params, lang=doc.lang, title=doc.title)

        def parents(doc: Doc) -> Iterator[tuple[tuple[str, str], _Parent]]:
            parent = _Parent(doc.id, doc.source, doc.url, doc.title, doc.lang, len(doc.text))
            for template in templates:
                yield (doc.id, template.name), parent

        selected = originals | "SelectRephrase" >> beam.Filter(rephrase_selected, config, quantiles=quantiles)
        parent_keys = (selected | "Parents" >> beam.FlatMap(parents)
                       | "CountGenerations" >> beam.ParDo(CountFn(stage, "in")))
        results = (
            selected
            | "Requests" >> beam.FlatMap(requests)
            | "Generate" >> Generate(backend_spec(rephrase, self._cache_dir))
            | "KeyResults" >> beam.Map(lambda r: ((r.request.doc_id, r.request.template), r))
        )
        assembled = (
            {"parent": parent_keys, "results": results}
            | "JoinChunks" >> beam.CoGroupByKey()
            | "Assemble" >> beam.ParDo(_AssembleFn(rephrase, rephrase.model, parameters, stage)).with_outputs(
                REJECTED, FAILED, main="docs")
        )
        rejected.append(assembled[REJECTED] | "CountRejectedOutputs" >> beam.ParDo(CountFn(stage, "rejected")))
        failed.append(assembled[FAILED] | "CountFailedCalls" >> beam.ParDo(CountFn(stage, "failed")))
        generated = assembled["docs"]
        if self._clean is not None:
            from transforms.clean.clean import Clean

            clean = self._clean
            if clean.quality.top_fraction is not None:  # a cut of this run's originals, not of the generations
                clean = dataclasses.replace(clean, quality=dataclasses.replace(clean.quality, top_fraction=None))
            checked = generated | "Checks" >> Clean(clean, f"{stage}_checks")
            rejected.append(checked.rejected | "CountRejectedChecks" >> beam.ParDo(CountFn(stage, "rejected")))
            failed.append(checked.failed | "CountFailedChecks" >> beam.ParDo(CountFn(stage, "failed")))
            generated = checked.kept
        minhash = self._minhash or MinHashConfig()
        original_bands = (originals | "OriginalNodes" >> beam.Map(lambda d: (d.id, d.text))
                          | "OriginalBands" >> BandKeys(minhash)
                          | "SmallestPerBand" >> beam.CombinePerKey(min))
        synthetic_bands = (generated | "SyntheticNodes" >> beam.Map(lambda d: (d.id, d.text))
                           | "SyntheticBands" >> BandKeys(minhash))
        pairs = ({"original": original_bands, "synthetic": synthetic_bands}
                 | "JoinBands" >> beam.CoGroupByKey() | "Pairs" >> beam.FlatMap(_pairs))
        routed = (
            {"docs": generated | "KeyGenerated" >> beam.Map(lambda d: (d.id, d)), "originals": pairs}
            | "JoinDuplicates" >> beam.CoGroupByKey()
            | "Route" >> beam.FlatMap(_near_duplicate_route).with_outputs(REJECTED, main="kept")
        )
        rejected.append(routed[REJECTED] | "CountRejectedDuplicates" >> beam.ParDo(CountFn(stage, "rejected")))
        kept.append(routed["kept"] | "CountKeptGenerations" >> beam.ParDo(CountFn(stage, "kept")))


def resolve_templates(rephrase: RephraseConfig) -> list[Any]:
    """The ``Template`` of every configured template (built-ins by name)."""
    return [spec.template() for spec in rephrase.templates]


def generation_params(rephrase: RephraseConfig) -> Any:
    from transforms.augment.rephrase import GenerationParams

    return GenerationParams(model=rephrase.model, max_tokens=rephrase.max_tokens, temperature=rephrase.temperature,
                            top_p=rephrase.top_p, seed=rephrase.seed)


def backend_spec(rephrase: RephraseConfig, cache_dir: str) -> Any:
    from transforms.augment.generate import BackendSpec

    return BackendSpec(kind=rephrase.backend, endpoint=rephrase.endpoint, api_key_env=rephrase.api_key_env,
                       model=rephrase.model, concurrency=rephrase.concurrency, timeout_s=rephrase.timeout_s,
                       retries=rephrase.retries, backoff_s=rephrase.backoff_s, max_backoff_s=rephrase.max_backoff_s,
                       cache_dir=cache_dir, api=rephrase.api, batch_size=rephrase.batch_size)
