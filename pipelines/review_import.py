"""Review import, the pure part: Label Studio exports and our JSONL answers to candidate
reviews, and their validation against the queued tasks and the taxonomy.

Every input that is not the expected shape becomes a problem row with a reason (not
JSON, nested too deeply, a task, annotation list or result list of the wrong type...);
``pipelines.review.import_reviews`` keeps those rows in ``review/set_aside/``, so nothing
is dropped silently and no bad input stops an import. Sizes are capped: a review field
longer than its ``FIELD_LIMITS`` entry is set aside as ``field_too_large`` (a 20 MB
reviewer would otherwise be stored, and copied onto every document it labels), and every
string of a set-aside row is cut (``bounded_row``). Pure functions: no I/O.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime, timezone
from typing import Any, Iterable, Sequence

from transforms.label.label import LabelConfig, Review

_LOGGER = logging.getLogger(__name__)

RAW_LIMIT = 2000  # characters of a bad input kept in its set-aside row
# Characters a candidate review's field may have. reviewer and reviewed_at are stored as
# given (an email is at most 254, an ISO time about 32); task_id, set and value must name
# a queued task and the taxonomy, and one that does is never too long, whatever its length.
FIELD_LIMITS = {"task_id": 2048, "set": 256, "value": 1024, "reviewer": 256, "reviewed_at": 64}


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


RAW_DEPTH = 20  # nesting of a bad input kept as it is in its set-aside row


def _deeper_than(value: Any, limit: int) -> bool:
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (list, dict)):
            if depth > limit:
                return True
            stack.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict) else item))
    return False


def raw_excerpt(value: Any) -> Any:
    """``value`` for a set-aside row: itself if its JSON has at most ``RAW_LIMIT``
    characters and ``RAW_DEPTH`` levels, else the start of that JSON (a string), so that
    one bad input cannot make the set-aside file huge or too deep to write."""
    if _deeper_than(value, RAW_DEPTH):
        return "[nested more than %d levels deep]" % RAW_DEPTH
    text = json.dumps(value, ensure_ascii=False, default=str)
    return value if len(text) <= RAW_LIMIT else text[:RAW_LIMIT] + " [...]"


def parse_label_studio(tasks: Any, source: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(candidate reviews, problems) of a Label Studio export: one candidate per
    annotation and label set."""
    candidates: list[dict[str, Any]] = []
    problems: list[dict[str, Any]] = []
    if not isinstance(tasks, list):
        return [], [{"reason": "not_a_task_list", "source": source, "raw": raw_excerpt(tasks)}]
    for i, task in enumerate(tasks):
        if isinstance(task, dict) and "data" not in task and "annotations" not in task and "task_id" in task:
            _parse_json_min(task, f"{source}[{i}]", candidates, problems)
            continue
        data = task.get("data") if isinstance(task, dict) else None
        if not isinstance(data, dict):
            problems.append({"reason": "malformed_task", "source": f"{source}[{i}]", "raw": raw_excerpt(task)})
            continue
        task_id = str(data.get("task_id") or data.get("doc_id") or "")
        annotations = task.get("annotations") or []
        if not isinstance(annotations, list):
            problems.append({"reason": "malformed_annotations", "source": f"{source}[{i}].annotations",
                             "task_id": task_id, "raw": raw_excerpt(annotations)})
            continue
        if not annotations:
            problems.append({"reason": "not_annotated", "source": f"{source}[{i}]", "task_id": task_id})
        for j, ann in enumerate(annotations):
            where = f"{source}[{i}].annotations[{j}]"
            if not isinstance(ann, dict):
                problems.append({"reason": "malformed_annotation", "source": where, "task_id": task_id,
                                 "raw": raw_excerpt(ann)})
                continue
            who = ann.get("completed_by")
            reviewer = str(who.get("email") or who.get("id")) if isinstance(who, dict) else str(who or "")
            when = str(ann.get("updated_at") or ann.get("created_at") or "")
            if ann.get("was_cancelled"):
                problems.append({"reason": "cancelled", "source": where, "task_id": task_id,
                                 "reviewer": reviewer})
                continue
            result = ann.get("result") or []
            if not isinstance(result, list):
                problems.append({"reason": "malformed_result", "source": f"{where}.result", "task_id": task_id,
                                 "reviewer": reviewer, "raw": raw_excerpt(result)})
                continue
            results = [r for r in result if isinstance(r, dict)]
            if len(results) < len(result):
                problems.append({"reason": "malformed_result", "source": f"{where}.result", "task_id": task_id,
                                 "reviewer": reviewer, "raw": raw_excerpt([r for r in result if not isinstance(r, dict)])})
            if not result:
                problems.append({"reason": "empty_annotation", "source": where, "task_id": task_id,
                                 "reviewer": reviewer})
            for r in results:
                choices = (r.get("value") or {}).get("choices") if isinstance(r.get("value"), dict) else None
                if r.get("type") != "choices" or not isinstance(choices, list) or len(choices) != 1:
                    problems.append({"reason": "not_a_single_choice", "source": where, "task_id": task_id,
                                     "reviewer": reviewer, "raw": raw_excerpt(r)})
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
                             "reviewer": reviewer, "raw": raw_excerpt({name: value})})
            continue
        candidates.append({"task_id": task_id, "set": str(name), "value": str(value), "reviewer": reviewer,
                           "reviewed_at": when, "source": where})


def parse_jsonl(lines: Iterable[str], source: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(candidate reviews, problems) of our JSONL answers (the review page's output)."""
    candidates: list[dict[str, Any]] = []
    problems: list[dict[str, Any]] = []
    for number, line in enumerate(lines, 1):
        where = f"{source}:{number}"
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            problems.append({"reason": "not_json", "source": where, "raw": line[:RAW_LIMIT], "error": str(exc)})
            continue
        except RecursionError:
            problems.append({"reason": "nested_too_deeply", "source": where, "raw": line[:RAW_LIMIT]})
            continue
        labels = row.get("labels") if isinstance(row, dict) else None
        if not isinstance(labels, dict) or not isinstance(row.get("task_id"), str):
            problems.append({"reason": "malformed_answer", "source": where, "raw": raw_excerpt(row)})
            continue
        for name, value in labels.items():
            candidates.append({"task_id": row["task_id"], "set": str(name), "value": str(value),
                               "reviewer": str(row.get("reviewer") or ""),
                               "reviewed_at": str(row.get("reviewed_at") or ""), "source": where})
    return candidates, problems


def oversized_field(candidate: dict[str, Any], tasks: dict[str, dict[str, Any]],
                    taxonomy: dict[str, set[str]]) -> str:
    """The error for the first field of ``candidate`` longer than its ``FIELD_LIMITS``
    entry, naming the task; "" when there is none. A queued task id, a label set of the
    taxonomy and one of its values are known, so never too long."""
    known = {"task_id": candidate["task_id"] in tasks, "set": candidate["set"] in taxonomy,
             "value": candidate["value"] in taxonomy.get(candidate["set"], ())}
    for field, limit in FIELD_LIMITS.items():
        size = len(candidate[field])
        if size > limit and not known.get(field, False):
            return (f"task {_cut(candidate['task_id'], 100)!r}: {field} has {size} characters, more than the "
                    f"{limit} an import accepts; correct it in the export and import that task again")
    return ""


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit]} [... {len(text)} characters]"


def bounded_row(row: dict[str, Any]) -> dict[str, Any]:
    """A set-aside row with every string cut to its ``FIELD_LIMITS`` entry (``RAW_LIMIT``
    for the others), the cut marked with the full length; ``raw`` is already an excerpt."""
    return {k: _cut(v, FIELD_LIMITS.get(k, RAW_LIMIT)) if isinstance(v, str) and k != "raw" else v
            for k, v in row.items()}


def merge_reviews(candidates: Sequence[dict[str, Any]], tasks: dict[str, dict[str, Any]],
                  config: LabelConfig, existing: Sequence[Review]) -> tuple[list[Review], list[dict[str, Any]]]:
    """(accepted, set aside): validates candidate reviews against the queued tasks, the
    taxonomy and the reviews accepted before.

    * a field over its ``FIELD_LIMITS`` entry (``oversized_field``), unknown task id,
      unknown label set, value outside the taxonomy: set aside;
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
        too_large = oversized_field(c, tasks, taxonomy)
        if too_large:
            aside.append({**c, "reason": "field_too_large", "error": too_large})
        elif task is None:
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
                               model_value=suggestion.get("value", ""),
                               id_scheme=_id_scheme(task)))
    return accepted, aside


def _id_scheme(task: dict[str, Any]) -> int:
    """The id scheme of a queued task: 1 for a queue written before tasks recorded it."""
    scheme = task.get("id_scheme", 1)
    return scheme if isinstance(scheme, int) and not isinstance(scheme, bool) else 1


def count_by_reason(aside: Sequence[dict[str, Any]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for row in aside:
        counts[row["reason"]] = counts.get(row["reason"], 0) + 1
    return dict(sorted(counts.items()))
