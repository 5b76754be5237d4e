"""The human review loop: review queues out, reviewed labels back in.

Layout under the job output:

    review/queue-<time>/tasks.json        Label Studio import (tasks with predictions)
    review/queue-<time>/tasks.jsonl       the same tasks, plain JSONL (our review page reads it)
    review/queue-<time>/label_config.xml  the Label Studio labelling config of the taxonomy
    review/reviews/<import>.jsonl         accepted human labels (one document, one label set)
    review/set_aside/<import>.jsonl       reviews kept aside, each with its reason

Commands:

    python -m pipelines.review import --config CFG FILE [FILE ...]
        Label Studio export JSON (``[{"id", "data", "annotations": [...]}]``), its JSON-MIN
        export (``[{"task_id", "<set>": "value", "annotator"}]``) or our JSONL
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
import json
import logging
import os
import sys
import threading
from dataclasses import asdict
from datetime import datetime, timezone
from typing import Any, Iterable, Iterator, Optional, Sequence
from xml.sax.saxutils import quoteattr

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from transforms.doc import Doc
from transforms.label.label import QUEUE_TEXT_LIMIT, LabelConfig, Review, uncertainty

_LOGGER = logging.getLogger(__name__)

TEXT_LIMIT = QUEUE_TEXT_LIMIT - 1  # characters of a document shown to reviewers


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
    from pipelines.corpus import finished_doc_stages, iter_docs, stage_doc_files

    wanted = set(ids)
    stages = finished_doc_stages(config)
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
        if isinstance(task, dict) and "data" not in task and "annotations" not in task and "task_id" in task:
            _parse_json_min(task, f"{source}[{i}]", candidates, problems)
            continue
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


# JSON-MIN rows carry our task data fields and Label Studio's own bookkeeping beside the
# answers; every other key is a control (label set) name.
_JSON_MIN_FIELDS = {"id", "task_id", "doc_id", "text", "url", "title", "annotator", "annotation_id",
                    "created_at", "updated_at", "lead_time"}


def _parse_json_min(row: dict[str, Any], where: str, candidates: list[dict[str, Any]],
                    problems: list[dict[str, Any]]) -> None:
    """One row of Label Studio's JSON-MIN export: ``{"task_id": ..., "<set>": "value"
    (or {"choices": [...]}), "annotator": ..., "updated_at": ...}``."""
    answers = {k: v for k, v in row.items() if k not in _JSON_MIN_FIELDS}
    task_id = str(row.get("task_id") or "")
    reviewer = str(row.get("annotator") or "")
    when = str(row.get("updated_at") or row.get("created_at") or "")
    if not answers:
        problems.append({"reason": "empty_annotation", "source": where, "task_id": task_id, "reviewer": reviewer})
    for name, value in answers.items():
        if isinstance(value, dict):
            value = value.get("choices")
        if isinstance(value, list) and len(value) == 1:
            value = value[0]
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            problems.append({"reason": "not_a_single_choice", "source": where, "task_id": task_id,
                             "reviewer": reviewer, "raw": {name: value}})
            continue
        candidates.append({"task_id": task_id, "set": str(name), "value": str(value), "reviewer": reviewer,
                           "reviewed_at": when, "source": where})


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
    from pipelines.review_page import ReviewSession, serve

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
