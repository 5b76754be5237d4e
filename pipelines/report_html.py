"""The run report as one self-contained HTML page: inline SVG plots, no script, no URL.

Every plot is an ``<svg class="plot" data-plot="NAME">`` with a title, axis labels and,
where the config has them, threshold lines with their rule and value. Every string that
comes from the data (stage names, reasons, languages, shard names, paths) goes through
``html.escape``: a hostile reason code or URL cannot inject markup.
"""

from __future__ import annotations

import html
import math
from typing import Any, Optional, Sequence

from pipelines.report_anomaly import DETECTOR_FIELDS
from pipelines.report_augment import augment_html

W, H = 640, 300
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 34, 62
PALETTE = ("#4e79a7", "#f28e2b", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7", "#9c755f",
           "#bab0ac", "#d37295", "#a0cbe8", "#499894", "#f1ce63", "#79706e", "#d4a6c8")
KEPT, REJECTED, FAILED = "#59a14f", "#e15759", "#7f0000"

Series = tuple[str, str, Sequence[float]]  # name, colour, value per category
Marker = tuple[float, str, str, bool]  # x position in category units, label, colour, dashed


def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def fmt(value: Optional[float]) -> str:
    if value is None or value != value:  # NaN: a detector that did not score the document
        return "–"
    if value == 0 or 1e-3 <= abs(value) < 1e6:
        return f"{value:,.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    return f"{value:.2e}"


def _nice_max(value: float) -> float:
    if value <= 0:
        return 1.0
    exp = 10 ** math.floor(math.log10(value))
    return next(m * exp for m in (1, 2, 2.5, 5, 10) if m * exp >= value)


def bar_chart(plot: str, title: str, xlabel: str, ylabel: str, labels: Sequence[str],
              series: Sequence[Series], markers: Sequence[Marker] = (), max_ticks: int = 12,
              tips: Optional[Sequence[str]] = None) -> str:
    """Vertical bars per category, series stacked; markers are labelled vertical lines.
    Empty labels get no tick; ``tips`` (default: the labels) name the bars on hover."""
    n = max(len(labels), 1)
    tips = tips or labels
    pw, ph = W - LEFT - RIGHT, H - TOP - BOTTOM
    totals = [sum(s[2][i] for s in series) for i in range(len(labels))]
    ymax = _nice_max(max(totals, default=0))
    step = pw / n
    out = [f'<svg class="plot" data-plot="{esc(plot)}" viewBox="0 0 {W} {H}" role="img" '
           f'xmlns="http://www.w3.org/2000/svg"><title>{esc(title)}</title>',
           f'<text class="t" x="{W / 2}" y="18" text-anchor="middle">{esc(title)}</text>']
    for k in range(5):  # y grid and ticks
        y = TOP + ph - ph * k / 4
        out.append(f'<line class="gl" x1="{LEFT}" x2="{W - RIGHT}" y1="{y:.1f}" y2="{y:.1f}"/>'
                   f'<text class="tick" x="{LEFT - 4}" y="{y + 4:.1f}" text-anchor="end">'
                   f'{esc(fmt(ymax * k / 4))}</text>')
    for i, label in enumerate(labels):
        base = 0.0
        for name, colour, values in series:
            v = float(values[i])
            if v <= 0:
                continue
            h = ph * v / ymax
            y = TOP + ph - ph * (base + v) / ymax
            out.append(f'<rect x="{LEFT + i * step + step * 0.08:.2f}" y="{y:.2f}" '
                       f'width="{max(step * 0.84, 0.8):.2f}" height="{max(h, 0.5):.2f}" fill="{colour}">'
                       f'<title>{esc(tips[i])}: {esc(name)} {esc(fmt(v))}</title></rect>')
            base += v
        if n <= 20 and base > 0:
            out.append(f'<text class="tick" x="{LEFT + (i + 0.5) * step:.1f}" '
                       f'y="{TOP + ph - ph * base / ymax - 3:.1f}" text-anchor="middle">{esc(fmt(base))}</text>')
    every = max(1, math.ceil(n / max_ticks))
    shown = [i for i in range(0, len(labels), every) if labels[i]]
    sparse = len(shown) < len(range(0, len(labels), every))  # decade ticks of a log axis
    rotate = not sparse and max((len(labels[i]) for i in shown), default=0) * 6 > step * every
    last = -1e9
    for i in shown:
        x = LEFT + (i + 0.5) * step
        if x - last < (14 if rotate else len(labels[i]) * 6):
            continue  # would overlap the previous tick label
        last = x
        y = TOP + ph + 14
        tr = f' transform="rotate(-30 {x:.1f} {y})" text-anchor="end"' if rotate else ' text-anchor="middle"'
        out.append(f'<text class="tick" x="{x:.1f}" y="{y}"{tr}>{esc(labels[i][:24])}</text>')
    for k, (pos, label, colour, dashed) in enumerate(markers):
        x = LEFT + min(max(pos, 0.0), n) * step
        dash = ' stroke-dasharray="5,4"' if dashed else ""
        side = (f'x="{x - 3:.1f}" text-anchor="end"' if x > LEFT + 0.6 * pw
                else f'x="{x + 3:.1f}"')  # labels stay inside the plot
        out.append(f'<path class="threshold" d="M{x:.1f} {TOP} V{TOP + ph}" stroke="{colour}" '
                   f'stroke-width="2"{dash}/><text class="mark" {side} y="{TOP + 10 + 12 * k}" '
                   f'fill="{colour}">{esc(label)}</text>')
    out.append(f'<path class="axis" d="M{LEFT} {TOP} V{TOP + ph} H{W - RIGHT}"/>'
               f'<text class="label" x="{LEFT + pw / 2}" y="{H - 6}" text-anchor="middle">{esc(xlabel)}</text>'
               f'<text class="label" transform="rotate(-90)" x="{-(TOP + ph / 2)}" y="14" '
               f'text-anchor="middle">{esc(ylabel)}</text></svg>')
    return "".join(out)


def legend(series: Sequence[Series]) -> str:
    items = "".join(f'<span><i style="background:{c}"></i>{esc(n)}</span>' for n, c, _ in series)
    return f'<div class="legend">{items}</div>'


def bin_position(edges: Sequence[float], value: float, log: bool) -> float:
    """``value`` in bin units (bin i spans [i, i+1]), log-interpolated on log axes."""
    if value <= edges[0]:
        return 0.0
    for i in range(len(edges) - 1):
        lo, hi = edges[i], edges[i + 1]
        if value <= hi:
            if log and lo > 0:
                return i + math.log(value / lo) / math.log(hi / lo)
            return i + (value - lo) / (hi - lo)
    return float(len(edges) - 1)


def _trim(hist: dict[str, Any], keep: Sequence[float]) -> tuple[int, int]:
    """The bin range worth showing on a log axis: the data and the thresholds."""
    edges = hist["edges"]
    counts = [sum(c[i] for c in hist["counts"].values()) for i in range(len(edges) - 1)]
    used = [i for i, c in enumerate(counts) if c]
    used += [min(int(bin_position(edges, v, True)), len(counts) - 1) for v in keep]
    if not hist["log"] or not used:
        return 0, len(counts)
    return max(min(used) - 1, 0), min(max(used) + 2, len(counts))


def _decade(edge: float) -> bool:
    return edge == 0 or abs(math.log10(edge) - round(math.log10(edge))) < 1e-9


def histogram_plot(plot: str, title: str, xlabel: str, hist: dict[str, Any],
                   thresholds: Sequence[dict[str, Any]] = ()) -> str:
    lo, hi = _trim(hist, [t["value"] for t in thresholds])
    edges = hist["edges"]
    tips = [f"[{fmt(edges[i])}, {fmt(edges[i + 1])})" for i in range(lo, hi)]
    labels = [fmt(edges[i]) if not hist["log"] or _decade(edges[i]) else "" for i in range(lo, hi)]
    colours = {"kept": KEPT, "rejected": REJECTED}
    series = [(name, colours.get(name, PALETTE[k % len(PALETTE)]), counts[lo:hi])
              for k, (name, counts) in enumerate(sorted(hist["counts"].items()))]
    markers = []
    for t in thresholds:
        on = t.get("active", True)
        word = "≥" if t["kind"] == "min" else "≤"
        name = t.get("label") or t.get("rule", "").split(".")[-1]
        markers.append((bin_position(edges, t["value"], hist["log"]) - lo,
                        f"{name}: {word} {fmt(t['value'])}" + ("" if on else " (off)"),
                        "#222" if on else "#999", not on))
    note = f"{hist['n']:,} documents, mean {fmt(hist['mean'])}, min {fmt(hist['min'])}, max {fmt(hist['max'])}"
    if hist["below"] or hist["above"]:
        note += f"; {hist['below'] + hist['above']:,} outside the axis counted in the end bins"
    chart = bar_chart(plot, title, xlabel + (" (log bins)" if hist["log"] else ""), "documents",
                      labels, series, markers, max_ticks=12 if not hist["log"] else 10 ** 6, tips=tips)
    return f'<figure>{chart}{legend(series)}<figcaption>{esc(note)}</figcaption></figure>'


def funnel_section(stages: Sequence[dict[str, Any]]) -> str:
    if not stages:
        return "<p>No stage manifests found.</p>"
    reasons = sorted({r for s in stages for r in s["rejected_by_reason"]})
    series: list[Series] = [("out", KEPT, [s["out"] for s in stages])]
    for k, reason in enumerate(reasons):
        series.append((f"rejected: {reason}", PALETTE[k % len(PALETTE)],
                       [s["rejected_by_reason"].get(reason, 0) for s in stages]))
    unexplained = [max(s["rejected"] - sum(s["rejected_by_reason"].values()), 0) for s in stages]
    if any(unexplained):
        series.append(("rejected (no reason counted)", "#bbb", unexplained))
    series.append(("failed", FAILED, [s["failed"] for s in stages]))
    series = [x for x in series if any(x[2])] or series[:1]
    chart = bar_chart("funnel", "Documents per stage: kept, rejected by reason, failed", "stage",
                      "documents in", [s["stage"] for s in stages], series)
    rows = []
    for s in stages:
        detail = ", ".join(f"{esc(k)}={v:,}" for k, v in sorted(s["rejected_by_reason"].items(),
                                                               key=lambda kv: -kv[1]))
        errors = ", ".join(f"{esc(k)}={v:,}" for k, v in s["failed_by_error"].items())
        check = "ok" if s["reconciles"] else "MISMATCH"
        rows.append(f"<tr><td>{esc(s['stage'])}</td><td>{s['in']:,}</td><td>{s['out']:,}</td>"
                    f"<td>{s['rejected']:,}</td><td>{s['failed']:,}</td>"
                    f"<td class=\"{'ok' if s['reconciles'] else 'bad'}\">{check}</td>"
                    f"<td>{detail}</td><td>{errors}</td></tr>")
    table = ("<table><tr><th>stage</th><th>in</th><th>out</th><th>rejected</th><th>failed</th>"
             "<th title=\"in = out + rejected + failed\">in = out+r+f</th><th>rejected by reason</th><th>failed by error</th></tr>"
             + "".join(rows) + "</table>")
    return f"<figure>{chart}{legend(series)}</figure>{table}"


def clock(seconds: float) -> str:
    """``42.3 s`` under a minute, ``3 min 05 s`` / ``1 h 02 min`` above."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    whole = int(round(seconds))
    hours, rest = divmod(whole, 3600)
    return f"{hours} h {rest // 60:02d} min" if hours else f"{rest // 60} min {rest % 60:02d} s"


def run_time_line(run: Optional[dict[str, Any]]) -> str:
    """The stages' total wall and CPU time, first thing under the contents."""
    if not run or run.get("stages_wall_s") is None:
        return '<p class="runtime">No stage recorded its duration.</p>'
    cpu = run.get("stages_cpu_s")
    cpu_text = (f", <b>{clock(cpu)}</b> CPU" + (f" ({run['cpu_stages']} of {run['stages']} stages recorded it)"
                                                  if run["cpu_stages"] < run["stages"] else "")
                if cpu is not None else "; CPU not recorded (older manifests)")
    span = (f"; first stage started {esc(run['first_started_at'])}, last finished {esc(run['last_finished_at'])}"
            if run.get("first_started_at") and run.get("last_finished_at") else "")
    return (f'<p class="runtime">Run time: <b>{clock(run["stages_wall_s"])}</b> wall{cpu_text}, summed over the '
            f'{run["stages"]} stages as last run (a resumed stage counts the run that wrote it){span}.</p>')


def throughput_section(stages: Sequence[dict[str, Any]]) -> str:
    timed = [s for s in stages if s["docs_per_s"]]
    if not timed:
        return "<p>No stage recorded its duration.</p>"
    series = [("documents/s", PALETTE[0], [s["docs_per_s"] for s in timed])]
    chart = bar_chart("throughput", "Throughput per stage (documents in / wall-clock seconds)",
                      "stage", "documents per second", [s["stage"] for s in timed], series)
    note = "; ".join(f"{esc(s['stage'])}: {s['in']:,} in {fmt(s['seconds'])} s"
                     + (f" ({fmt(s['cpu_seconds'])} CPU s)" if s.get("cpu_seconds") is not None else "")
                     for s in timed)
    return f"<figure>{chart}<figcaption>{note}</figcaption></figure>"


def languages_section(clean: dict[str, Any], thresholds: dict[str, Any]) -> str:
    rows = clean["languages"]
    if not rows:
        return "<p>No documents reached the clean stage.</p>"
    series = [("kept", KEPT, [r["kept"] for r in rows]), ("rejected", REJECTED, [r["rejected"] for r in rows])]
    chart = bar_chart("languages", "Language distribution (clean stage, fastText lid)", "language",
                      "documents", [r["lang"] for r in rows], series)
    allowed = thresholds.get("languages")
    note = f"allowed languages: {', '.join(allowed) if allowed else 'any'}" if allowed is not None else ""
    parts = [f"<figure>{chart}{legend(series)}<figcaption>{esc(note)}</figcaption></figure>"]
    if clean["lang_score"]["n"]:
        marks = ([{"value": thresholds["lang_score"], "kind": "min", "rule": "langid.threshold",
                  "label": "langid.threshold"}]
                 if thresholds.get("lang_score") is not None else [])
        parts.append(histogram_plot("lang_score", "Language-ID score", "lang_score",
                                    clean["lang_score"], marks))
    return "".join(parts)


def signals_section(clean: dict[str, Any], thresholds: dict[str, Any]) -> str:
    by_table, marks_by_table = clean.get("signals_by_table"), thresholds.get("signals_by_table")
    if by_table and marks_by_table is not None:
        return _signals_by_table(by_table, marks_by_table, thresholds)
    figures = [histogram_plot(f"signal-{name}", name, name, hist, thresholds["signals"].get(name, ()))
               for name, hist in clean["signals"].items()]
    if not figures:
        return "<p>No quality signals were recorded.</p>"
    langs = thresholds.get("rules_languages")
    note = (f"<p>Rules apply to {esc(', '.join(langs) or 'every language')}; dashed grey lines "
            "are thresholds of switched-off rule families.</p>") if langs is not None else \
        "<p>No config given: thresholds are not marked.</p>"
    note += _NO_SIGNALS_NOTE
    return note + '<div class="grid">' + "".join(figures) + "</div>"


_NO_SIGNALS_NOTE = ("<p>Documents that language ID dropped have no signals or scores (nothing after it "
                    "could keep them) and are not in these histograms.</p>")


def _signals_by_table(by_table: dict[str, Any], marks_by_table: dict[str, Any], thresholds: dict[str, Any]) -> str:
    """One grid per rule table, each over the documents judged by it with its own
    thresholds: English (the configured thresholds) open, the other languages folded."""
    langs = thresholds.get("rules_languages") or []
    parts = [f"<p>Each language is judged by its own thresholds (the configured ones mapped by its fitted "
             f"table, transforms/clean/language_rules.py); each grid shows the documents of one table with "
             f"its thresholds. Rules apply to {esc(', '.join(langs) or 'every language')}; dashed grey "
             "lines are thresholds of switched-off rule families.</p>" + _NO_SIGNALS_NOTE]
    for group, data in by_table.items():
        marks = marks_by_table.get(group, {}) if group != "other" else {}
        if group == "other":
            what = ("languages without a table of their own: each document is judged by its script's "
                    "default table (English's for Latin script), so no threshold is drawn")
        elif not marks:
            what = "not checked by the rules (clean.rules_languages)"
        elif group == "en":
            what = "English: the configured thresholds"
        else:
            what = f"{group}: its own table's thresholds"
        figures = "".join(
            histogram_plot(f"signal-{name}" if group == "en" else f"signal-{group}-{name}",
                           name if group == "en" else f"{name} ({group})", name, hist, marks.get(name, ()))
            for name, hist in data["signals"].items())
        title = f"{esc(what)}: {data['docs']:,} documents"
        grid = f'<div class="grid">{figures}</div>'
        parts.append(f"<h3>{title}</h3>{grid}" if group == "en"
                     else f'<details data-table="{esc(group)}"><summary>{title}</summary>{grid}</details>')
    return "".join(parts)


def components_section(comp: dict[str, Any]) -> str:
    sizes = comp["sizes"]
    if not sizes:
        return "<p>No documents reached near-duplicate detection.</p>"
    labels = list(sizes)
    series = [("components", PALETTE[0], [sizes[k] for k in labels])]
    chart = bar_chart("dedup_components", "Near-duplicate component sizes (MinHash-LSH)",
                      "documents in the component", "components", labels, series)
    note = (f"{comp['components']:,} components, largest {comp['largest']:,} documents"
            + ("; counting stopped at the component limit" if comp["truncated"] else ""))
    return f"<figure>{chart}<figcaption>{esc(note)}</figcaption></figure>"


def labels_section(labels: dict[str, Any]) -> str:
    colours = {"human": KEPT, "model": PALETTE[0], "model, uncertain": REJECTED}
    parts = []
    for name, data in labels["sets"].items():
        series = [(k, colours.get(k, PALETTE[i % len(PALETTE)]), v)
                  for i, (k, v) in enumerate(data["counts"].items())]
        chart = bar_chart(f"labels-{name}", f"Label set {name}: values", "value", "documents",
                          data["values"], series)
        parts.append(f"<figure>{chart}{legend(series)}</figure>")
        if data["confidence"] and data["confidence"]["n"]:
            marks = ([{"value": data["accept_threshold"], "kind": "min", "rule": "accept_threshold",
                       "label": "accept_threshold"}] if data["accept_threshold"] is not None else [])
            parts.append(histogram_plot(f"label-confidence-{name}", f"Label set {name}: model confidence "
                                        "(calibrated)", "confidence", data["confidence"], marks))
    return "".join(parts) or "<p>No labels.</p>"


def tokens_section(tokens: dict[str, Any]) -> str:
    shards = tokens["shards"]
    if not shards:
        return f"<p>Version {esc(tokens['version'])} has no shards.</p>"
    values = [s["num_tokens"] for s in shards]
    if len(shards) <= 64:
        labels = [str(i) for i in range(len(shards))]
        chart = bar_chart("tokens_per_shard", "Tokens per shard", "shard (index.json order)", "tokens",
                          labels, [("tokens", PALETTE[0], values)])
    else:
        top = max(values) or 1
        edges = [top * i / 40 for i in range(41)]
        counts = [0] * 40
        for v in values:
            counts[min(int(v / top * 40), 39)] += 1
        chart = bar_chart("tokens_per_shard", "Tokens per shard (histogram)", "tokens in the shard",
                          "shards", [fmt(e) for e in edges[:-1]], [("shards", PALETTE[0], counts)])
    note = (f"version {tokens['version']}: {len(shards):,} shards, {sum(values):,} tokens, "
            f"{sum(s['num_docs'] for s in shards):,} documents ({tokens['dtype']})")
    return f"<figure>{chart}<figcaption>{esc(note)}</figcaption></figure>"


CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1360px}
h1{font-size:22px}h2{font-size:18px;margin-top:32px;border-bottom:1px solid #ddd}
figure{margin:8px 0 16px;display:inline-block;width:640px;max-width:100%;vertical-align:top}
svg.plot{width:100%;height:auto;background:#fff;border:1px solid #eee}
svg .t{font-size:14px;font-weight:600}svg .tick{font-size:10px;fill:#555}
svg .label{font-size:12px}svg .mark{font-size:10px}svg .gl{stroke:#eee}
svg .axis{stroke:#444;fill:none}figcaption{font-size:12px;color:#555}
.legend span{margin-right:12px;font-size:12px;white-space:nowrap}
.legend i{display:inline-block;width:10px;height:10px;margin-right:4px}
.grid{display:flex;flex-wrap:wrap;gap:8px}.grid figure{width:440px}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ddd;padding:3px 6px;text-align:right}
td:first-child,td:nth-child(n+6){text-align:left}.ok{color:#2a7a2a}.bad{color:#b00;font-weight:600}
nav.toc{position:sticky;top:0;background:#fafafa;border:1px solid #ddd;padding:4px 10px;font-size:13px;z-index:1}
nav.toc ol{display:inline;margin:0;padding:0}nav.toc li{display:inline;margin-left:14px}
h2{scroll-margin-top:40px}.runtime{font-size:15px}
"""


def _table(rows: list[dict[str, Any]]) -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in ("score", *DETECTOR_FIELDS, "status", "document"))
    body = []
    for r in rows:
        cells = [fmt(r["score"]), *(fmt(r["scores"].get(n)) for n in DETECTOR_FIELDS), esc(r["status"])]
        body.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells)
                    + f"<td style=\"text-align:left\"><b>{esc(r['url'] or r['id'])}</b><br>{esc(r['snippet'])}</td></tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def anomaly_html(anomaly: Optional[dict[str, Any]], thresholds: dict[str, Any]) -> str:
    """Each detector's histogram with its threshold, then the two tables."""
    if not anomaly or not anomaly["histograms"]["combined"]["n"]:
        return "<p>No anomaly scores (no anomaly model configured).</p>"
    marks = thresholds.get("anomaly_detectors") or {}
    titles = {"combined": "Combined anomaly score (decides)",
              "perplexity": "Language-model perplexity (NLL per byte, centred per language)",
              "representation": "Representation (autoencoder over the LM's mean hidden state)",
              "signals": "Signals (autoencoder over the quality signals)",
              "context": "Context (LM NLL per byte minus unigram NLL per byte, centred per language)",
              "cohesion": "Cohesion (sentences sharing no content word with the two before, centred per language)",
              "language_mix": "Language mix (sentences in another language than the document, centred per language)"}
    figures = []
    for name, hist in anomaly["histograms"].items():
        value = marks.get(name)
        label = "anomaly threshold" if name == "combined" else "flag-rate quantile"
        mark = [{"value": value, "kind": "max", "rule": f"anomaly.{name}", "label": label}] if value is not None else []
        figures.append(histogram_plot("anomaly" if name == "combined" else f"anomaly-{name}", titles[name],
                                      "standardised score" if name != "combined" else "anomaly_score", hist, mark))
    only = anomaly["caught_only_by_detector"]
    rare = anomaly.get("without_language_terms") or {}
    rare_note = ("<p>Left to the rules (no detector scores them: their language had too few reference "
                 "documents for a centre of its own): "
                 + ", ".join(f"{esc(lang)} {n:,}" for lang, n in rare.items())
                 + " documents (train with more reference text in these languages to judge them fully).</p>"
                 if rare else "")
    return ('<div class="grid">' + "".join(figures) + "</div>" + rare_note
            + f"<h3>Highest-scoring documents (top {len(anomaly['top'])})</h3>" + _table(anomaly["top"])
            + f"<h3>Caught only by the detector: {anomaly['caught_only_count']:,} documents that language "
              f"ID and every rule passed (top {len(only)})</h3>"
            + (_table(only) if only else "<p>None.</p>"))


def render_html(report: dict[str, Any]) -> str:
    """The whole page for a ``build_report`` result."""
    th, clean = report["thresholds"], report.get("clean")
    sections = [("funnel", "Funnel", funnel_section(report["stages"])),
                ("throughput", "Throughput", throughput_section(report["stages"]))]
    if clean is not None:
        sections += [("languages", "Languages", languages_section(clean, th)),
                     ("signals", "Quality signals", signals_section(clean, th)),
                     ("anomaly", "Anomaly detector", anomaly_html(report.get("anomaly"), th))]
    if report.get("dedup_components"):
        sections.append(("components", "Near-duplicate components", components_section(report["dedup_components"])))
    if report.get("labels"):
        sections.append(("labels", "Labels", labels_section(report["labels"])))
    if report.get("augment"):
        sections.append(("augment", "Augmentation", augment_html(report["augment"])))
    if report.get("tokens"):
        sections.append(("tokens", "Tokens per shard", tokens_section(report["tokens"])))
    toc = ('<nav class="toc" aria-label="contents"><b>Contents</b><ol>'
           + "".join(f'<li><a href="#s-{key}">{esc(title)}</a></li>' for key, title, _ in sections)
           + "</ol></nav>")
    parts = [toc, run_time_line(report.get("run_time"))]
    parts += [f'<h2 id="s-{key}">{esc(title)}</h2>{body}' for key, title, body in sections]
    config = f", config {esc(report['config'])}" if report.get("config") else ", no config (no thresholds)"
    return ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<link rel=\"icon\" href=\"data:,\"><title>tokenfactory run report</title>"
            f"<style>{CSS}</style></head><body><h1>Run report</h1>"
            f"<p>Output {esc(report['output'])}{config}; generated {esc(report['generated_at'])}. "
            "The numbers are in report.json beside this page.</p>"
            + "".join(parts) + "</body></html>\n")
