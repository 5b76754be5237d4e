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
        taxonomy, cancelled or empty annotations, duplicates and conflicting reviews,
        fields over their size limit and files over ``MAX_IMPORT_BYTES`` are counted and
        kept aside in ``review/set_aside/``; nothing is dropped silently. The
        next run of the ``label`` stage applies the accepted reviews (the human label
        overrides the model's, with reviewer, time and model version).

    python -m pipelines.review serve --queue DIR_OR_TASKS_JSONL --out ANSWERS.jsonl
        [--reviewer NAME] [--port 8766]
        A review page on 127.0.0.1 for reviewers without Label Studio: one document at a
        time with the model's suggestion; Enter accepts, a value key (shown beside each
        value) corrects, arrows move between label sets and tasks. Answers are written to
        ``--out`` in the JSONL import format above (one line per task, rewritten
        atomically after every answer, so a killed server loses nothing; servers sharing
        one ``--out`` merge their answers under a lock, ``<out>.lock``). The page URL
        printed at start carries a random session token (``/?token=...``): only a browser
        that opened it may read or answer (see ``pipelines/review_server.py``).

Import input that is not the expected shape (not JSON, nested too deeply, annotations or
results that are not lists...) is set aside with a reason, like any other bad review.
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

from pipelines.review_import import (  # noqa: F401  (the import functions' public home)
    RAW_LIMIT, bounded_row, count_by_reason, merge_reviews, parse_jsonl, parse_label_studio, raw_excerpt, utc_now)
from storage.redact import redact_url
from transforms.doc import ID_SCHEME, Doc
from transforms.label.label import QUEUE_TEXT_LIMIT, LabelConfig, Review, uncertainty

_LOGGER = logging.getLogger(__name__)

TEXT_LIMIT = QUEUE_TEXT_LIMIT - 1  # characters of a document shown to reviewers
# Bytes of one import file read at most (it is parsed whole, in memory): 1 GiB holds over
# 12,000 tasks of the longest text a queue shows. A larger file is set aside unread.
MAX_IMPORT_BYTES = 1 << 30


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
        "task_id": doc.id, "doc_id": doc.id, "source_id": doc.source_id, "id_scheme": ID_SCHEME,
        "url": doc.url, "title": doc.title,
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
                 "source_id": task.get("source_id", ""), "url": task["url"], "title": task["title"]},
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
    document stage before it). An id is a document id, else the input's own id
    (``source_id``, as seed files and reviews stored before ids were unique name
    documents) of exactly one text: an own id that two inputs share with different
    texts is ambiguous and left out (logged)."""
    from pipelines.corpus import finished_doc_stages, iter_docs, stage_doc_files

    wanted = set(ids)
    stages = finished_doc_stages(config)
    if not stages:
        raise FileNotFoundError(f"no document stage has run under {config.output}")
    found: dict[str, str] = {}
    by_own: dict[str, Optional[str]] = {}  # own id → its text, None when ambiguous
    for stage in stages:  # the latest text of each document (clean redacts PII)
        seen_own: dict[str, Optional[str]] = {}
        for doc in iter_docs(stage_doc_files(config, stage)):
            if doc.id in wanted and doc.id not in found:
                found[doc.id] = doc.text
            if doc.source_id and doc.source_id in wanted and doc.source_id not in by_own:
                before = seen_own.setdefault(doc.source_id, doc.text)
                if before is not None and before != doc.text:
                    seen_own[doc.source_id] = None
        by_own.update(seen_own)
        if len(found) == len(wanted):
            break
    ambiguous = sorted(i for i, text in by_own.items() if text is None and i not in found)
    if ambiguous:
        _LOGGER.warning("%d ids name documents of more than one input (%s): left out; use the "
                        "document ids of docs/ (its id column)", len(ambiguous), ", ".join(ambiguous[:5]))
    found.update({i: text for i, text in by_own.items() if text is not None and i not in found})
    return found


def _file_size(path: str) -> Optional[int]:
    """The size the filesystem reports for ``path``; None when it reports none."""
    try:
        return FileSystems.match([path])[0].metadata_list[0].size_in_bytes
    except Exception:  # no such file (open says so) or no size from this filesystem
        return None


def _read_at_most(path: str, limit: int) -> bytes:
    """The first ``limit`` + 1 bytes of ``path`` at most, read in parts (a file that
    grew past its reported size is still not read whole)."""
    parts: list[bytes] = []
    size = 0
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as fh:
        while size <= limit:
            part = fh.read(min(1 << 24, limit + 1 - size))
            if not part:
                break
            parts.append(part)
            size += len(part)
    return b"".join(parts)


def parse_import_file(path: str,
                      max_bytes: int = MAX_IMPORT_BYTES) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(candidate reviews, problems) of one import file, by its name and first character:
    JSONL, or a Label Studio export (JSON array). A file over ``max_bytes`` is one
    ``file_too_large`` problem and is not read."""
    source = redact_url(path)
    size = _file_size(path)
    data = _read_at_most(path, max_bytes) if size is None or size <= max_bytes else b""
    if (size or 0) > max_bytes or len(data) > max_bytes:
        shown = f"{size} bytes" if size is not None and size > max_bytes else f"more than {max_bytes} bytes"
        error = (f"{source}: {shown}, over the {max_bytes} one import reads; split it (Label Studio: "
                 "export a filtered view per range of tasks) and import the parts")
        _LOGGER.warning("set aside unread: %s", error)
        return [], [{"reason": "file_too_large", "source": source, "error": error}]
    raw = data.decode("utf-8", errors="replace")
    if path.endswith(".jsonl") or not raw.lstrip().startswith("["):
        return parse_jsonl(raw.splitlines(), source)
    try:
        return parse_label_studio(json.loads(raw), source)
    except ValueError as exc:
        return [], [{"reason": "not_json", "source": source, "error": str(exc), "raw": raw[:RAW_LIMIT]}]
    except RecursionError:
        return [], [{"reason": "nested_too_deeply", "source": source, "raw": raw[:RAW_LIMIT]}]


def import_reviews(config: Any, files: Sequence[str], max_file_bytes: int = MAX_IMPORT_BYTES) -> dict[str, Any]:
    """Parses, validates and stores reviews; returns the counts (also printed by the CLI).
    Set-aside rows are cut to bounded sizes (``bounded_row``)."""
    if config.label is None:
        raise ValueError(f"{config.source_file}: no label: section")
    candidates: list[dict[str, Any]] = []
    problems: list[dict[str, Any]] = []
    for path in files:
        c, p = parse_import_file(path, max_file_bytes)
        candidates += c
        problems += p
    tasks = queued_tasks(config.output)
    accepted, aside = merge_reviews(candidates, tasks, config.label, load_reviews(config.output))
    aside = [bounded_row(row) for row in problems + aside]
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%f")
    base = review_dir(config.output)
    if aside:
        write_text(FileSystems.join(base, "set_aside", f"{stamp}.jsonl"),
                   "".join(json.dumps(a, ensure_ascii=False, default=str) + "\n" for a in aside))
    if accepted:
        write_text(FileSystems.join(base, "reviews", f"{stamp}.jsonl"),
                   "".join(json.dumps(asdict(r), ensure_ascii=False) + "\n" for r in accepted))
    corrected = sum(1 for r in accepted if r.model_value and r.model_value != r.value)
    return {"files": [redact_url(f) for f in files], "candidates": len(candidates), "accepted": len(accepted),
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
            sys.stderr.write(f"error: {redact_url(str(exc))}\n")
            return 2
        sys.stdout.write(json.dumps(report, indent=2) + "\n")
        if report["accepted"]:
            sys.stdout.write("run the label stage again to apply them: "
                             f"python -m pipelines.run --config {args.config} --stages label\n")
        return 0
    return _serve(args)


def _serve(args: argparse.Namespace) -> int:
    """The ``serve`` command: prints the page URL (with its session token) and waits."""
    from pipelines.review_page import ReviewSession
    from pipelines.review_server import serve

    queue = redact_url(args.queue)
    try:
        session = ReviewSession(load_queue(args.queue), args.out, args.reviewer)
    except (OSError, ValueError, KeyError, RecursionError) as exc:
        sys.stderr.write(f"error: cannot read queue {queue}: {redact_url(str(exc))}\n")
        return 2
    try:
        server = serve(session, args.port)
    except OSError as exc:
        sys.stderr.write(f"error: cannot listen on 127.0.0.1:{args.port}: {exc}\n")
        return 2
    sys.stdout.write(f"review page: {server.url}\n  ({len(session.tasks)} tasks, answers to "
                     f"{args.out}; open this URL: the token in it is the key; Ctrl-C stops)\n")
    sys.stdout.flush()
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
        server.server_close()  # the listening socket too: the port is free when this returns
    return 0


if __name__ == "__main__":
    sys.exit(main())
