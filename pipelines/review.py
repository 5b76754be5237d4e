"""The human review loop: review queues out, reviewed labels back in.

Layout under the job output:

    review/queue-<time>/tasks.json        Label Studio import (tasks with predictions)
    review/queue-<time>/tasks.jsonl       the same tasks, plain JSONL (our review page reads it)
    review/queue-<time>/label_config.xml  the Label Studio labelling config of the taxonomy
    review/reviews/<import>.jsonl         accepted human labels (one document, one label set)
    review/set_aside/<import>.jsonl       reviews kept aside, each with its reason

Commands:

    python -m pipelines.review import --config CFG FILE [FILE ...]
        Label Studio export JSON (``[{"id", "data", "annotations": [...]}]``) or our JSONL
        (``{"task_id", "labels": {set: value}, "reviewer", "reviewed_at"}``), merged with
        the reviews already accepted. Unknown task ids, label sets or values outside the
        taxonomy, cancelled or empty annotations, duplicates and conflicting reviews are
        counted and kept aside in ``review/set_aside/``; nothing is dropped silently. The
        next run of the ``label`` stage applies the accepted reviews (the human label
        overrides the model's, with reviewer, time and model version).

    python -m pipelines.review serve --queue DIR_OR_TASKS_JSONL --out ANSWERS.jsonl
        [--reviewer NAME] [--port 8766]
        A review page on 127.0.0.1 for reviewers without Label Studio: one document at a
        time with the model's suggestion; Enter accepts, a value key (shown beside each
        value) corrects, arrows move between label sets and tasks. Answers are written to
        ``--out`` in the JSONL import format above (one line per task, rewritten
        atomically after every answer, so a killed server loses nothing).
"""

from __future__ import annotations

import argparse
import html
import json
import logging
import os
import sys
import threading
from dataclasses import asdict
from datetime import datetime, timezone
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterable, Iterator, Optional, Sequence
from xml.sax.saxutils import quoteattr

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from transforms.doc import Doc
from transforms.label.label import LabelConfig, Review, uncertainty

_LOGGER = logging.getLogger(__name__)

TEXT_LIMIT = 20_000  # characters of a document shown to reviewers
KEYS = "1234567890qwertyuiopasdfghjklzxcvbnm"  # value hotkeys on the review page


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


# ---------------------------------------------------------------- queue (pure)

def label_studio_config(config: LabelConfig) -> str:
    """Label Studio labelling config: the text and one single-choice control per set."""
    lines = ['<View>', '  <Text name="text" value="$text"/>']
    for spec in config.sets:
        lines.append(f'  <Header value={quoteattr(spec.name)}/>')
        lines.append(f'  <Choices name={quoteattr(spec.name)} toName="text" choice="single" required="false">')
        lines.extend(f'    <Choice value={quoteattr(v)}/>' for v in spec.values)
        lines.append('  </Choices>')
    lines.append('</View>')
    return "\n".join(lines) + "\n"


def review_task(doc: Doc, config: LabelConfig) -> dict[str, Any]:
    """Our JSONL task for ``doc``: text, the model's suggestions and the taxonomy."""
    names = {s.name for s in config.sets}
    suggestions = {lab.name: {"value": lab.value, "score": lab.score, "version": lab.version}
                   for lab in doc.labels if lab.name in names and lab.origin == "model"}
    return {
        "task_id": doc.id, "doc_id": doc.id, "url": doc.url, "title": doc.title,
        "text": doc.text[:TEXT_LIMIT], "text_truncated": len(doc.text) > TEXT_LIMIT,
        "suggestions": suggestions,
        "taxonomy": {s.name: list(s.values) for s in config.sets},
        "uncertainty": uncertainty(doc, config),
    }


def label_studio_task(task: dict[str, Any]) -> dict[str, Any]:
    """The Label Studio import form of one of our tasks (suggestions as predictions)."""
    result = [{"id": f"{name}-pred", "from_name": name, "to_name": "text", "type": "choices",
               "value": {"choices": [s["value"]]}} for name, s in task["suggestions"].items()]
    versions = sorted({s["version"] for s in task["suggestions"].values()})
    scores = [s["score"] for s in task["suggestions"].values()]
    return {
        "data": {"text": task["text"], "task_id": task["task_id"], "doc_id": task["doc_id"],
                 "url": task["url"], "title": task["title"]},
        "predictions": [{"model_version": ",".join(versions), "score": min(scores) if scores else 0.0,
                         "result": result}],
    }


def write_text(path: str, text: str) -> None:
    """Writes ``path`` (local or object store) under a temporary name first."""
    tmp = path + ".tmp"
    with FileSystems.create(tmp, compression_type=CompressionTypes.UNCOMPRESSED) as fh:
        fh.write(text.encode("utf-8"))
    FileSystems.rename([tmp], [path])


def write_queue(directory: str, docs: Sequence[Doc], config: LabelConfig) -> dict[str, Any]:
    """The three queue files for ``docs`` (most important first); ``tasks.jsonl`` last."""
    tasks = [review_task(d, config) for d in docs]
    join = FileSystems.join
    write_text(join(directory, "label_config.xml"), label_studio_config(config))
    write_text(join(directory, "tasks.json"),
               json.dumps([label_studio_task(t) for t in tasks], ensure_ascii=False, indent=1))
    write_text(join(directory, "tasks.jsonl"),
               "".join(json.dumps(t, ensure_ascii=False) + "\n" for t in tasks))
    return {"directory": directory, "tasks": len(tasks)}


# ---------------------------------------------------------------- reading back

def _read_lines(path: str) -> Iterator[str]:
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as fh:
        for line in fh.read().decode("utf-8").splitlines():
            if line.strip():
                yield line


def _match(pattern: str) -> list[str]:
    try:
        return sorted(m.path for m in FileSystems.match([pattern])[0].metadata_list
                      if not m.path.endswith(".tmp"))
    except Exception:  # nothing there yet
        return []


def review_dir(output: str) -> str:
    return FileSystems.join(output, "review")


def queued_tasks(output: str) -> dict[str, dict[str, Any]]:
    """Every task ever queued under ``output`` (task id → task; the newest queue wins)."""
    tasks: dict[str, dict[str, Any]] = {}
    for path in _match(FileSystems.join(review_dir(output), "queue-*", "tasks.jsonl")):
        for line in _read_lines(path):
            task = json.loads(line)
            tasks[task["task_id"]] = task
    return tasks


def review_files(output: str) -> list[str]:
    return _match(FileSystems.join(review_dir(output), "reviews", "*.jsonl"))


def load_reviews(output: str) -> list[Review]:
    """Every accepted review under ``output``."""
    return [Review(**json.loads(line)) for path in review_files(output) for line in _read_lines(path)]


def accepted_reviews(config: Any) -> list[dict[str, str]]:
    """Accepted reviews as dicts (for the retrain command)."""
    return [asdict(r) for r in load_reviews(config.output)]


def doc_texts(config: Any, ids: Iterable[str]) -> dict[str, str]:
    """Texts of the documents ``ids`` from the label stage's output (else the last
    document stage before it)."""
    from pipelines.corpus import iter_docs, stage_doc_files
    from storage.manifest import read_manifest

    wanted = set(ids)
    stages = [s for s in ("label", "dedup_minhash", "dedup_exact", "clean", "extract")
              if read_manifest(config.output, s) is not None]
    if not stages:
        raise FileNotFoundError(f"no document stage has run under {config.output}")
    found: dict[str, str] = {}
    for stage in stages:  # the latest text of each document (clean redacts PII)
        for doc in iter_docs(stage_doc_files(config, stage)):
            if doc.id in wanted and doc.id not in found:
                found[doc.id] = doc.text
        if len(found) == len(wanted):
            break
    return found


# ---------------------------------------------------------------- import (pure)

def parse_label_studio(tasks: Any, source: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(candidate reviews, problems) of a Label Studio export: one candidate per
    annotation and label set."""
    candidates, problems = [], []
    if not isinstance(tasks, list):
        return [], [{"reason": "not_a_task_list", "source": source, "raw": str(tasks)[:2000]}]
    for i, task in enumerate(tasks):
        data = task.get("data") if isinstance(task, dict) else None
        if not isinstance(data, dict):
            problems.append({"reason": "malformed_task", "source": f"{source}[{i}]", "raw": task})
            continue
        task_id = str(data.get("task_id") or data.get("doc_id") or "")
        annotations = task.get("annotations") or []
        if not annotations:
            problems.append({"reason": "not_annotated", "source": f"{source}[{i}]", "task_id": task_id})
        for j, ann in enumerate(annotations):
            where = f"{source}[{i}].annotations[{j}]"
            if not isinstance(ann, dict):
                problems.append({"reason": "malformed_annotation", "source": where, "task_id": task_id, "raw": ann})
                continue
            who = ann.get("completed_by")
            reviewer = str(who.get("email") or who.get("id")) if isinstance(who, dict) else str(who or "")
            when = str(ann.get("updated_at") or ann.get("created_at") or "")
            if ann.get("was_cancelled"):
                problems.append({"reason": "cancelled", "source": where, "task_id": task_id,
                                 "reviewer": reviewer})
                continue
            results = [r for r in ann.get("result") or [] if isinstance(r, dict)]
            if not results:
                problems.append({"reason": "empty_annotation", "source": where, "task_id": task_id,
                                 "reviewer": reviewer})
            for r in results:
                choices = (r.get("value") or {}).get("choices") if isinstance(r.get("value"), dict) else None
                if r.get("type") != "choices" or not isinstance(choices, list) or len(choices) != 1:
                    problems.append({"reason": "not_a_single_choice", "source": where, "task_id": task_id,
                                     "reviewer": reviewer, "raw": r})
                    continue
                candidates.append({"task_id": task_id, "set": str(r.get("from_name", "")),
                                   "value": str(choices[0]), "reviewer": reviewer,
                                   "reviewed_at": when, "source": where})
    return candidates, problems


def parse_jsonl(lines: Iterable[str], source: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(candidate reviews, problems) of our JSONL answers (the review page's output)."""
    candidates, problems = [], []
    for number, line in enumerate(lines, 1):
        where = f"{source}:{number}"
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            problems.append({"reason": "not_json", "source": where, "raw": line[:2000], "error": str(exc)})
            continue
        labels = row.get("labels") if isinstance(row, dict) else None
        if not isinstance(labels, dict) or not isinstance(row.get("task_id"), str):
            problems.append({"reason": "malformed_answer", "source": where, "raw": row})
            continue
        for name, value in labels.items():
            candidates.append({"task_id": row["task_id"], "set": str(name), "value": str(value),
                               "reviewer": str(row.get("reviewer") or ""),
                               "reviewed_at": str(row.get("reviewed_at") or ""), "source": where})
    return candidates, problems


def merge_reviews(candidates: Sequence[dict[str, Any]], tasks: dict[str, dict[str, Any]],
                  config: LabelConfig, existing: Sequence[Review]) -> tuple[list[Review], list[dict[str, Any]]]:
    """(accepted, set aside): validates candidate reviews against the queued tasks, the
    taxonomy and the reviews accepted before.

    * unknown task id, unknown label set, value outside the taxonomy: set aside;
    * the same (task, set, value) more than once (here or already accepted): one counts,
      the rest are set aside as ``duplicate``;
    * different values for one (task, set) in this import: all set aside as
      ``conflict`` (a person adjudicates); a value different from an accepted earlier
      review: set aside as ``conflicts_with_accepted``.
    """
    taxonomy = {s.name: set(s.values) for s in config.sets}
    accepted_before = {(r.task_id, r.set): r.value for r in existing}
    aside: list[dict[str, Any]] = []
    valid: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for c in candidates:
        task = tasks.get(c["task_id"])
        if task is None:
            aside.append({**c, "reason": "unknown_task"})
        elif c["set"] not in taxonomy:
            aside.append({**c, "reason": "unknown_label_set"})
        elif c["value"] not in taxonomy[c["set"]]:
            aside.append({**c, "reason": "value_outside_taxonomy"})
        else:
            valid.setdefault((c["task_id"], c["set"]), []).append(c)
    accepted: list[Review] = []
    for key, group in valid.items():
        values = {c["value"] for c in group}
        if len(values) > 1:
            aside.extend({**c, "reason": "conflict"} for c in group)
            continue
        first, rest = group[0], group[1:]
        aside.extend({**c, "reason": "duplicate"} for c in rest)
        before = accepted_before.get(key)
        if before is not None:
            reason = "duplicate" if before == first["value"] else "conflicts_with_accepted"
            aside.append({**first, "reason": reason})
            continue
        task = tasks[first["task_id"]]
        suggestion = task.get("suggestions", {}).get(first["set"], {})
        accepted.append(Review(task_id=first["task_id"], doc_id=task.get("doc_id", first["task_id"]),
                               set=first["set"], value=first["value"], reviewer=first["reviewer"],
                               reviewed_at=first["reviewed_at"] or utc_now(),
                               model_version=suggestion.get("version", ""),
                               model_value=suggestion.get("value", "")))
    return accepted, aside


def count_by_reason(aside: Sequence[dict[str, Any]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for row in aside:
        counts[row["reason"]] = counts.get(row["reason"], 0) + 1
    return dict(sorted(counts.items()))


def import_reviews(config: Any, files: Sequence[str]) -> dict[str, Any]:
    """Parses, validates and stores reviews; returns the counts (also printed by the CLI)."""
    if config.label is None:
        raise ValueError(f"{config.source_file}: no label: section")
    candidates: list[dict[str, Any]] = []
    problems: list[dict[str, Any]] = []
    for path in files:
        with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as fh:
            raw = fh.read().decode("utf-8", errors="replace")
        if path.endswith(".jsonl") or not raw.lstrip().startswith("["):
            c, p = parse_jsonl(raw.splitlines(), path)
        else:
            try:
                c, p = parse_label_studio(json.loads(raw), path)
            except ValueError as exc:
                c, p = [], [{"reason": "not_json", "source": path, "error": str(exc), "raw": raw[:2000]}]
        candidates += c
        problems += p
    tasks = queued_tasks(config.output)
    accepted, aside = merge_reviews(candidates, tasks, config.label, load_reviews(config.output))
    aside = problems + aside
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%f")
    base = review_dir(config.output)
    if aside:
        write_text(FileSystems.join(base, "set_aside", f"{stamp}.jsonl"),
                   "".join(json.dumps(a, ensure_ascii=False, default=str) + "\n" for a in aside))
    if accepted:
        write_text(FileSystems.join(base, "reviews", f"{stamp}.jsonl"),
                   "".join(json.dumps(asdict(r), ensure_ascii=False) + "\n" for r in accepted))
    corrected = sum(1 for r in accepted if r.model_value and r.model_value != r.value)
    return {"files": list(files), "candidates": len(candidates), "accepted": len(accepted),
            "accepted_model_agreed": len(accepted) - corrected, "accepted_corrected": corrected,
            "set_aside": len(aside), "set_aside_by_reason": count_by_reason(aside),
            "known_tasks": len(tasks)}


# ---------------------------------------------------------------- review page

def load_queue(path: str) -> list[dict[str, Any]]:
    """Tasks of a queue directory or ``tasks.jsonl`` file."""
    if not path.endswith(".jsonl"):
        path = FileSystems.join(path, "tasks.jsonl")
    return [json.loads(line) for line in _read_lines(path)]


class ReviewSession:
    """The review page's state: the tasks, and the answers file rewritten after each answer."""

    def __init__(self, tasks: Sequence[dict[str, Any]], out: str, reviewer: str) -> None:
        self.tasks = list(tasks)
        self.by_id = {t["task_id"]: t for t in self.tasks}
        self.out = out
        self.reviewer = reviewer
        self.lock = threading.Lock()
        self.answers: dict[str, dict[str, Any]] = {}
        if os.path.exists(out):  # resume: answers already given stay given
            with open(out, encoding="utf-8") as fh:
                for number, line in enumerate(fh, 1):
                    try:
                        row = json.loads(line)
                        if row["task_id"] in self.by_id:
                            self.answers[row["task_id"]] = row
                    except (ValueError, KeyError, TypeError):
                        _LOGGER.warning("%s:%d: not an answer line, ignored", out, number)

    def answer(self, task_id: str, labels: dict[str, str]) -> dict[str, Any]:
        task = self.by_id.get(task_id)
        if task is None:
            raise KeyError(f"unknown task {task_id!r}")
        for name, value in labels.items():
            if value not in task["taxonomy"].get(name, ()):
                raise ValueError(f"{name}={value!r} is not in the taxonomy")
        suggestions = task.get("suggestions", {})
        row = {"task_id": task_id, "doc_id": task["doc_id"], "labels": labels,
               "reviewer": self.reviewer, "reviewed_at": utc_now(),
               "model_labels": {k: v["value"] for k, v in suggestions.items()},
               "model_versions": {k: v["version"] for k, v in suggestions.items()},
               "corrected": sorted(k for k, v in labels.items()
                                   if k in suggestions and suggestions[k]["value"] != v)}
        with self.lock:
            self.answers[task_id] = row
            tmp = self.out + ".tmp"
            with open(tmp, "w", encoding="utf-8") as fh:
                for t in self.tasks:
                    if t["task_id"] in self.answers:
                        fh.write(json.dumps(self.answers[t["task_id"]], ensure_ascii=False) + "\n")
            os.replace(tmp, self.out)
        return self.progress()

    def progress(self) -> dict[str, int]:
        return {"done": len(self.answers), "total": len(self.tasks)}

    def state(self) -> dict[str, Any]:
        return {"tasks": self.tasks, "answers": self.answers, "keys": KEYS, "reviewer": self.reviewer,
                **self.progress()}


PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>tokenfactory review</title>
<style>
body{font:15px/1.45 system-ui,sans-serif;margin:0;background:#f6f6f4;color:#222}
header{display:flex;gap:1em;align-items:center;padding:.6em 1em;background:#233;color:#fff}
header .grow{flex:1} #bar{height:6px;background:#ccc} #bar div{height:6px;background:#2a7}
main{display:grid;grid-template-columns:1fr 22em;gap:1em;padding:1em}
#doc{background:#fff;padding:1em;border:1px solid #ddd;white-space:pre-wrap;max-height:75vh;overflow:auto}
.set{background:#fff;border:1px solid #ddd;padding:.5em;margin-bottom:.6em}
.set.active{border-color:#27a;box-shadow:0 0 0 2px #27a5}
.set h3{margin:.1em 0 .4em;font-size:14px}
.choice{display:block;width:100%;text-align:left;margin:2px 0;padding:3px 6px;border:1px solid #ccc;
 background:#fafafa;cursor:pointer;font:inherit}
.choice.suggested{border-color:#999;font-style:italic}
.choice.chosen{background:#2a7;color:#fff;border-color:#2a7}
kbd{display:inline-block;min-width:1.2em;text-align:center;border:1px solid #aaa;border-radius:3px;
 font-size:12px;margin-right:.4em;background:#fff;color:#333}
#help{font-size:13px;color:#555} #done{padding:2em;font-size:18px}
</style></head><body>
<header><strong>Review</strong><span id="where"></span><span class="grow"></span>
<span id="progress" data-testid="progress"></span><span id="who"></span></header>
<div id="bar"><div style="width:0"></div></div>
<main id="main"><div><div id="meta"></div><div id="doc" data-testid="doc"></div></div>
<aside><div id="sets"></div><button id="submit" class="choice">Submit <kbd>Enter</kbd></button>
<p id="help"><kbd>Enter</kbd> accept the suggestions (or your choices) and go on ·
value keys correct the active set · <kbd>&uarr;</kbd><kbd>&darr;</kbd> change set ·
<kbd>&larr;</kbd><kbd>&rarr;</kbd> previous / next task</p></aside></main>
<div id="done" hidden>All tasks reviewed. The answers file can be imported with
<code>python -m pipelines.review import</code>.</div>
<script>
"use strict";
let S = null, cur = 0, active = 0, chosen = {};
const $ = (id) => document.getElementById(id);
function el(tag, cls, text) { const e = document.createElement(tag); if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text; return e; }
function task() { return S.tasks[cur]; }
function setNames() { return Object.keys(task().taxonomy); }
function firstOpen(from) { for (let i = from; i < S.tasks.length; i++)
  if (!S.answers[S.tasks[i].task_id]) return i; return -1; }
function show() {
  $("progress").textContent = S.done + " / " + S.total + " reviewed";
  $("bar").firstElementChild.style.width = (S.total ? 100 * S.done / S.total : 100) + "%";
  $("who").textContent = S.reviewer;
  if (cur < 0 || cur >= S.tasks.length) { $("main").hidden = true; $("done").hidden = false; return; }
  $("main").hidden = false; $("done").hidden = true;
  const t = task();
  $("where").textContent = "task " + (cur + 1) + " of " + S.tasks.length;
  $("meta").textContent = (t.title ? t.title + " — " : "") + (t.url || t.doc_id);
  $("doc").textContent = t.text + (t.text_truncated ? "\\n[… cut]" : "");
  const box = $("sets"); box.replaceChildren();
  setNames().forEach((name, si) => {
    const sug = (t.suggestions[name] || {});
    const div = el("div", "set" + (si === active ? " active" : ""));
    div.dataset.set = name;
    const h = el("h3", null, name + (sug.value ? " — model: " + sug.value + " (" +
      Math.round(100 * sug.score) + "%)" : ""));
    div.appendChild(h);
    t.taxonomy[name].forEach((v, vi) => {
      const b = el("button", "choice"); b.dataset.value = v;
      if (vi < S.keys.length) b.appendChild(el("kbd", null, S.keys[vi]));
      b.appendChild(document.createTextNode(v));
      if (sug.value === v) b.classList.add("suggested");
      if ((chosen[name] || sug.value) === v) b.classList.add("chosen");
      b.addEventListener("click", () => { choose(si, v); });
      div.appendChild(b);
    });
    box.appendChild(div);
  });
}
function choose(si, value) { chosen[setNames()[si]] = value;
  active = Math.min(si + 1, setNames().length - 1); show(); }
async function submit() {
  const t = task(), labels = {};
  for (const name of setNames()) {
    const v = chosen[name] || (t.suggestions[name] || {}).value;
    if (!v) { active = setNames().indexOf(name); show(); return; }
    labels[name] = v;
  }
  const r = await fetch("/api/answer", {method: "POST", headers: {"Content-Type": "application/json"},
    body: JSON.stringify({task_id: t.task_id, labels: labels})});
  if (!r.ok) { alert("not saved: " + await r.text()); return; }
  const p = await r.json(); S.done = p.done; S.answers[t.task_id] = {labels: labels};
  chosen = {}; active = 0;
  const next = firstOpen(cur + 1); cur = next >= 0 ? next : firstOpen(0);
  show();
}
function move(step) { if (cur < 0) cur = 0; cur = Math.max(0, Math.min(S.tasks.length - 1, cur + step));
  chosen = {}; active = 0; show(); }
document.addEventListener("keydown", (e) => {
  if (!S || e.ctrlKey || e.metaKey || e.altKey) return;
  if (e.key === "Enter") { e.preventDefault(); if (cur >= 0) submit(); return; }
  if (e.key === "ArrowRight") { move(1); return; }
  if (e.key === "ArrowLeft") { move(-1); return; }
  if (cur < 0) return;
  if (e.key === "ArrowDown") { active = Math.min(active + 1, setNames().length - 1); show(); return; }
  if (e.key === "ArrowUp") { active = Math.max(active - 1, 0); show(); return; }
  const k = S.keys.indexOf(e.key.toLowerCase());
  const values = task().taxonomy[setNames()[active]];
  if (k >= 0 && k < values.length) { e.preventDefault(); choose(active, values[k]); }
});
$("submit").addEventListener("click", submit);
fetch("/api/state").then((r) => r.json()).then((s) => { S = s; cur = firstOpen(0); show();
  document.body.dataset.ready = "1"; });
</script></body></html>
"""


def make_handler(session: ReviewSession) -> type:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, fmt: str, *args: Any) -> None:
            _LOGGER.debug("review page: " + fmt, *args)

        def _send(self, status: int, body: bytes, kind: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def _json(self, status: int, data: Any) -> None:
            self._send(status, json.dumps(data, ensure_ascii=False).encode("utf-8"), "application/json")

        def do_GET(self) -> None:
            if self.path in ("/", "/index.html"):
                self._send(HTTPStatus.OK, PAGE.encode("utf-8"), "text/html; charset=utf-8")
            elif self.path == "/api/state":
                self._json(HTTPStatus.OK, session.state())
            elif self.path == "/favicon.ico":
                self._send(HTTPStatus.NO_CONTENT, b"", "image/x-icon")
            else:
                self._send(HTTPStatus.NOT_FOUND, b"not found", "text/plain")

        def do_POST(self) -> None:
            if self.path != "/api/answer":
                self._send(HTTPStatus.NOT_FOUND, b"not found", "text/plain")
                return
            try:
                length = int(self.headers.get("Content-Length") or 0)
                if not 0 <= length <= 1 << 20:
                    raise ValueError("answer missing or too large")
                body = json.loads(self.rfile.read(length))
                labels = body.get("labels")
                if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
                    raise ValueError("labels must map label sets to values")
                self._json(HTTPStatus.OK, session.answer(str(body.get("task_id")), labels))
            except (ValueError, KeyError) as exc:
                self._send(HTTPStatus.BAD_REQUEST, html.escape(str(exc)).encode(), "text/plain")

    return Handler


def serve(session: ReviewSession, port: int = 8766, host: str = "127.0.0.1") -> ThreadingHTTPServer:
    """A started review server (call ``shutdown()`` to stop); port 0 picks a free one."""
    server = ThreadingHTTPServer((host, port), make_handler(session))
    threading.Thread(target=server.serve_forever, daemon=True, name="review-page").start()
    return server


# ---------------------------------------------------------------- CLI

def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipelines.review", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    imp = sub.add_parser("import", help="merge reviewed tasks back")
    imp.add_argument("--config", required=True)
    imp.add_argument("files", nargs="+")
    srv = sub.add_parser("serve", help="the local review page")
    srv.add_argument("--queue", required=True, help="review/queue-<time>/ or its tasks.jsonl")
    srv.add_argument("--out", required=True, help="answers file (JSONL import format)")
    srv.add_argument("--reviewer", default=os.environ.get("USER", "reviewer"))
    srv.add_argument("--port", type=int, default=8766)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, force=True)
    logging.getLogger("apache_beam").setLevel(logging.WARNING)
    if args.command == "import":
        from pipelines.config import ConfigError, configure_filesystems, load_config

        try:
            config = load_config(args.config, check_models=False)
            configure_filesystems(config)
            report = import_reviews(config, args.files)
        except (ConfigError, ValueError, OSError) as exc:
            sys.stderr.write(f"error: {exc}\n")
            return 2
        sys.stdout.write(json.dumps(report, indent=2) + "\n")
        if report["accepted"]:
            sys.stdout.write("run the label stage again to apply them: "
                             f"python -m pipelines.run --config {args.config} --stages label\n")
        return 0
    try:
        tasks = load_queue(args.queue)
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"error: cannot read queue {args.queue}: {exc}\n")
        return 2
    server = serve(ReviewSession(tasks, args.out, args.reviewer), args.port)
    sys.stdout.write(f"review page: http://127.0.0.1:{server.server_address[1]}/  "
                     f"({len(tasks)} tasks, answers to {args.out}); Ctrl-C stops\n")
    sys.stdout.flush()
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
