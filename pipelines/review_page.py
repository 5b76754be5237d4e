"""The review page: a small local web app for reviewers without Label Studio.

``python -m pipelines.review serve`` runs it (see ``pipelines/review.py``). One document at
a time with the model's suggestion per label set; Enter accepts, the key shown beside a
value corrects it, arrows move between label sets and tasks. Every answer rewrites the
answers file (our JSONL import format) atomically, so a killed server loses nothing and
a restarted one resumes. Several servers may share one answers file (two reviewers on one
queue): an answer is written under an exclusive ``flock`` of ``<answers>.lock``, after the
file is read again and merged (what another server wrote stays, label set by label set),
through a temporary file of its own. Before, each server rewrote the file from its own
memory through one fixed ``.tmp`` name: 2 of 4 answers of two servers were lost. The page is one HTML document with inline CSS and JS, no
external resource, and shows document text as text. The HTTP side (a session token,
Host, Origin and content-type checks, timeouts) is ``pipelines.review_server``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import threading
import uuid
from typing import Any, Iterator, Sequence

from pipelines.review_import import utc_now
from storage.redact import redact_url

_LOGGER = logging.getLogger(__name__)

KEYS = "1234567890qwertyuiopasdfghjklzxcvbnm"  # value hotkeys, in taxonomy order


class AnswerError(ValueError):
    """An answer that is not stored: the message says what is wrong with it."""


def check_task(task: Any, where: str) -> None:
    """``ValueError`` naming ``where`` unless ``task`` has what the page and the answers
    need: a string ``task_id`` and ``doc_id`` and a taxonomy of string values."""
    if not isinstance(task, dict):
        raise ValueError(f"{where}: a task must be an object, got {type(task).__name__}")
    for key in ("task_id", "doc_id"):
        if not isinstance(task.get(key), str):
            raise ValueError(f"{where}: {key} must be a string")
    taxonomy = task.get("taxonomy")
    if not isinstance(taxonomy, dict) or not all(
            isinstance(v, list) and all(isinstance(x, str) for x in v) for v in taxonomy.values()):
        raise ValueError(f"{where}: taxonomy must map label sets to lists of values")
    suggestions = task.get("suggestions", {})
    if not isinstance(suggestions, dict) or not all(
            isinstance(v, dict) and "value" in v and "version" in v for v in suggestions.values()):
        raise ValueError(f"{where}: suggestions must map label sets to {{value, version, ...}}")


class ReviewSession:
    """The review page's state: the tasks, and the answers file rewritten after each answer."""

    def __init__(self, tasks: Sequence[dict[str, Any]], out: str, reviewer: str) -> None:
        for i, task in enumerate(tasks):
            check_task(task, f"task {i + 1}")
        self.tasks = list(tasks)
        self.by_id = {t["task_id"]: t for t in self.tasks}
        self.out = out
        self.reviewer = reviewer
        self.lock = threading.Lock()
        self.answers: dict[str, dict[str, Any]] = self._read(warn=True)  # resume: answers given stay given

    def _read(self, warn: bool = False) -> dict[str, dict[str, Any]]:
        """The answers in the answers file (of this server or another one on the same file),
        by task id; lines that are not answers to a task of this queue are skipped."""
        answers: dict[str, dict[str, Any]] = {}
        try:
            fh = open(self.out, encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return answers
        with fh:
            for number, line in enumerate(fh, 1):
                try:
                    row = json.loads(line)
                    if row["task_id"] in self.by_id and isinstance(row["labels"], dict):
                        answers[row["task_id"]] = row
                except (ValueError, KeyError, TypeError, RecursionError):
                    if warn:
                        _LOGGER.warning("%s:%d: not an answer line, ignored", redact_url(self.out), number)
        return answers

    @contextlib.contextmanager
    def _file_lock(self) -> Iterator[None]:
        """An exclusive lock of ``<answers>.lock`` shared by every server on this file (the
        answers file itself is replaced by rename, so it cannot carry the lock)."""
        with open(self.out + ".lock", "a") as fh:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh.fileno(), fcntl.LOCK_UN)

    def _write(self) -> None:
        """The answers, in task order, to a temporary file of this write renamed over the
        answers file (removed if the write fails)."""
        tmp = f"{self.out}.{uuid.uuid4().hex}.tmp"
        try:
            with open(tmp, "w", encoding="utf-8") as fh:
                for t in self.tasks:
                    if t["task_id"] in self.answers:
                        fh.write(json.dumps(self.answers[t["task_id"]], ensure_ascii=False) + "\n")
            os.replace(tmp, self.out)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.remove(tmp)
            raise

    def answer(self, task_id: str, labels: dict[str, str]) -> dict[str, int]:
        """Stores the answer ``labels`` (label set -> value) for ``task_id``. Label sets
        not in ``labels`` keep the value of an earlier answer: an answer only adds or
        corrects, it never erases. ``AnswerError`` for an unknown task, an empty answer
        or a value outside the task's taxonomy."""
        task = self.by_id.get(task_id)
        if task is None:
            raise AnswerError(f"unknown task {task_id[:200]!r}")
        if not labels:
            raise AnswerError("labels is empty: an answer needs at least one label set")
        for name, value in labels.items():
            if name not in task["taxonomy"]:
                raise AnswerError(f"unknown label set {name[:200]!r}")
            if value not in task["taxonomy"][name]:
                raise AnswerError(f"{name}={value[:200]!r} is not in the taxonomy")
        suggestions = task.get("suggestions", {})
        with self.lock, self._file_lock():
            self.answers.update(self._read())  # what other servers on this file answered meanwhile
            merged = {**self.answers.get(task_id, {}).get("labels", {}), **labels}
            self.answers[task_id] = {
                "task_id": task_id, "doc_id": task["doc_id"], "labels": merged,
                "reviewer": self.reviewer, "reviewed_at": utc_now(),
                "model_labels": {k: v["value"] for k, v in suggestions.items()},
                "model_versions": {k: v["version"] for k, v in suggestions.items()},
                "corrected": sorted(k for k, v in merged.items()
                                    if k in suggestions and suggestions[k]["value"] != v)}
            self._write()
            return self._progress()

    def _progress(self) -> dict[str, int]:
        return {"done": len(self.answers), "total": len(self.tasks)}

    def progress(self) -> dict[str, int]:
        with self.lock:
            return self._progress()

    def state(self) -> dict[str, Any]:
        """A snapshot (answers copied under the lock: another thread may be answering),
        with what other servers on the same answers file answered."""
        with self.lock:
            self.answers.update(self._read())
            return {"tasks": self.tasks, "answers": dict(self.answers), "keys": KEYS,
                    "reviewer": self.reviewer, **self._progress()}


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
#context .ctx{margin:.2em 0;font-size:13px;color:#444}
</style></head><body>
<header><strong>Review</strong><span id="where"></span><span class="grow"></span>
<span id="progress" data-testid="progress"></span><span id="who"></span></header>
<div id="bar"><div style="width:0"></div></div>
<main id="main"><div><div id="meta"></div><div id="context" data-testid="context"></div>
<div id="doc" data-testid="doc"></div></div>
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
  $("meta").textContent = (t.title ? t.title + " — " : "") + (t.url || t.source_id || t.doc_id);
  $("doc").textContent = t.text + (t.text_truncated ? "\\n[… cut]" : "");
  const context = Array.isArray(t.context) ? t.context : [];  // the anomaly queue's score lines
  $("context").replaceChildren(...context.map((line) => el("p", "ctx", String(line))));
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
  if (!r.ok) { let m = await r.text(); try { m = JSON.parse(m).error; } catch (e) {}
    alert("not saved: " + m); return; }
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
if (location.search) history.replaceState(null, "", "/");  // the token stays in a cookie
fetch("/api/state").then((r) => r.json()).then((s) => { S = s; cur = firstOpen(0); show();
  document.body.dataset.ready = "1"; });
</script></body></html>
"""
