"""The clean stage: annotate every document, then select by the configured thresholds.

Per batch of documents (``BatchElements``; models loaded once per worker through
``apache_beam.utils.shared``):

1. PII redaction (e-mail, phone, IP; counted per type) so no output carries them;
2. language ID (fastText, over up to ``langid.max_windows`` windows of the text) → ``lang``,
   ``lang_score``, ``lang2``, ``lang2_share``;
3. quality signals (Gopher, C4, FineWeb, statistics) → ``signals``, with the document
   language's word segmentation and stop words (``language_rules.py``);
4. the learned anomaly detector (``transforms/clean/detect.py``) → ``anomaly_scores`` (each
   detector) and ``anomaly_score`` (the combined score that decides); with
   ``anomaly.inference: runinference`` its language model runs in a RunInference step
   after this batch DoFn (on the worker's GPU when it has one) and selection follows it;
5. the quality classifier (fastText, DCLM recipe) → ``quality_score``.

A document that language ID drops (``language``, ``lang_score``) is annotated with its
language only: no signals, anomaly or quality scores are computed for it.

Then selection, in this order, each drop with its reason code: ``language``,
``lang_score``, the first broken Gopher/C4/FineWeb rule (at the document language's
thresholds, ``language_rules.py``; for ``rules_languages`` only, default every language),
``anomaly``, ``quality_low``. With ``quality.top_fraction`` the threshold is the
corresponding quantile of the scores of the documents that passed everything else.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from dataclasses import dataclass
from enum import Enum
from typing import Any, Callable, Iterable, Iterator, Optional, Sequence

import apache_beam as beam
import numpy as np
from apache_beam.utils import shared

from models.fasttext_models import canonical_language
from transforms.clean.coherence import other_language_share, sentence_gap, split_sentences
from transforms.clean.detect import AnomalyConfig, ScoreWithRunInference, load_detector, score_docs
from transforms.clean.pii import redact
from transforms.clean.language_rules import LanguageProfile, document_rules, profile
from transforms.clean.rules import QualityRules, first_failure
from transforms.clean.signals import compute_signals
from transforms.doc import Doc, Rejected, Signals
from transforms.routing import FAILED, REJECTED, CountFn, StageCounters, StageOutputs, make_failure

_LOGGER = logging.getLogger(__name__)


class CleanReason(str, Enum):
    LANGUAGE = "language"  # not one of the allowed languages
    LANG_SCORE = "lang_score"  # language-ID confidence below the threshold
    ANOMALY = "anomaly"  # anomaly score above the detector's threshold
    QUALITY = "quality_low"  # quality classifier score below the threshold / top fraction


_LANGUAGE_REASONS = (CleanReason.LANGUAGE.value, CleanReason.LANG_SCORE.value)


def canonical_languages(codes: Sequence[str]) -> tuple[str, ...]:
    """The codes as the language-ID model labels them (``nb`` is ``no``), each once, in order."""
    return tuple(dict.fromkeys(canonical_language(code) for code in codes))


@dataclass(frozen=True)
class LangIdConfig:
    """fastText language ID. ``languages`` empty: any language is allowed."""

    model: str  # fastText lid.176 (.ftz or .bin), a path or URL
    threshold: float = 0.65  # the least lang_score kept (the main language's share of the windows x its confidence); FineWeb's value
    languages: tuple[str, ...] = ("en",)  # ISO 639-1 codes to keep (``nb`` is read as lid.176's ``no``); []: all
    route_by_language: bool = False  # write ``docs/clean/<lang>/`` per kept language (and ``other/``)
    max_chars: int = 1000  # characters per window (fastText's cost is linear)
    # Windows of max_chars spread over a long text (models.fasttext_models.lid_windows),
    # combined by length; lang2 and lang2_share record the second language. 8 x 1,000
    # found the main and the second language of every document with an English header in
    # benchmarks/bench_langid_mixed; 16 cut the second language's share error on texts
    # over 8,000 characters from 0.058 to 0.015 at 0.75x the speed. 1: the first max_chars.
    max_windows: int = 8

    def __post_init__(self) -> None:
        object.__setattr__(self, "languages", canonical_languages(self.languages))
        if not 0.0 <= self.threshold <= 1.0:
            raise ValueError(f"threshold must be in [0, 1], got {self.threshold}")
        if self.route_by_language and not self.languages:
            raise ValueError("route_by_language needs an explicit languages list")
        if self.max_chars <= 0:  # fastText would see empty texts
            raise ValueError(f"max_chars must be > 0, got {self.max_chars}")
        if self.max_windows <= 0:
            raise ValueError(f"max_windows must be > 0, got {self.max_windows}")


@dataclass(frozen=True)
class QualityConfig:
    """The quality classifier (``python -m pipelines.quality train``); "" = off."""

    model: str = ""  # a fastText classifier (.bin); "" = off
    positive_label: str = "hq"  # the model's label for good documents: its probability is quality_score
    threshold: Optional[float] = 0.5  # a lower quality_score is rejected (quality_low)
    top_fraction: Optional[float] = None  # keep the best fraction instead of a threshold
    max_chars: int = 2000  # the classifier reads the first characters only

    def __post_init__(self) -> None:
        if self.top_fraction is not None and not 0.0 < self.top_fraction <= 1.0:
            raise ValueError(f"top_fraction must be in (0, 1], got {self.top_fraction}")
        if self.threshold is not None and not 0.0 <= self.threshold <= 1.0:
            raise ValueError(f"threshold must be in [0, 1], got {self.threshold}")
        if self.max_chars <= 0:  # the classifier would see empty texts
            raise ValueError(f"max_chars must be > 0, got {self.max_chars}")


@dataclass(frozen=True)
class CleanConfig:
    """The ``clean:`` section: annotate (language, signals, scores), then select."""

    langid: LangIdConfig  # language ID (required: the rules and models depend on the language)
    rules: QualityRules = QualityRules()  # Gopher / C4 / FineWeb thresholds
    # the languages the rules apply to; []: every language (the job keeps)
    rules_languages: tuple[str, ...] = ()
    # each language's word segmentation, stop words and fitted thresholds (the configured
    # ones read as English; transforms/clean/language_rules.py); false: whitespace words,
    # English stop words and the configured thresholds for every language
    language_rules: bool = True
    anomaly: AnomalyConfig = AnomalyConfig()  # the learned anomaly detector
    quality: QualityConfig = QualityConfig()  # the quality classifier
    redact_pii: bool = True  # replace e-mail addresses, phone numbers and IP addresses
    batch_size: int = 256  # documents per model batch
    max_error_ratio: float = 0.05  # share of failed documents above which the job fails

    def __post_init__(self) -> None:
        object.__setattr__(self, "rules_languages", canonical_languages(self.rules_languages))
        if self.batch_size <= 0:
            raise ValueError(f"batch_size must be > 0, got {self.batch_size}")
        if not 0.0 < self.max_error_ratio <= 1.0:
            raise ValueError(f"max_error_ratio must be in (0, 1], got {self.max_error_ratio}")


class Models:
    """The models of one worker (weak-referenceable for ``shared.Shared``)."""

    def __init__(self, config: CleanConfig) -> None:
        from models.fasttext_models import LanguageIdentifier, TextClassifier

        self.langid = LanguageIdentifier.load(config.langid.model, config.langid.max_chars,
                                              config.langid.max_windows)
        self.anomaly = load_detector(config.anomaly) if config.anomaly.model else None
        self.quality = (TextClassifier.load(config.quality.model, config.quality.positive_label,
                                            config.quality.max_chars)
                        if config.quality.model else None)


def valid_utf8(text: str) -> str:
    """``text`` with lone surrogates replaced (fastText and Parquet need valid UTF-8)."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")


def annotate(docs: Sequence[Doc], models: Models, config: CleanConfig,
             score_anomaly: bool = True, every_language: bool = False,
             cross_sentence: Optional[bool] = None) -> tuple[list[Doc], list[int]]:
    """The documents with text redacted and every score filled in (batched models), and
    the PII counts [emails, phones, ips] redacted from them. ``score_anomaly`` false
    leaves the anomaly scores to the RunInference path. A document language ID drops gets
    its language only, unless ``every_language`` (the detector's training, which learns
    every language's signals). ``cross_sentence``: whether the signals read across
    sentences (``transforms/clean/coherence.py``: a language ID call per sentence) are
    measured; None: when the anomaly detector is configured (it reads them)."""
    texts = []
    pii = [0, 0, 0]
    for doc in docs:
        text = valid_utf8(doc.text)
        if config.redact_pii:
            text, emails, phones, ips = redact(text)
            pii[0] += emails
            pii[1] += phones
            pii[2] += ips
        texts.append(text)
    mixes = models.langid.identify(texts)
    # a document its language drops gets no signals, scores or segmentation: nothing after
    # language ID could keep it (jieba on the Chinese pages of an English job was 40% of clean)
    open_ = [i for i, mix in enumerate(mixes)
             if every_language or language_verdict(mix.lang, mix.score, config) is None]
    signals: list[Optional[Signals]] = [None] * len(docs)
    for i in open_:
        signals[i] = _signals(texts[i], language_profile(config, mixes[i].lang, texts[i]))
    if cross_sentence if cross_sentence is not None else models.anomaly is not None:
        for i in open_:
            signals[i] = with_cross_sentence(signals[i], texts[i], mixes[i].lang, models.langid.predict)
    quality: list[Any] = [None] * len(docs)
    if models.quality is not None and open_:
        for i, q in zip(open_, models.quality.predict([texts[i] for i in open_])):
            quality[i] = float(q)
    annotated = [
        dataclasses.replace(doc, text=text, lang=mix.lang, lang_score=mix.score, lang2=mix.lang2,
                            lang2_share=mix.lang2_share, signals=sig, quality_score=q)
        for doc, text, mix, sig, q in zip(docs, texts, mixes, signals, quality)
    ]
    if score_anomaly and models.anomaly is not None and open_:
        for i, doc in zip(open_, score_docs([annotated[i] for i in open_], models.anomaly)):
            annotated[i] = doc
    return annotated, pii


def language_verdict(lang: str, score: float, config: CleanConfig) -> Optional[tuple[str, str]]:
    """(reason, detail) when language ID alone drops a document: a language the job does
    not keep, or a language score below ``langid.threshold``; None otherwise."""
    langs = config.langid.languages
    if langs and lang not in langs:
        return CleanReason.LANGUAGE.value, f"{lang} ({score:.2f}) not in {list(langs)}"
    if score < config.langid.threshold:
        return CleanReason.LANG_SCORE.value, f"{lang} {score:.3f} < {config.langid.threshold}"
    return None


def language_profile(config: CleanConfig, lang: str, text: str) -> Optional[LanguageProfile]:
    """The document's segmentation, stop words and rule table (None: ``language_rules`` off)."""
    return profile(lang, text) if config.language_rules else None


def with_cross_sentence(signals: Optional[Signals], text: str, lang: str,
                        predict: Callable[[list[str]], list[tuple[str, float]]]) -> Optional[Signals]:
    """``signals`` with the two measures across sentences (``coherence``) filled in."""
    if signals is None:
        return None
    sentences = split_sentences(text)
    return dataclasses.replace(signals, sentence_gap=sentence_gap(sentences),
                               sentence_other_lang=other_language_share(sentences, lang, predict))


def _signals(text: str, prof: Optional[LanguageProfile]) -> Signals:
    if prof is None:
        return compute_signals(text)
    return compute_signals(text, prof.segment(), prof.stop_words)


def rules_apply(doc: Doc, config: CleanConfig) -> bool:
    """Whether the Gopher/C4/FineWeb rules check ``doc`` (``rules_languages``, [] = all)."""
    return doc.signals is not None and (not config.rules_languages or doc.lang in config.rules_languages)


def select(doc: Doc, config: CleanConfig, anomaly_threshold: Optional[float]) -> Optional[tuple[str, str]]:
    """(reason, detail) if the annotated ``doc`` is dropped, else None. The rules are the
    document language's (``language_rules.document_rules``); a detail of a language
    without its own table names the table used."""
    language = language_verdict(doc.lang, doc.lang_score, config)
    if language is not None:
        return language
    if rules_apply(doc, config):
        prof = language_profile(config, doc.lang, doc.text)
        failed = first_failure(doc.signals, config.rules if prof is None else document_rules(config.rules, prof))
        if failed and prof is not None and prof.fallback:
            used = f"rules of {prof.table}, {prof.fallback}" if prof.table else prof.fallback
            return failed[0], f"{failed[1]} [{doc.lang}: {used}]"
        if failed:
            return failed
    if anomaly_threshold is not None and doc.anomaly_score is not None \
            and doc.anomaly_score > anomaly_threshold:
        return CleanReason.ANOMALY.value, f"{doc.anomaly_score:.4g} > {anomaly_threshold:.4g}"
    quality = config.quality
    if quality.top_fraction is None and quality.threshold is not None \
            and doc.quality_score is not None and doc.quality_score < quality.threshold:
        return CleanReason.QUALITY.value, f"{doc.quality_score:.3f} < {quality.threshold}"
    return None


def _threshold(config: AnomalyConfig, detector: Any) -> Optional[float]:
    if config.threshold is not None:
        return config.threshold
    return detector.threshold if detector is not None else None


class _CleanBatchFn(beam.DoFn):
    """Annotates a batch; selects it too unless ``selects`` is false (RunInference path:
    the annotated documents go on to the language model, selection comes after)."""

    def __init__(self, config: CleanConfig, stage: str, selects: bool = True) -> None:
        self._config = config
        self._stage = stage
        self._selects = selects
        self._shared = shared.Shared()

    def setup(self) -> None:
        config = self._config
        key = (f"clean-models:{config.langid.model}|{config.anomaly.model}|{config.anomaly.version}|"
               f"{config.quality.model}")
        self._models = self._shared.acquire(lambda: Models(config), tag=key)
        self._counters = StageCounters(self._stage)
        self._anomaly_threshold = _threshold(config.anomaly, self._models.anomaly)

    def _count_pii(self, pii: list[int]) -> None:
        for name, count in zip(("pii_email", "pii_phone", "pii_ip"), pii):
            self._counters.inc(name, count)

    def process(self, batch: list[Doc]) -> Iterator[Any]:
        try:
            annotated, pii = annotate(batch, self._models, self._config, self._selects)
            self._count_pii(pii)
        except Exception:  # isolate the document that breaks the batch
            annotated = []
            for doc in batch:
                try:
                    one, pii = annotate([doc], self._models, self._config, self._selects)
                    annotated.extend(one)
                    self._count_pii(pii)
                except Exception as exc:
                    yield beam.pvalue.TaggedOutput(FAILED, make_failure(
                        self._stage, exc, doc.source, -1, doc.text.encode("utf-8", "replace")))
        for doc in annotated:
            # the RunInference path selects after the language model, but what language ID
            # drops is dropped here, before the model spends anything on it
            verdict = (select(doc, self._config, self._anomaly_threshold) if self._selects
                       else language_verdict(doc.lang, doc.lang_score, self._config))
            if (verdict is None or verdict[0] not in _LANGUAGE_REASONS) and rules_apply(doc, self._config):
                prof = language_profile(self._config, doc.lang, doc.text)
                if prof is not None and prof.fallback:  # checked without a table of its own
                    self._counters.inc(f"rules_fallback_{doc.lang or 'und'}")
            if verdict is None:
                yield doc
            else:
                yield beam.pvalue.TaggedOutput(REJECTED, Rejected(doc, verdict[0], verdict[1]))


class _SelectFn(beam.DoFn):
    """Selection of documents annotated and scored upstream (RunInference path)."""

    def __init__(self, config: CleanConfig, threshold: Optional[float]) -> None:
        self._config = config
        self._threshold = threshold

    def process(self, doc: Doc) -> Iterator[Any]:
        verdict = select(doc, self._config, self._threshold)
        if verdict is None:
            yield doc
        else:
            yield beam.pvalue.TaggedOutput(REJECTED, Rejected(doc, verdict[0], verdict[1]))


def _split_by_quantile(doc: Doc, threshold: float) -> Iterable[Any]:
    if doc.quality_score is not None and doc.quality_score < threshold:
        yield beam.pvalue.TaggedOutput(REJECTED, Rejected(
            doc, CleanReason.QUALITY.value, f"{doc.quality_score:.3f} < top-fraction cut {threshold:.3f}"))
    else:
        yield doc


def _cut_of(quantiles: list[float], top_fraction: float) -> float:
    if not quantiles:
        return 0.0
    index = int(round((1.0 - top_fraction) * (len(quantiles) - 1)))
    return float(quantiles[index])


class Clean(beam.PTransform):
    """``Doc`` → ``StageOutputs``: annotated documents kept, rejected with reasons, failed."""

    def __init__(self, config: CleanConfig, stage: str = "clean") -> None:
        super().__init__()
        self._config = config
        self._stage = stage

    def expand(self, docs: beam.PCollection[Doc]) -> StageOutputs:
        stage, config = self._stage, self._config
        two_step = bool(config.anomaly.model) and config.anomaly.inference == "runinference"
        results = (
            docs
            | "CountIn" >> beam.ParDo(CountFn(stage, "in"))
            | "Batch" >> beam.BatchElements(min_batch_size=min(16, config.batch_size),
                                            max_batch_size=config.batch_size)
            | "Annotate" >> beam.ParDo(_CleanBatchFn(config, stage, selects=not two_step)).with_outputs(
                REJECTED, FAILED, main="kept")
        )
        # rejects are counted per branch, before the Flatten (see routing.CountFn)
        kept = results["kept"]
        rejected = [results[REJECTED] | "CountRejected" >> beam.ParDo(CountFn(stage, "rejected"))]
        if two_step:
            threshold = _threshold(config.anomaly, load_detector(config.anomaly))
            selected = (kept | "Anomaly" >> ScoreWithRunInference(config.anomaly)
                        | "Select" >> beam.ParDo(_SelectFn(config, threshold)).with_outputs(REJECTED, main="kept"))
            kept = selected["kept"]
            rejected.append(selected[REJECTED] | "CountRejectedAnomaly" >> beam.ParDo(CountFn(stage, "rejected")))
        if config.quality.model and config.quality.top_fraction is not None:
            quantiles = (kept | "Scores" >> beam.Map(lambda d: d.quality_score or 0.0)
                         | "Quantiles" >> beam.ApproximateQuantiles.Globally(1001))
            split = kept | "TopFraction" >> beam.FlatMap(
                lambda d, q: _split_by_quantile(d, _cut_of(q or [], config.quality.top_fraction)),
                q=beam.pvalue.AsSingleton(quantiles, default_value=[])).with_outputs(REJECTED, main="kept")
            kept = split["kept"]
            rejected.append(split[REJECTED] | "CountRejectedTop" >> beam.ParDo(CountFn(stage, "rejected")))
        all_rejected = tuple(rejected) | "AllRejected" >> beam.Flatten()
        return StageOutputs(
            kept=kept | "CountKept" >> beam.ParDo(CountFn(stage, "kept")),
            rejected=all_rejected,
            failed=results[FAILED] | "CountFailed" >> beam.ParDo(CountFn(stage, "failed")),
        )
