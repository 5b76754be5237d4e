"""The run report's augmentation part: original vs synthetic documents and tokens, per
template, the rejected generations by reason, and the upsampling rules' repeats.

Documents and characters come from ``docs/augment`` and ``rejected/augment`` (the
``source``, ``provenance``, ``repeats``, ``repeat_rules`` columns and the text length,
batch by batch); tokens from the tokenize stage's manifest (``tokens_original`` and
``tokens_template_<name>`` counters, repeats counted once; ``repeat_tokens``: the extra
copies upsampling adds).
"""

from __future__ import annotations

import html
from collections import Counter
from typing import Any, Optional

import pyarrow.compute as pc

from pipelines.manifest import read_manifest
from pipelines.report_data import iter_batches, stage_files
from transforms.doc import SYNTHETIC_SOURCE

__all__ = ["collect_augment", "augment_html"]

ORIGINAL = "original"
TEMPLATE_COUNTER = "tokens_template_"


def collect_augment(output: str, stage: str = "augment") -> Optional[dict[str, Any]]:
    """None when the stage wrote nothing."""
    kept_files = stage_files(output, "docs", stage)
    if not kept_files:
        return None
    docs: Counter[str] = Counter()
    chars: Counter[str] = Counter()
    rules: dict[str, Counter[str]] = {}
    repeats_total = 0
    for batch in iter_batches(kept_files, ("source", "provenance", "repeats", "repeat_rules", "text")):
        lengths = pc.utf8_length(batch.column("text")).to_pylist()
        for source, prov, repeats, names, n in zip(batch.column("source").to_pylist(),
                                                   batch.column("provenance").to_pylist(),
                                                   batch.column("repeats").to_pylist(),
                                                   batch.column("repeat_rules").to_pylist(), lengths):
            key = (prov or {}).get("template") or "?" if source == SYNTHETIC_SOURCE else ORIGINAL
            docs[key] += 1
            chars[key] += n or 0
            repeats = int(repeats or 1)
            repeats_total += repeats - 1
            for name in names or ():
                rule = rules.setdefault(name, Counter())
                rule["documents"] += 1
                rule["extra_copies"] += repeats - 1
    rejected: dict[str, Counter[str]] = {}
    for batch in iter_batches(stage_files(output, "rejected", stage), ("provenance", "reason")):
        for prov, reason in zip(batch.column("provenance").to_pylist(), batch.column("reason").to_pylist()):
            rejected.setdefault((prov or {}).get("template") or "?", Counter())[str(reason)] += 1
    tokens: dict[str, int] = {}
    repeat_tokens = None
    manifest = read_manifest(output, "tokenize")
    if manifest is not None:
        counters = manifest.extra.get("counters", {})
        for name, value in counters.items():
            if name == "tokens_original":
                tokens[ORIGINAL] = int(value)
            elif name.startswith(TEMPLATE_COUNTER):
                tokens[name[len(TEMPLATE_COUNTER):]] = int(value)
        repeat_tokens = counters.get("repeat_tokens")
    groups = sorted(set(docs) | set(rejected) | set(tokens), key=lambda k: (k != ORIGINAL, k))
    return {
        "stage": stage,
        "rows": [{"group": g, "documents": docs[g], "chars": chars[g], "tokens": tokens.get(g),
                  "rejected": dict(sorted(rejected.get(g, Counter()).items()))} for g in groups],
        "upsample_rules": {name: dict(c) for name, c in sorted(rules.items())},
        "extra_copies": repeats_total,
        "repeat_tokens": repeat_tokens,
    }


def augment_html(augment: dict[str, Any]) -> str:
    """A table: one row for the originals and one per template; then the rules."""
    esc = html.escape
    head = "<tr><th>documents of</th><th>documents</th><th>characters</th><th>tokens</th><th>rejected</th></tr>"
    rows = []
    for r in augment["rows"]:
        tokens = "" if r["tokens"] is None else f"{r['tokens']:,}"
        reasons = ", ".join(f"{esc(k)} {v:,}" for k, v in r["rejected"].items()) or "-"
        label = "original documents" if r["group"] == ORIGINAL else f"synthetic: template {r['group']}"
        rows.append(f"<tr><td>{esc(label)}</td><td>{r['documents']:,}</td><td>{r['chars']:,}</td>"
                    f"<td>{tokens}</td><td style=\"text-align:left\">{reasons}</td></tr>")
    rules = "".join(f"<li>{esc(name)}: {c.get('documents', 0):,} documents, {c.get('extra_copies', 0):,} extra copies</li>"
                    for name, c in augment["upsample_rules"].items())
    repeat = augment.get("repeat_tokens")
    note = (f"<p>Upsampling: {augment['extra_copies']:,} extra copies"
            + (f", {int(repeat):,} repeat tokens per epoch" if repeat is not None else "") + ".</p>")
    return (f"<table>{head}{''.join(rows)}</table>" + note
            + (f"<ul>{rules}</ul>" if rules else ""))
