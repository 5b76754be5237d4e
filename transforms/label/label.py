"""The label stage: model labels on every document, human labels over them, and the
review queue of the documents the model is unsure about.

Annotate, then select: every document leaves this stage (labels are annotations, not a
filter); a document whose labelling raises goes to ``failed/label/``. For each label set
the calibrated labeller adds ``Label(name, value, score=confidence, origin="model",
version)``; an accepted human review of that document and set replaces it with
``origin="human"`` (score 1.0, the reviewer, the time, and the model version that was
reviewed). A model label below the set's ``accept_threshold`` makes the document
*uncertain*; ``review_budget`` of the uncertain documents per run go to the review queue
chosen by ``sampling``:

* ``uncertainty``: the least confident first (classic least-confidence sampling);
* ``balanced``: the least confident of each predicted value in turn (round robin), so one
  hard class cannot take the whole budget;
* ``random``: a seeded random sample of the uncertain documents;
* ``hybrid`` (default): half ``balanced``, half ``random``.

``docs/BENCHMARKS.md`` has the measurement behind the default: on a 20-language set,
plain least-confidence picks from a weak seed model are outliers of a few classes and
the retrained model got *worse*; balanced and hybrid picks do not have that failure, and
hybrid matched random sampling's model gain while sending half the reviews to the
documents the model is most likely to have wrong.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Optional, Sequence

import apache_beam as beam
from apache_beam.utils import shared

from transforms.doc import ID_SCHEME, Doc, Label
from transforms.routing import FAILED, CountFn, StageCounters, StageOutputs, make_failure

SAMPLING = ("uncertainty", "balanced", "hybrid", "random")


@dataclass(frozen=True)
class LabelSetConfig:
    """One label set: its taxonomy and its model (a directory of versions, see
    ``models/labeller.py``; ``version`` pins one, default the directory's ``CURRENT``)."""

    name: str  # the label's name on every document
    values: tuple[str, ...]  # the taxonomy: every value the model and reviewers may give
    model: str  # directory of labeller versions (``python -m pipelines.labeller train``)
    version: str = ""  # a version of ``model``; "" = the one CURRENT names
    accept_threshold: float = 0.9  # a model label less confident than this makes the document uncertain

    def __post_init__(self) -> None:
        if not self.name.strip() or not self.name.replace("_", "").isalnum():
            raise ValueError(f"label set name must be letters, digits and _, got {self.name!r}")
        if len(self.values) < 2:
            raise ValueError(f"label set {self.name!r} needs at least two values")
        if len(set(self.values)) != len(self.values) or any(not v.strip() or " " in v for v in self.values):
            raise ValueError(f"label set {self.name!r}: values must be unique, non-empty, without spaces")
        if not self.model.strip():
            raise ValueError(f"label set {self.name!r}: model must be set")
        if not 0.0 <= self.accept_threshold <= 1.0:
            raise ValueError(f"label set {self.name!r}: accept_threshold must be in [0, 1]")


@dataclass(frozen=True)
class LabelConfig:
    """The ``label:`` section. ``review_budget`` 0 queues every uncertain document."""

    sets: tuple[LabelSetConfig, ...]  # label sets, each with its own model
    review_budget: int = 100  # uncertain documents queued for review per run; 0: all of them
    sampling: str = "hybrid"  # which uncertain documents are queued: uncertainty | balanced | hybrid | random
    seed: int = 0  # of the random part of sampling
    batch_size: int = 256  # documents per model batch

    def __post_init__(self) -> None:
        if not self.sets:
            raise ValueError("label.sets must name at least one label set")
        names = [s.name for s in self.sets]
        if len(set(names)) != len(names):
            raise ValueError(f"label set names must be unique, got {names}")
        if self.review_budget < 0:
            raise ValueError("review_budget must be >= 0")
        if self.sampling not in SAMPLING:
            raise ValueError(f"sampling must be one of {list(SAMPLING)}, got {self.sampling!r}")
        if self.batch_size <= 0:
            raise ValueError("batch_size must be > 0")


@dataclass(frozen=True)
class Review:
    """An accepted human label (one document, one label set), as stored under
    ``review/reviews/``."""

    task_id: str
    doc_id: str
    set: str
    value: str
    reviewer: str
    reviewed_at: str
    model_version: str = ""
    model_value: str = ""
    # how ``doc_id`` identifies the document (``transforms.doc.ID_SCHEME``); reviews
    # stored before the field existed are 1: their ``doc_id`` is the input's own id
    id_scheme: int = 1


LEGACY_REVIEW_KEY = "\x00legacy:"


def review_key(review: Review) -> str:
    """The key a review is looked up by: the document id, or for a review of the old
    id scheme the input's own id behind ``LEGACY_REVIEW_KEY`` (``doc_review_keys``)."""
    return review.doc_id if review.id_scheme >= ID_SCHEME else LEGACY_REVIEW_KEY + review.doc_id


def doc_review_keys(doc: Doc) -> tuple[str, str]:
    """(old-scheme key, key) of the reviews of ``doc``. Under the old scheme a document
    with an id of its own had that id (now ``source_id``), one without had the id it has
    now. An old review of an id that two inputs shared applies to both documents (the
    old id could not tell them apart): ``review_legacy_matched`` counts its matches."""
    return LEGACY_REVIEW_KEY + (doc.source_id or doc.id), doc.id


def reviews_of(doc: Doc, reviews: Mapping[str, Sequence[Review]]) -> tuple[Review, ...]:
    """The reviews of ``doc``, old-scheme ones first (a newer review of a set wins)."""
    legacy, key = doc_review_keys(doc)
    return tuple(reviews.get(legacy, ())) + tuple(reviews.get(key, ()))


# ---------------------------------------------------------------- pure functions

def model_labels(config: LabelConfig, probas: Mapping[str, Any], versions: Mapping[str, str],
                 values: Mapping[str, Sequence[str]], row: int) -> list[Label]:
    """The model's label per set for row ``row`` of each set's probability matrix."""
    labels = []
    for spec in config.sets:
        p = probas[spec.name][row]
        best = int(p.argmax())
        labels.append(Label(name=spec.name, value=values[spec.name][best], score=round(float(p[best]), 6),
                            origin="model", version=versions[spec.name]))
    return labels


def apply_reviews(labels: Sequence[Label], reviews: Sequence[Review]) -> list[Label]:
    """Human labels override the model's label of the same set (provenance kept)."""
    by_set = {r.set: r for r in reviews}
    out = []
    for label in labels:
        review = by_set.pop(label.name, None)
        if review is None:
            out.append(label)
        else:
            out.append(Label(name=label.name, value=review.value, score=1.0, origin="human",
                             version=review.model_version or label.version,
                             reviewer=review.reviewer, reviewed_at=review.reviewed_at))
    return out


def uncertainty(doc: Doc, config: LabelConfig) -> Optional[float]:
    """1 - the lowest confidence among the model labels below their set's threshold;
    None when the document is certain (every model label accepted, or human-labelled)."""
    thresholds = {s.name: s.accept_threshold for s in config.sets}
    low = [lab.score for lab in doc.labels
           if lab.origin == "model" and lab.score < thresholds.get(lab.name, 0.0)]
    return 1.0 - min(low) if low else None


def review_priority(doc: Doc, config: LabelConfig) -> float:
    """Higher is reviewed first: the uncertainty, or a seeded hash for random sampling."""
    if config.sampling == "random":
        return _random_priority(doc, config.seed)
    return uncertainty(doc, config) or 0.0


def _random_priority(doc: Doc, seed: int) -> float:
    key = hashlib.sha1(f"{seed}:{doc.id}".encode()).digest()
    return int.from_bytes(key[:8], "big") / 2.0**64


def predicted_class(doc: Doc, config: LabelConfig) -> str:
    """``set=value`` of the least confident uncertain model label (the balancing key)."""
    thresholds = {s.name: s.accept_threshold for s in config.sets}
    low = [lab for lab in doc.labels if lab.origin == "model" and lab.score < thresholds.get(lab.name, 0.0)]
    lab = min(low, key=lambda x: x.score) if low else None
    return f"{lab.name}={lab.value}" if lab else ""


def pick_for_review(docs: Sequence[Doc], config: LabelConfig) -> list[Doc]:
    """The documents to review this run, most important first (see ``sampling``). A
    pure function of the uncertain documents: the Beam graph pre-reduces to the few
    candidates each strategy can pick, then calls this."""
    unique = {d.id: d for d in docs if uncertainty(d, config) is not None}
    by_uncertainty = sorted(unique.values(), key=lambda d: (uncertainty(d, config) or 0.0, d.id), reverse=True)
    budget = config.review_budget or len(by_uncertainty)
    if not config.review_budget or config.sampling == "uncertainty":
        return by_uncertainty[:budget]
    by_random = sorted(unique.values(), key=lambda d: (_random_priority(d, config.seed), d.id), reverse=True)
    if config.sampling == "random":
        return by_random[:budget]
    groups: dict[str, list[Doc]] = {}
    for doc in by_uncertainty:
        groups.setdefault(predicted_class(doc, config), []).append(doc)
    balanced: list[Doc] = []
    queues = [groups[k] for k in sorted(groups)]
    depth = 0
    while len(balanced) < budget and any(depth < len(q) for q in queues):
        balanced.extend(q[depth] for q in queues if depth < len(q))
        depth += 1
    balanced = balanced[:budget]
    if config.sampling == "balanced":
        return balanced
    picked = balanced[:(budget + 1) // 2]
    chosen = {d.id for d in picked}
    picked += [d for d in by_random if d.id not in chosen][:budget - len(picked)]
    return picked


QUEUE_TEXT_LIMIT = 20_001  # characters kept for the review queue (the task shows 20,000)


def light_copy(doc: Doc) -> Doc:
    """The document as a review task needs it: text cut to ``QUEUE_TEXT_LIMIT`` (one more
    than a task shows, so the task can say it was cut), no signals."""
    return dataclasses.replace(doc, text=doc.text[:QUEUE_TEXT_LIMIT], signals=None)


def round_robin_depth(sizes: Sequence[int], budget: int) -> int:
    """The depth a round robin over groups of these sizes reaches to pick ``budget``:
    no group needs more of its documents than that."""
    depth, taken = 0, 0
    while taken < budget and any(size > depth for size in sizes):
        taken += sum(1 for size in sizes if size > depth)
        depth += 1
    return depth


def label_batch(docs: Sequence[Doc], config: LabelConfig, labellers: Mapping[str, Any],
                reviews: Mapping[str, Sequence[Review]]) -> list[Doc]:
    """``docs`` with model labels (one batched prediction per set) and human overrides.
    Labels of other sets already on a document are kept."""
    texts = [d.text for d in docs]
    probas = {name: lab.predict_proba(texts) for name, lab in labellers.items()}
    versions = {name: lab.version for name, lab in labellers.items()}
    values = {name: lab.values for name, lab in labellers.items()}
    names = {s.name for s in config.sets}
    out = []
    for row, doc in enumerate(docs):
        labels = apply_reviews(model_labels(config, probas, versions, values, row), reviews_of(doc, reviews))
        kept = tuple(lab for lab in doc.labels if lab.name not in names)
        out.append(dataclasses.replace(doc, labels=kept + tuple(labels)))
    return out


# ---------------------------------------------------------------- Beam

class _Labellers:
    """The loaded models of a config, shared by the threads of a worker."""

    def __init__(self, config: LabelConfig) -> None:
        from models.labeller import Labeller

        self.models = {s.name: Labeller.load(s.model, s.version, s.name, s.values) for s in config.sets}


class _LabelBatchFn(beam.DoFn):
    def __init__(self, config: LabelConfig, stage: str) -> None:
        self._config = config
        self._stage = stage
        self._shared = shared.Shared()

    def setup(self) -> None:
        key = "labellers:" + "|".join(f"{s.model}@{s.version}" for s in self._config.sets)
        self._labellers = self._shared.acquire(lambda: _Labellers(self._config), tag=key).models
        self._counters = StageCounters(self._stage)

    def _count(self, doc: Doc, reviews: Mapping[str, Sequence[Review]]) -> None:
        if doc_review_keys(doc)[0] in reviews:
            self._counters.inc("review_legacy_matched")
        for lab in doc.labels:
            self._counters.inc(f"label_{lab.origin}")
        if uncertainty(doc, self._config) is not None:
            self._counters.inc("label_uncertain")

    def process(self, batch: list[Doc], reviews: Mapping[str, Sequence[Review]]) -> Iterator[Any]:
        try:
            labelled = label_batch(batch, self._config, self._labellers, reviews)
        except Exception:  # isolate the document that breaks the batch
            labelled = []
            for doc in batch:
                try:
                    labelled.extend(label_batch([doc], self._config, self._labellers, reviews))
                except Exception as exc:
                    yield beam.pvalue.TaggedOutput(FAILED, make_failure(
                        self._stage, exc, doc.source, -1, doc.text.encode("utf-8", "replace")))
        for doc in labelled:
            self._count(doc, reviews)
            yield doc


def review_from_json(line: str) -> Review:
    return Review(**json.loads(line))


class LabelDocs(beam.PTransform):
    """``Doc`` → ``StageOutputs`` (nothing rejected) plus ``queue``: the documents picked
    for review this run (a PCollection of one list, most important first).

    Accepted reviews come as ``reviews`` (in memory, for tests and small sets) and/or as
    ``review_files`` (JSONL of ``Review``, read inside the pipeline: a large review set
    never goes into the pipeline graph)."""

    def __init__(self, config: LabelConfig, reviews: Sequence[Review] = (), stage: str = "label",
                 review_files: Sequence[str] = ()) -> None:
        super().__init__()
        self._config = config
        self._reviews = tuple(reviews)
        self._review_files = list(review_files)
        self._stage = stage

    def _review_map(self, pipeline: beam.Pipeline) -> Any:
        parts = [pipeline | "Reviews" >> beam.Create(list(self._reviews))]
        if self._review_files:
            parts.append(pipeline | "ReviewFiles" >> beam.Create(self._review_files)
                         | "ReadReviews" >> beam.io.ReadAllFromText()
                         | "ParseReviews" >> beam.Map(review_from_json))
        return beam.pvalue.AsDict(
            tuple(parts) | "AllReviews" >> beam.Flatten()
            | "ByDoc" >> beam.Map(lambda r: (review_key(r), r)) | "GroupReviews" >> beam.GroupByKey()
            | "AsTuples" >> beam.MapTuple(lambda doc_id, rs: (doc_id, tuple(rs))))

    def expand(self, docs: beam.PCollection[Doc]) -> tuple[StageOutputs, beam.PCollection[list[Doc]]]:
        stage, config = self._stage, self._config
        reviews = self._review_map(docs.pipeline)
        results = (
            docs
            | "CountIn" >> beam.ParDo(CountFn(stage, "in"))
            | "Batch" >> beam.BatchElements(min_batch_size=min(16, config.batch_size),
                                            max_batch_size=config.batch_size)
            | "Label" >> beam.ParDo(_LabelBatchFn(config, stage), reviews=reviews).with_outputs(
                FAILED, main="kept")
        )
        kept = results["kept"]
        # only what a review task shows travels to the queue: text cut, no signals
        uncertain = (kept | "Uncertain" >> beam.Filter(lambda d: uncertainty(d, config) is not None)
                     | "Light" >> beam.Map(light_copy))
        if config.review_budget:
            # each strategy picks among these few candidates: the `budget` least confident
            # overall, the least confident per predicted value down to the round-robin
            # depth that fills the budget, and the `budget` first in random order
            n = config.review_budget
            least = uncertain | "LeastConfident" >> beam.combiners.Top.Of(
                n, key=lambda d: (uncertainty(d, config) or 0.0, d.id))
            per_class = (uncertain | "ByClass" >> beam.Map(lambda d: (predicted_class(d, config), d))
                         | "LeastPerClass" >> beam.combiners.Top.PerKey(
                             n, key=lambda d: (uncertainty(d, config) or 0.0, d.id))
                         | "Lists" >> beam.Values())
            sizes = per_class | "Sizes" >> beam.Map(len)
            per_class = per_class | "ToDepth" >> beam.Map(
                lambda docs, all_sizes: docs[:round_robin_depth(all_sizes, n)],
                all_sizes=beam.pvalue.AsList(sizes))
            rand = uncertain | "RandomOrder" >> beam.combiners.Top.Of(
                n, key=lambda d: (_random_priority(d, config.seed), d.id))
            candidates = ((least, per_class, rand) | "Candidates" >> beam.Flatten()
                          | "Each" >> beam.FlatMap(lambda ds: ds))
        else:
            candidates = uncertain
        queue = (candidates | "AllCandidates" >> beam.combiners.ToList()
                 | "Pick" >> beam.Map(lambda ds: pick_for_review(ds, config)))
        outputs = StageOutputs(
            kept=kept | "CountKept" >> beam.ParDo(CountFn(stage, "kept")),
            rejected=docs.pipeline | "NoRejects" >> beam.Create([]),
            failed=results[FAILED] | "CountFailed" >> beam.ParDo(CountFn(stage, "failed")),
        )
        return outputs, queue
