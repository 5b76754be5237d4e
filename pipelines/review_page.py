"""The review page: a small local web app for reviewers without Label Studio.

``python -m pipelines.review serve`` runs it (see ``pipelines/review.py``). One document at
a time with the model's suggestion per label set; Enter accepts, the key shown beside a
value corrects it, arrows move between label sets and tasks. Every answer rewrites the
answers file (our JSONL import format) atomically, so a killed server loses nothing and
a restarted one resumes. Stdlib ``http.server`` on 127.0.0.1; the page is one HTML
document with inline CSS and JS, no external resource, and shows document text as text.
"""

from __future__ import annotations

import html
import json
import logging
import os
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Sequence

from pipelines.review import utc_now

_LOGGER = logging.getLogger(__name__)

KEYS = "1234567890qwertyuiopasdfghjklzxcvbnm"  # value hotkeys, in taxonomy order


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


