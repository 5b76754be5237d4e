"""The run report: ``report/report.json`` and a self-contained ``report/report.html``.

Collected from a job's output (local or any Beam filesystem URL) after its stages ran:
the per-stage funnel from ``manifests/*.json`` (stage table order, then any other stage found
there) with drop reasons and throughput; the language, quality-signal, language-score
and anomaly-score distributions of the clean stage's kept and rejected documents (only
the ``lang``, ``lang_score``, ``signals`` and ``anomaly_score`` columns are read, batch
by batch, into fixed bins: memory does not grow with the corpus); each anomaly
detector's scores, the top-scoring documents and those only the detector caught
(``pipelines/report_anomaly.py``); the near-duplicate
component sizes of ``dedup_minhash``; original vs synthetic documents and tokens per
template (``pipelines/report_augment.py``); the tokens per shard of the newest ``tokens/``
version. Thresholds come from the job config (without one, plots have none).

The HTML has no script and no external resource: every plot is inline SVG drawn here,
and every string from the data is escaped. ``python -m pipelines.report --output DIR
[--config CFG]`` regenerates both files.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections import Counter
from datetime import datetime, timezone
from typing import Any, Optional, Sequence

import numpy as np
import pyarrow as pa
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines.manifest import list_files, read_manifest, read_text, write_text_atomic
from pipelines.report_anomaly import collect_anomaly, detector_thresholds
from pipelines.report_augment import collect_augment
from pipelines.report_data import Histogram, iter_batches, stage_files
from pipelines.report_html import render_html
from transforms.clean.language_rules import NO_PUNCTUATION_LANGUAGES, rules_for
from transforms.clean.language_rules import tables as language_tables
from transforms.clean.rules import RULES, Direction, Rule, Unit, threshold

_LOGGER = logging.getLogger(__name__)

REPORT_VERSION = 1
MAX_COMPONENTS = 5_000_000  # distinct near-duplicate components counted before giving up
MAX_LANGUAGES = 25  # the rest is summed as "other"
MAX_TABLE_GROUPS = 6  # signal histograms per rule table: English, the 4 largest others, "other"
OTHER_TABLE = "other"  # documents of languages without a table of their own

_FRAC = np.linspace(0.0, 1.0, 51)
_COUNT = np.concatenate([[0.0], np.logspace(0, 6, 61)])  # [0,1) then 10 bins per decade
_SCORE = np.linspace(-5.0, 20.0, 51)  # the combined anomaly score (0: the corpus sample's median)
_BINS: dict[Unit, tuple[np.ndarray, bool]] = {  # bin edges and log x axis per kind of signal
    Unit.FRACTION: (_FRAC, False), Unit.COUNT: (_COUNT, True), Unit.CHARS: (np.linspace(0.0, 30.0, 61), False)}


def signal_bins(table: Sequence[Rule] = RULES) -> dict[str, tuple[np.ndarray, bool]]:
    """The plotted signals: those a min or max rule of ``table`` reads (table order), each
    with its bin edges and whether its x axis is logarithmic."""
    return {rule.signal: _BINS[rule.unit] for rule in table if rule.direction is not Direction.FLAG}


# ----------------------------------------------------------------------------- data


def stage_names(output: str) -> list[str]:
    """Stages with a manifest: stage table order first, then unknown ones by name."""
    from pipelines.stage_specs import known_stages

    known = known_stages()
    found = {os.path.basename(p)[:-len(".json")]
             for p in list_files(FileSystems.join(output, "manifests"), "*.json")}
    return [s for s in known if s in found] + sorted(found - set(known))


def _seconds(manifest: Any) -> Optional[float]:
    seconds = manifest.extra.get("seconds") if isinstance(manifest.extra, dict) else None
    if isinstance(seconds, (int, float)) and seconds > 0:
        return float(seconds)
    try:
        fmt = "%Y-%m-%dT%H:%M:%SZ"
        spent = (datetime.strptime(manifest.finished_at, fmt)
                 - datetime.strptime(manifest.started_at, fmt)).total_seconds()
    except (TypeError, ValueError):
        return None
    return spent if spent > 0 else None


def _cpu_seconds(manifest: Any) -> Optional[float]:
    """The stage's recorded CPU seconds (manifests before 2026-12-07 have none)."""
    cpu = manifest.extra.get("cpu_seconds") if isinstance(manifest.extra, dict) else None
    return float(cpu) if isinstance(cpu, (int, float)) and cpu >= 0 else None


def run_time(stages: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The stages' summed wall and CPU seconds (the runs that wrote the manifests) and the
    span from the first start to the last finish."""
    walls = [s["seconds"] for s in stages if s.get("seconds")]
    cpus = [s["cpu_seconds"] for s in stages if s.get("cpu_seconds") is not None]
    started = sorted(s["started_at"] for s in stages if s.get("started_at"))
    finished = sorted(s["finished_at"] for s in stages if s.get("finished_at"))
    return {"stages_wall_s": round(sum(walls), 3) if walls else None,
            "stages_cpu_s": round(sum(cpus), 3) if cpus else None,
            "cpu_stages": len(cpus), "stages": len(stages),
            "first_started_at": started[0] if started else None,
            "last_finished_at": finished[-1] if finished else None}


def collect_funnel(output: str) -> list[dict[str, Any]]:
    """One row per stage manifest: counts, reasons, errors, seconds and docs/s."""
    rows = []
    for stage in stage_names(output):
        manifest = read_manifest(output, stage)
        if manifest is None:
            continue
        c, seconds = manifest.counts, _seconds(manifest)
        counters = manifest.extra.get("counters", {}) if isinstance(manifest.extra, dict) else {}
        rows.append({
            "stage": stage, "in": c.records_in, "out": c.out, "rejected": c.rejected,
            "failed": c.failed, "reconciles": c.reconciles,
            "rejected_by_reason": dict(c.rejected_by_reason), "failed_by_error": dict(c.failed_by_error),
            "seconds": seconds, "docs_per_s": (c.records_in / seconds) if seconds else None,
            "cpu_seconds": _cpu_seconds(manifest),
            "started_at": manifest.started_at, "finished_at": manifest.finished_at,
            "runner": manifest.runner, "code_version": manifest.code_version,
            "counters": counters if isinstance(counters, dict) else {},
        })
    return rows


def table_thresholds(clean: Any, lang: str) -> dict[str, list[dict[str, Any]]]:
    """The thresholds a document of ``lang`` (a language with its own table) is checked
    against: the configured ones mapped by its table, its stop words, no punctuation rules
    for the languages that have none (``language_rules.py``). Empty when ``rules_languages``
    leaves ``lang`` unchecked."""
    if clean.rules_languages and lang not in clean.rules_languages:
        return {}
    return _marks(rules_for(clean.rules, "" if lang == "en" else lang, True, lang not in NO_PUNCTUATION_LANGUAGES))


def _marks(rules: Any) -> dict[str, list[dict[str, Any]]]:
    """Per signal, the thresholds ``rules`` set (flag rules and switched-off limits have none)."""
    marks: dict[str, list[dict[str, Any]]] = {}
    for rule in rules.table:
        value = threshold(rules, rule)
        if rule.direction is not Direction.FLAG and value is not None and value is not False:
            marks.setdefault(rule.signal, []).append({
                "value": float(value), "kind": rule.direction.value, "rule": f"{rule.family}.{rule.key}",
                "active": rule.family in rules.families})
    return marks


def config_thresholds(config: Any, tables_wanted: Sequence[str] = ()) -> dict[str, Any]:
    """Thresholds of the job config's clean section: per signal, language score, anomaly.

    ``active`` is false for a rule whose family is switched off. The anomaly threshold
    is the config's override, else the one calibrated into the model artifact.
    ``signals_by_table``: English's and those of ``tables_wanted`` (languages with a table).
    """
    clean = getattr(config, "clean", None)
    if clean is None:
        return {"signals": {}, "lang_score": None, "anomaly": None, "anomaly_detectors": {}}
    anomaly = detector_thresholds(clean)
    return {"signals": _marks(clean.rules), "signals_by_table": {lang: table_thresholds(clean, lang) for lang in language_tables()
                                                    if lang == "en" or lang in tables_wanted},
            "lang_score": float(clean.langid.threshold),
            "anomaly": anomaly["combined"], "anomaly_detectors": anomaly,
            "rules_languages": list(clean.rules_languages), "languages": list(clean.langid.languages)}


def _column(batch: pa.RecordBatch, name: str) -> Optional[pa.Array]:
    return batch.column(name) if name in batch.schema.names else None


def _floats(array: Optional[pa.Array]) -> np.ndarray:
    if array is None:
        return np.zeros(0)
    return array.cast(pa.float64()).to_numpy(zero_copy_only=False)


def collect_clean(output: str, stage: str = "clean") -> dict[str, Any]:
    """Language counts and histograms of the clean stage's kept and rejected documents."""
    langs: dict[str, Counter[str]] = {"kept": Counter(), "rejected": Counter()}
    bins = signal_bins()
    signals = {name: Histogram(edges, log) for name, (edges, log) in bins.items()}
    # per rule table: a language with a fitted table of its own, else "other" (each such
    # document is judged by its script's default table, which needs its text to tell)
    by_table: dict[str, dict[str, Histogram]] = {}
    own = set(language_tables())
    lang_score, anomaly = Histogram(_FRAC), Histogram(_SCORE)
    docs = 0
    for series, kind in (("kept", "docs"), ("rejected", "rejected")):
        files = stage_files(output, kind, stage)
        for batch in iter_batches(files, ("lang", "lang_score", "signals", "anomaly_score")):
            docs += batch.num_rows
            lang = _column(batch, "lang")
            if lang is not None:
                langs[series].update("" if v is None else v for v in lang.to_pylist())
            lang_score.add(_floats(_column(batch, "lang_score")), series)
            anomaly.add(_floats(_column(batch, "anomaly_score")), series)
            struct = _column(batch, "signals")
            if struct is None:
                continue
            children = dict(zip([f.name for f in struct.type], struct.flatten()))
            for name, hist in signals.items():
                if name in children:
                    hist.add(_floats(children[name]), series)
            groups = np.array(["" if v is None else (v if v in own else OTHER_TABLE)
                               for v in (lang.to_pylist() if lang is not None else [None] * batch.num_rows)])
            has = ~np.asarray(struct.is_null().to_numpy(zero_copy_only=False), dtype=bool)
            for group in set(groups[has].tolist()) - {""}:
                rows = (groups == group) & has
                hists = by_table.setdefault(group, {n: Histogram(e, lg) for n, (e, lg) in bins.items()})
                for name, hist in hists.items():
                    if name in children:
                        hist.add(_floats(children[name])[rows], series)
    return {"stage": stage, "docs": docs, "languages": _top_languages(langs),
            "lang_score": lang_score.to_json(), "anomaly_score": anomaly.to_json(),
            "signals": {k: h.to_json() for k, h in signals.items() if h.n},
            "signals_by_table": _top_tables(by_table)}


def _top_tables(by_table: dict[str, dict[str, Any]], most: int = MAX_TABLE_GROUPS) -> dict[str, Any]:
    """English first, then the languages with the most scored documents (``most`` in all),
    then "other"; each with its documents count and histograms."""
    counts = {g: max((h.n for h in hists.values()), default=0) for g, hists in by_table.items()}
    named = sorted((g for g in counts if g not in ("en", OTHER_TABLE)), key=lambda g: (-counts[g], g))
    order = (["en"] if "en" in counts else []) + named[:most - 2] + ([OTHER_TABLE] if OTHER_TABLE in counts else [])
    return {g: {"docs": counts[g], "signals": {k: h.to_json() for k, h in by_table[g].items() if h.n}}
            for g in order}


def _top_languages(langs: dict[str, Counter[str]]) -> list[dict[str, Any]]:
    total = langs["kept"] + langs["rejected"]
    top = [lang for lang, _ in total.most_common(MAX_LANGUAGES)]
    rows = [{"lang": lang or "(none)", "kept": langs["kept"][lang], "rejected": langs["rejected"][lang]}
            for lang in top]
    rest = set(total) - set(top)
    if rest:
        rows.append({"lang": "other", "kept": sum(langs["kept"][x] for x in rest),
                     "rejected": sum(langs["rejected"][x] for x in rest)})
    return rows


def collect_components(output: str, stage: str = "dedup_minhash") -> Optional[dict[str, Any]]:
    """Near-duplicate component sizes: documents per ``dup_cluster`` (kept and rejected);
    documents without one are singletons. None when the stage wrote nothing."""
    files = stage_files(output, "docs", stage) + stage_files(output, "rejected", stage)
    if not files:
        return None
    clusters: Counter[str] = Counter()
    singletons, truncated = 0, False
    for batch in iter_batches(files, ("dup_cluster",)):
        values = batch.column("dup_cluster").to_pylist()
        singletons += sum(1 for v in values if not v)
        if not truncated:
            clusters.update(v for v in values if v)
            truncated = len(clusters) > MAX_COMPONENTS
    sizes = Counter(clusters.values())
    if singletons:
        sizes[1] += singletons
    return {"stage": stage, "sizes": {str(k): v for k, v in sorted(sizes.items())},
            "components": sum(sizes.values()), "largest": max(sizes) if sizes else 0,
            "truncated": truncated}


def collect_labels(output: str, thresholds: dict[str, float], stage: str = "label") -> Optional[dict[str, Any]]:
    """Per label set: value counts split into human, accepted model and uncertain model
    labels (score below the set's ``accept_threshold``), and the confidence histogram."""
    files = stage_files(output, "docs", stage)
    if not files:
        return None
    values: dict[str, dict[str, Counter[str]]] = {}
    confidence: dict[str, Histogram] = {}
    for batch in iter_batches(files, ("labels",)):
        for labels in batch.column("labels").to_pylist():
            for lab in labels or ():
                name = str(lab.get("name") or "")
                origin = lab.get("origin") or ""
                score = float(lab.get("score") or 0.0)
                if origin == "human":
                    series = "human"
                else:
                    confidence.setdefault(name, Histogram(_FRAC)).add(np.array([score]), "model")
                    threshold = thresholds.get(name)
                    series = "model, uncertain" if threshold is not None and score < threshold else "model"
                values.setdefault(name, {}).setdefault(series, Counter())[str(lab.get("value") or "")] += 1
    sets = {}
    for name, by_series in sorted(values.items()):
        total: Counter[str] = Counter()
        for counts in by_series.values():
            total.update(counts)
        order = [v for v, _ in total.most_common(MAX_LANGUAGES)]
        sets[name] = {"values": order,
                      "counts": {series: [counts[v] for v in order] for series, counts in sorted(by_series.items())},
                      "confidence": confidence[name].to_json() if name in confidence else None,
                      "accept_threshold": thresholds.get(name)}
    return {"stage": stage, "sets": sets}


def collect_tokens(output: str) -> Optional[dict[str, Any]]:
    """Tokens and documents per shard of the current version (``tokens/CURRENT``: a
    rerun whose tokens did not change reuses an older version)."""
    from pipelines.tokenize_stage import current_version

    version = current_version(output)
    if version is None:
        return None
    path = FileSystems.join(output, "tokens", version, "index.json")
    index = json.loads(read_text(path) or "{}")
    shards = index.get("shards") or []
    return {"version": str(index.get("version", "")), "index": path, "dtype": index.get("dtype"),
            "num_tokens": index.get("num_tokens"), "num_docs": index.get("num_docs"),
            "shards": [{"name": str(s.get("name", "")), "num_tokens": int(s.get("num_tokens", 0)),
                        "num_docs": int(s.get("num_docs", 0))} for s in shards]}


def build_report(output: str, config: Any = None) -> dict[str, Any]:
    """Every number of the report (what ``report.json`` holds)."""
    stages = collect_funnel(output)
    names = [s["stage"] for s in stages]
    clean = collect_clean(output) if "clean" in names else None
    return {
        "report_version": REPORT_VERSION, "output": output,
        "generated_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "config": getattr(config, "source_file", "") or None,
        "stages": stages,
        "run_time": run_time(stages),
        "thresholds": config_thresholds(config, list((clean or {}).get("signals_by_table", {}))),
        "clean": clean,
        "anomaly": collect_anomaly(output) if "clean" in names else None,
        "dedup_components": collect_components(output) if "dedup_minhash" in names else None,
        "labels": collect_labels(output, label_thresholds(config)) if "label" in names else None,
        "augment": collect_augment(output) if "augment" in names else None,
        "tokens": collect_tokens(output),
    }


def label_thresholds(config: Any) -> dict[str, float]:
    label = getattr(config, "label", None)
    return {s.name: float(s.accept_threshold) for s in label.sets} if label is not None else {}


def write_report(output: str, config: Any = None) -> str:
    """Writes ``report/report.json`` and ``report/report.html``; returns the HTML's path."""
    report = build_report(output, config)
    directory = FileSystems.join(output, "report")
    write_text_atomic(FileSystems.join(directory, "report.json"), json.dumps(report, indent=1))
    path = FileSystems.join(directory, "report.html")
    write_text_atomic(path, render_html(report))
    return path


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipelines.report",
                                     description="(Re)generate a job's run report. Other --options are Beam "
                                                 "pipeline options (filesystem settings).")
    parser.add_argument("--output", help="the job's output URL (default: the config's output)")
    parser.add_argument("--config", help="the job's YAML config (for the thresholds)")
    args, beam_args = parser.parse_known_args(argv)
    # Filesystem options (e.g. --s3_endpoint_url) as Beam pipeline options, as in a run.
    FileSystems.set_options(PipelineOptions(beam_args))
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    config = None
    if args.config:
        from pipelines.config import ConfigError, configure_filesystems, load_config

        try:
            config = load_config(args.config, output=args.output, check_models=False)
            configure_filesystems(config, beam_args)  # the config's options, the command line's last
        except ConfigError as exc:
            sys.stderr.write(f"config error: {exc}\n(the report is written without thresholds)\n")
    output = args.output or (config.output if config is not None else None)
    if not output:
        parser.error("--output is required without a readable --config")
    if not stage_names(output):
        sys.stderr.write(f"no manifests under {output}: not a job output\n")
        return 2
    sys.stdout.write(f"report: {write_report(output, config)}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
