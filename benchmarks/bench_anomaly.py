"""The learned anomaly detector on real web text, with whole families held out.

    .bench-venv/bin/python -m benchmarks.bench_anomaly [--out FILE.json]   (make bench-env)

The set (benchmarks/anomaly_web.py, built from ../shared/data): real web documents
(scrapinghub article bodies, the WARC pages the rules keep, Leipzig-sentence documents
of 20 languages) against real page junk (the scrapinghub pages' text outside the
article) and 16 planted families. The detector is trained as in production: the
language model on a reference corpus, the signals autoencoder and every calibration on an
unlabelled corpus sample, here the development split (dev web documents and the 7
development families, 48% junk). Reported on the held-out split only: the test web
documents against the 9 new planted families and the page junk, none of which the
detector, its calibration or its design saw. Peers: CCNet's KenLM 5-gram perplexity on
the same reference (benchmarks/kenlm_peer.py) and every quality signal alone (in its
better direction on the test split, which flatters it). Speed: CPU time of one thread on
~3 KB documents, the rules (signals + Gopher/C4/FineWeb) and the detector measured in
this same process.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from benchmarks import SHARED_DATA
from benchmarks.anomalies import sized_documents
from benchmarks.anomaly_web import COHERENT_SOURCES, DEV_FAMILIES, HELD_OUT_FAMILIES, SPLICED, Item, build_web_set
from models.anomaly import DETECTORS, AnomalyDetector, DetectorParams, lm_texts, train_detector
from models.fasttext_models import LanguageIdentifier
from transforms.clean.coherence import cross_signals
from transforms.clean.features import FEATURE_NAMES, FEATURE_SET, feature_matrix
from transforms.clean.rules import QualityRules, first_failure
from transforms.clean.signals import compute_signals

ROOT = Path(__file__).resolve().parents[1]
DATA = SHARED_DATA
_LOGGER = logging.getLogger(__name__)


def auroc(scores: np.ndarray, labels: np.ndarray) -> float:
    """Probability that a random anomaly scores above a random normal document (ties 1/2)."""
    from scipy.stats import rankdata

    ranks = rankdata(scores)
    pos = int(labels.sum())
    neg = len(labels) - pos
    return float((ranks[labels == 1].sum() - pos * (pos + 1) / 2) / (pos * neg))


def pr_auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """Average precision: the mean of the precision at each anomaly's rank."""
    order = np.argsort(-scores, kind="stable")
    hits = np.cumsum(labels[order])
    ranks = np.arange(1, len(order) + 1)
    return float((hits / ranks)[labels[order] == 1].mean())


def rules_catch(signals: Sequence[Any], langs: Sequence[tuple[str, float]], rules: QualityRules) -> np.ndarray:
    """What the clean stage's rules drop: language score < 0.65, or (English) a rule."""
    return np.array([score < 0.65 or (lang == "en" and first_failure(s, rules) is not None)
                     for s, (lang, score) in zip(signals, langs)])


def _table(scores: dict[str, np.ndarray], items: list[Item], caught: np.ndarray,
           flagged: np.ndarray, families: tuple[str, ...] = HELD_OUT_FAMILIES,
           pooled: str = "held-out pooled") -> list[dict[str, Any]]:
    normal = np.array([not i.anomalous for i in items])
    rows = []
    passed_pool = "rule-passed pooled"  # what the detector decides on: documents the rules pass
    for family in (pooled, passed_pool) + families:
        member = (np.array([i.anomalous for i in items]) if family in (pooled, passed_pool)
                  else np.array([i.family == family for i in items]))
        reference = normal & (np.array([i.source in COHERENT_SOURCES for i in items]) if family in SPLICED else True)
        mask = (member | reference) & (~caught if family == passed_pool else True)
        if family == passed_pool:
            member = member & ~caught
        y = member[mask].astype(int)
        row: dict[str, Any] = {"family": family, "docs": int(member.sum())}
        for name, s in scores.items():
            finite = np.isfinite(s[mask])  # a detector does not score a language without a centre
            if finite.all() or (0 < y[finite].sum() < finite.sum()):
                row[f"{name}_auroc"] = auroc(s[mask][finite], y[finite])
                row[f"{name}_pr_auc"] = pr_auc(s[mask][finite], y[finite])
        row["rules_catch"] = float(caught[member].mean())
        row["detector_flags"] = float(flagged[member].mean())
        passed = member & ~caught
        row["detector_flags_rule_passed"] = float(flagged[passed].mean()) if passed.any() else None
        rows.append(row)
    return rows


def source_table(items: list[Item], caught: np.ndarray, flagged: np.ndarray) -> list[dict[str, Any]]:
    """Per normal source (article bodies, WARC pages, each Leipzig language): documents,
    the share the rules drop, and the share of the rule-passed ones the detector flags
    (the issue's <= 2% each); then the rule-passed junk the detector flags (>= 50%)."""
    rows = []
    normal = np.array([not i.anomalous for i in items])
    sources = sorted({i.source for i in items if not i.anomalous},
                     key=lambda s: (s.startswith("leipzig+"), s.startswith("leipzig"), s))
    shared = np.array([not i.source.startswith("leipzig+:") for i in items])
    for source in ["all normal"] + sources:
        member = normal & (np.array([i.source == source for i in items]) if source != "all normal" else shared)
        passed = member & ~caught
        rows.append({"source": source, "docs": int(member.sum()), "rules_drop": float(caught[member].mean()),
                     "rule_passed": int(passed.sum()),
                     "flagged": float(flagged[passed].mean()) if passed.any() else None,
                     "flagged_count": int(flagged[passed].sum())})
    for prefix in ("leipzig:", "leipzig+:"):  # per-language rows summarised: all, the worst language
        group = [r for r in rows if r["source"].startswith(prefix) and r["flagged"] is not None]
        if group:
            n_passed = sum(r["rule_passed"] for r in group)
            n_flagged = sum(r["flagged_count"] for r in group)
            worst = max(group, key=lambda r: r["flagged"])
            rows.append({"source": f"{prefix[:-1]} ({len(group)} languages)", "docs": sum(r["docs"] for r in group),
                         "rules_drop": float(np.mean([r["rules_drop"] for r in group])), "rule_passed": n_passed,
                         "flagged": n_flagged / n_passed if n_passed else None, "flagged_count": n_flagged,
                         "worst_language": worst["source"], "worst_flagged": worst["flagged"]})
    junk = ~normal & ~caught
    rows.append({"source": "junk (all families)", "docs": int((~normal).sum()),
                 "rules_drop": float(caught[~normal].mean()), "rule_passed": int(junk.sum()),
                 "flagged": float(flagged[junk].mean()) if junk.any() else None,
                 "flagged_count": int(flagged[junk].sum())})
    return rows


def cached_lm(reference: list[str], langs: list[str], params: DetectorParams, seed: int, cache: str) -> Any:
    """The language model for ``reference`` from ``cache`` (keyed on the texts, the LM
    settings and the seed), trained and stored there when absent: benchmark iterations on
    everything after the language model reuse it. None without a cache directory."""
    import dataclasses
    import hashlib
    import os

    import torch

    from models.textlm import lm_from_state, train_lm

    if not cache:
        return None
    texts = lm_texts(reference, langs, params)
    digest = hashlib.sha256(json.dumps([dataclasses.asdict(params.lm), seed]).encode())
    for t in texts:
        digest.update(hashlib.sha256(t.encode("utf-8", "surrogatepass")).digest())
    base = os.path.join(cache, digest.hexdigest()[:16])
    if os.path.exists(os.path.join(base, "lm.pt")):
        with open(os.path.join(base, "tokenizer.model"), "rb") as fh:
            proto = fh.read()
        return lm_from_state(proto, torch.load(os.path.join(base, "lm.pt"), weights_only=True), params.lm, base)
    lm = train_lm(texts, params.lm, seed)
    os.makedirs(base, exist_ok=True)
    with open(os.path.join(base, "tokenizer.model"), "wb") as fh:
        fh.write(lm.tokenizer_proto)
    torch.save(lm.net.state_dict(), os.path.join(base, "lm.pt"))
    return lm


def best_signal(x: np.ndarray, y: np.ndarray) -> tuple[str, float]:
    """The best quality signal as a score, in its better direction."""
    best = max((max(a, 1 - a), name) for name, a in ((n, auroc(x[:, j], y)) for j, n in enumerate(FEATURE_NAMES)))
    return best[1], best[0]


def speed(detector: AnomalyDetector, lid: LanguageIdentifier, n: int = 512) -> dict[str, float]:
    """Documents/s of one thread (CPU time) on ~3 KB documents: rules, detector (with the
    signals across sentences it reads: a language ID call per sentence)."""
    import torch

    torch.set_num_threads(1)
    docs = (sized_documents(DATA) * 2)[:n]
    rules = QualityRules()
    t0 = time.process_time()
    signals = [compute_signals(t) for t in docs]
    [first_failure(s, rules) for s in signals]
    t_rules = time.process_time() - t0
    langs = [lang for lang, _ in lid.predict(docs)]
    t0 = time.process_time()
    for start in range(0, len(docs), 256):
        batch = docs[start:start + 256]
        cross = cross_signals(batch, langs[start:start + 256], lid.predict)
        detector.score(batch, feature_matrix(signals[start:start + 256]), cross, langs[start:start + 256])
    t_detector = time.process_time() - t0
    return {"docs": len(docs), "mean_chars": float(np.mean([len(d) for d in docs])),
            "rules_docs_per_s": len(docs) / t_rules, "detector_docs_per_s": len(docs) / t_detector,
            "max_tokens": detector.lm.params.score_tokens}


def caught_only_by_detector(detector: AnomalyDetector, lid: LanguageIdentifier) -> list[dict[str, Any]]:
    """The WARC pages (every page with >= 200 characters) the language ID and rules pass
    and the detector flags, with a snippet: for a person to judge."""
    from transforms.doc import RawRecord
    from transforms.extract.extract import ExtractConfig, extract_record
    from transforms.readers.warc import WarcLimits, iter_warc

    pages = []
    for path in sorted((DATA / "warc").glob("*.warc.gz")):
        with open(path, "rb") as fh:
            for record in iter_warc(fh, path.name, WarcLimits(), "bench"):
                if isinstance(record, RawRecord):
                    doc = extract_record(record, ExtractConfig(min_chars=200))
                    if not isinstance(doc, tuple):
                        pages.append((path.name, record.url, doc.text))
    texts = [t for _, _, t in pages]
    signals = [compute_signals(t) for t in texts]
    langs = lid.predict(texts)
    caught = rules_catch(signals, langs, QualityRules())
    codes = [lang for lang, _ in langs]
    scores = detector.score(texts, feature_matrix(signals), cross_signals(texts, codes, lid.predict), codes)
    out = []
    for i in np.argsort(-scores.combined):
        if not caught[i] and scores.combined[i] > detector.threshold:
            out.append({"file": pages[i][0], "url": pages[i][1], "lang": langs[i][0],
                        "combined": float(scores.combined[i]),
                        **{d: float(v) for d, v in zip(DETECTORS, scores.detectors[i])},
                        "snippet": " ".join(texts[i][:300].split())})
    return out + [{"pages": len(pages), "rules_pass": int((~caught).sum())}]


def review_simulation(detector: AnomalyDetector, dev: list[Item], dev_scores: Any, dev_x: np.ndarray,
                      dev_kept: np.ndarray, test: list[Item], scores: Any, x: np.ndarray, caught: np.ndarray,
                      base: np.ndarray, budget: int = 200) -> dict[str, Any]:
    """Issue 39, item 6, simulated: the ``budget`` highest-scoring documents of the corpus
    sample that the rules keep and the detector does not drop (the band between a review
    threshold and the drop threshold) are queued; a reviewer answers each from the
    benchmark's truth; a head (``models/review_head.py``) learns from the answers. Before
    and after, on the held-out test documents the rules pass: AUROC (combined score, the
    head's probability) and the shares flagged (combined above the threshold; after: that
    or the head's probability above 0.5)."""
    from models.review_head import fit_head

    band = np.flatnonzero(dev_kept & (dev_scores.combined <= detector.threshold))
    queue = band[np.argsort(-dev_scores.combined[band], kind="stable")][:budget]
    answers = np.array([dev[i].anomalous for i in queue])
    head = fit_head(dev_scores.detectors[queue], dev_x[queue], answers, dev_scores.detectors[dev_kept],
                    dev_x[dev_kept], list(DETECTORS) + ["no_centre"] + list(FEATURE_NAMES))
    p = head.probability(scores.detectors, x)
    passed = base & ~caught
    y = np.array([i.anomalous for i in test])
    sources = np.array([i.source for i in test])
    before = scores.combined > detector.threshold
    after = before | (p > head.threshold)
    normal = passed & ~y
    out: dict[str, Any] = {"queued": len(queue), "queued_junk": int(answers.sum()), "head_threshold": head.threshold,
                           "review_threshold": float(dev_scores.combined[queue[-1]]) if len(queue) else None}
    for name, score, flags in (("before", scores.combined, before), ("after", p, after)):
        out[name] = {"rule_passed_auroc": auroc(score[passed], y[passed].astype(int)),
                     "flagged_normal": float(flags[normal].mean()),
                     "flagged_normal_by_source": {src: float(flags[normal & (sources == src)].mean())
                                                  for src in ("article", "warc") if (normal & (sources == src)).any()}
                     | {"leipzig": float(flags[normal & np.char.startswith(sources, "leipzig:")].mean())},
                     "flagged_junk": float(flags[passed & y].mean()),
                     "per_family": {f: float(flags[passed & np.array([i.family == f for i in test])].mean())
                                    for f in sorted({i.family for i, k in zip(test, passed & y) if k})}}
    out["top_weights"] = sorted(zip(head.feature_names, head.coef.tolist()), key=lambda t: -abs(t[1]))[:8]
    return out


def kenlm_available() -> bool:
    try:
        import kenlm  # noqa: F401

        from benchmarks.kenlm_peer import find_lmplz

        find_lmplz()
        return True
    except (ImportError, FileNotFoundError):
        return False


def evaluate(seed: int = 0, steps: int = 0, lm_cache: str = "", kenlm: bool = True,
             dump: str = "", extra_sentences: str = "") -> dict[str, Any]:
    t_start = time.time()
    web = build_web_set(DATA, seed=seed, extra_sentences=Path(extra_sentences) if extra_sentences else None)
    lid = LanguageIdentifier.load(str(DATA / "models" / "lid.176.ftz"))
    dev, test = web.select("dev"), web.select("test")
    dev_langs = [lang for lang, _ in lid.predict([i.text for i in dev])]
    ref_langs = [lang for lang, _ in lid.predict(web.reference)]
    dev_signals = [compute_signals(i.text) for i in dev]
    dev_kept = ~rules_catch(dev_signals, lid.predict([i.text for i in dev]), QualityRules())
    params = DetectorParams()
    if steps:
        params = DetectorParams(lm=dataclass_replace(params.lm, steps=steps))
    dev_cross = cross_signals([i.text for i in dev], dev_langs, lid.predict)
    detector = train_detector(web.reference, ref_langs, feature_matrix([compute_signals(t) for t in web.reference]),
                              [i.text for i in dev], dev_langs, feature_matrix(dev_signals),
                              FEATURE_NAMES, FEATURE_SET, params, seed, corpus_kept=dev_kept,
                              lm=cached_lm(web.reference, ref_langs, params, seed, lm_cache),
                              reference_cross=cross_signals(web.reference, ref_langs, lid.predict),
                              corpus_cross=dev_cross)
    t_trained = time.time()
    dev_scores = detector.score([i.text for i in dev], feature_matrix(dev_signals), dev_cross, dev_langs)
    dev_named = {"combined": dev_scores.combined, **{d: dev_scores.detectors[:, j] for j, d in enumerate(DETECTORS)}}
    dev_rows = _table(dev_named, dev, ~dev_kept, dev_scores.combined > detector.threshold, DEV_FAMILIES,
                      "development pooled")
    test_texts = [i.text for i in test]
    test_signals = [compute_signals(t) for t in test_texts]
    test_lid = lid.predict(test_texts)
    x = feature_matrix(test_signals)
    test_cross = cross_signals(test_texts, [lang for lang, _ in test_lid], lid.predict)
    scores = detector.score(test_texts, x, test_cross, [lang for lang, _ in test_lid])
    y = np.array([i.anomalous for i in test], dtype=int)
    # the extra languages' documents (--extra-sentences) count in the per-source table
    # only: the AUROCs stay those of the shared data's set, comparable with and without
    base = np.array([not i.source.startswith("leipzig+:") for i in test])
    name, _ = best_signal(x[base], y[base])
    column = x[:, FEATURE_NAMES.index(name)]
    signal_score = column if auroc(column[base], y[base]) >= 0.5 else -column
    named = {"combined": scores.combined, **{d: scores.detectors[:, j] for j, d in enumerate(DETECTORS)},
             "best_signal": signal_score}
    if kenlm:
        from benchmarks.kenlm_peer import trained_peer

        peer, tmp = trained_peer(web.reference, seed)
        named["kenlm"] = np.log(peer.perplexity(test_texts))
        tmp.cleanup()
    caught = rules_catch(test_signals, test_lid, QualityRules())
    flagged = scores.combined > detector.threshold
    if dump:  # every document's scores, for choosing a combination on the development split
        np.savez_compressed(dump, **{f"{split}_{k}": v for split, items_, sc, langs_, caught_ in (
            ("dev", dev, dev_scores, dev_langs, ~dev_kept), ("test", test, scores, [g for g, _ in test_lid], caught))
            for k, v in (("z", sc.detectors), ("combined", sc.combined), ("caught", caught_),
                         ("family", np.array([i.family for i in items_])),
                         ("source", np.array([i.source for i in items_])),
                         ("lang", np.array(langs_)))}, threshold=detector.threshold)
    normal = y == 0
    result = {
        "documents": {"dev": len(dev), "test": len(test), "reference": len(web.reference),
                      "test_normal": int(normal.sum()), "dev_anomalous_share": float(np.mean([i.anomalous for i in dev])),
                      "dev_rules_keep": int(dev_kept.sum()),
                      "dev_rules_keep_anomalous": int(sum(i.anomalous for i, k in zip(dev, dev_kept) if k))},
        "best_signal": name, "threshold": detector.threshold, "max_tokens": detector.lm.params.score_tokens,
        "test_normal_flagged": float(flagged[normal & base].mean()),
        "test_normal_rules_drop": float(caught[normal & base].mean()),
        "families": _table({k: v[base] for k, v in named.items()}, [i for i, b in zip(test, base) if b],
                           caught[base], flagged[base]),
        "development": dev_rows,
        "sources": source_table(test, caught, flagged),
        "reference_languages": {lang: ref_langs.count(lang) for lang in sorted(set(ref_langs))},
        "review": review_simulation(detector, dev, dev_scores, feature_matrix(dev_signals), dev_kept, test, scores, x,
                                    caught, base),
        "train_seconds": t_trained - t_start, "seed": seed, "lm_steps": params.lm.steps,
        "speed": speed(detector, lid),
        "caught_only_by_detector": caught_only_by_detector(detector, lid),
    }
    return result


def dataclass_replace(obj: Any, **changes: Any) -> Any:
    import dataclasses

    return dataclasses.replace(obj, **changes)


def _family_lines(rows: list[dict[str, Any]], names: tuple[str, ...]) -> list[str]:
    lines = [f"{'family':18s} {'docs':>4s} " + " ".join(f"{n[:11]:>11s}" for n in names)
             + "   rules  flags  flags|rules-passed"]
    for row in rows:
        passed = row["detector_flags_rule_passed"]
        lines.append(f"{row['family']:18s} {row['docs']:4d} "
                     + " ".join(f"{row[n + '_auroc']:.3f}/{row[n + '_pr_auc']:.2f}" if n + "_auroc" in row
                                else f"{'-':>11s}" for n in names)
                     + f"   {row['rules_catch']:.2f}   {row['detector_flags']:.2f}   "
                     + ("-" if passed is None else f"{passed:.2f}"))
    return lines


def report(result: dict[str, Any]) -> str:
    names = tuple(n for n in ("combined", "kenlm", "best_signal") if n + "_auroc" in result["families"][0]) + DETECTORS
    lines = [f"{result['documents']}; best single signal: {result['best_signal']}; "
             f"threshold {result['threshold']:.3f}; N = {result['max_tokens']} tokens; seed {result['seed']}",
             f"reference documents per language: {result['reference_languages']}",
             "development families (the calibration corpus; judge changes here first):"]
    lines += _family_lines(result["development"], ("combined",) + DETECTORS)
    lines.append("held-out families (test split):")
    lines += _family_lines(result["families"], names)
    lines.append(f"{'flagged at the threshold, of the documents the rules pass':60s}")
    lines.append(f"{'source':22s} {'docs':>5s} {'rules drop':>10s} {'passed':>6s} {'flagged':>8s}")
    for row in result["sources"]:
        if row["source"].startswith("leipzig+:") and not row["flagged_count"]:
            continue  # the extra languages: only those with a flagged document, then the summary
        flagged = "-" if row["flagged"] is None else f"{row['flagged']:.3f} ({row['flagged_count']})"
        if "worst_language" in row:
            flagged += f"  worst {row['worst_language']} {row['worst_flagged']:.3f}"
        lines.append(f"{row['source']:22s} {row['docs']:5d} {row['rules_drop']:10.2f} {row['rule_passed']:6d} "
                     f"{flagged:>8s}")
    lines.append(f"test web documents flagged: {result['test_normal_flagged']:.3f}, dropped by the "
                 f"rules: {result['test_normal_rules_drop']:.3f}")
    rv = result["review"]
    lines.append(f"review loop (simulated reviewer, {rv['queued']} queued from the corpus sample's band under the "
                 f"drop threshold, {rv['queued_junk']} junk; review threshold {rv['review_threshold']:.3f}):")
    for name in ("before", "after"):
        r = rv[name]
        lines.append(f"  {name:6s} rule-passed AUROC {r['rule_passed_auroc']:.3f}, flagged normal "
                     f"{r['flagged_normal']:.3f} (" + ", ".join(f"{k} {v:.3f}" for k, v in
                                                      r["flagged_normal_by_source"].items())
                     + f"), flagged junk {r['flagged_junk']:.3f}  "
                     + " ".join(f"{f} {v:.2f}" for f, v in r["per_family"].items()))
    lines.append("  head's largest weights: " + ", ".join(f"{n} {w:+.2f}" for n, w in rv["top_weights"]))
    sp = result["speed"]
    lines.append(f"speed, one thread, {sp['docs']} documents of {sp['mean_chars']:.0f} chars: rules "
                 f"{sp['rules_docs_per_s']:.0f}/s, detector {sp['detector_docs_per_s']:.0f}/s "
                 f"(first {sp['max_tokens']} tokens)")
    only = result["caught_only_by_detector"]
    lines.append(f"WARC pages caught only by the detector: {len(only) - 1} of {only[-1]['rules_pass']} "
                 f"that the rules pass ({only[-1]['pages']} pages)")
    for row in only[:-1]:
        lines.append(f"  {row['combined']:6.2f} {row['lang']} {row['url'][:60]}  {row['snippet'][:150]}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=0, help="language-model steps (default: DetectorParams)")
    parser.add_argument("--out", default=None, help="write the result as JSON here")
    parser.add_argument("--lm-cache", default="", help="reuse language models trained on the same reference, "
                        "settings and seed from this directory (iterating on what follows the model)")
    parser.add_argument("--no-kenlm", action="store_true", help="leave the KenLM peer out")
    parser.add_argument("--dump", default="", help="write every document's scores here (.npz)")
    parser.add_argument("--extra-sentences", default="", help="a folder of lingua-py's language-testdata/"
                        "sentences (75 languages): test documents of the languages ../shared/data lacks")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, force=True)
    logging.getLogger("apache_beam").setLevel(logging.WARNING)
    kenlm = not args.no_kenlm and kenlm_available()
    if not args.no_kenlm and not kenlm:
        _LOGGER.warning("KenLM peer left out: kenlm or lmplz missing (benchmarks/setup_kenlm.sh needs Boost)")
    result = evaluate(args.seed, args.steps, args.lm_cache, kenlm, args.dump, args.extra_sentences)
    sys.stdout.write(report(result) + "\n")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            json.dump(result, fh, indent=2, default=float)
    return 0


if __name__ == "__main__":
    sys.exit(main())
