"""The review loop end to end: label stage → queue → answers (Label Studio export, our
JSONL, the review page in headless Chromium) → import → label stage → retrain."""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import io
import json
import re
from datetime import datetime, timedelta, timezone
import xml.etree.ElementTree as ET
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from models.labeller import Labeller
from pipelines.config import ConfigError, load_config
from pipelines.labeller import main as labeller_main
from pipelines.review import (import_reviews, load_queue, main as review_main, merge_reviews,
                              parse_jsonl, parse_label_studio)
from pipelines.review_page import ReviewSession
from pipelines.review_server import serve
from pipelines.run import main as run_main
from tests.browser import chromium, console_errors  # noqa: F401  (fixture)
from tests.labelmodels import LANGS, label_data, label_section, write_label_data  # noqa: F401
from tests.s3server import s3_endpoint, s3_env  # noqa: F401  (fixtures)
from transforms.label.label import LabelConfig, LabelSetConfig, Review

CFG = LabelConfig(sets=(LabelSetConfig("language", LANGS, "m"),))
TASKS = {"t1": {"task_id": "t1", "doc_id": "d1", "suggestions": {"language": {"value": "de", "version": "v1"}}},
         "t2": {"task_id": "t2", "doc_id": "d2", "suggestions": {"language": {"value": "en", "version": "v1"}}},
         "t3": {"task_id": "t3", "doc_id": "d3", "suggestions": {}}}


def cand(task: str, value: str, name: str = "language", who: str = "ann") -> dict:
    return {"task_id": task, "set": name, "value": value, "reviewer": who, "reviewed_at": "2026-11-29T10:00:00Z",
            "source": "x"}


def test_merge_reviews_validates_and_sets_aside():
    candidates = [cand("t1", "en"), cand("t1", "en", who="bob"),  # accepted + duplicate
                  cand("t2", "es"), cand("t2", "fr", who="bob"),  # conflict: both aside
                  cand("nope", "de"), cand("t3", "de", name="topic"), cand("t3", "xx"),
                  cand("t3", "fr")]
    existing = [Review("t3", "d3", "language", "es", "carl", "t")]
    accepted, aside = merge_reviews(candidates, TASKS, CFG, existing)
    assert accepted == [Review("t1", "d1", "language", "en", "ann", "2026-11-29T10:00:00Z", "v1", "de")]
    reasons = sorted(a["reason"] for a in aside)
    assert reasons == ["conflict", "conflict", "conflicts_with_accepted", "duplicate",
                       "unknown_label_set", "unknown_task", "value_outside_taxonomy"]
    assert len(accepted) + len(aside) == len(candidates)  # nothing dropped silently


def test_reviews_record_the_id_scheme_of_their_queue():
    """A queue written since ids became unique records ``id_scheme`` 2 in its tasks; a
    queue written before has none, and its reviews are stored as scheme 1 (the label
    stage then finds their documents by the input's own id)."""
    tasks = {"new": {"task_id": "new", "doc_id": "5@0123456789abcdef", "id_scheme": 2, "suggestions": {}},
             "old": {"task_id": "old", "doc_id": "5", "suggestions": {}},
             "odd": {"task_id": "odd", "doc_id": "6", "id_scheme": "2", "suggestions": {}}}
    accepted, aside = merge_reviews([cand("new", "en"), cand("old", "de"), cand("odd", "fr")], tasks, CFG, [])
    assert not aside
    assert [(r.doc_id, r.id_scheme) for r in accepted] == [("5@0123456789abcdef", 2), ("5", 1), ("6", 1)]


def test_parse_label_studio_export_shapes():
    export = [
        {"id": 1, "data": {"task_id": "t1"}, "annotations": [
            {"completed_by": {"id": 3, "email": "ann@x.org"}, "updated_at": "2026-01-01T00:00:00Z",
             "result": [{"from_name": "language", "to_name": "text", "type": "choices",
                         "value": {"choices": ["de"]}}]},
            {"completed_by": 4, "was_cancelled": True, "result": []},
            {"completed_by": 5, "result": [{"type": "labels", "value": {"labels": ["x"]}}]}]},
        {"id": 2, "data": {"task_id": "t2"}, "annotations": []},
        "garbage",
    ]
    candidates, problems = parse_label_studio(export, "e.json")
    assert [(c["task_id"], c["value"], c["reviewer"]) for c in candidates] == [("t1", "de", "ann@x.org")]
    assert sorted(p["reason"] for p in problems) == ["cancelled", "malformed_task", "not_a_single_choice",
                                                     "not_annotated"]
    assert parse_label_studio({"not": "a list"}, "e.json")[1][0]["reason"] == "not_a_task_list"
    # JSON-MIN export: one flat row per annotation
    json_min = [{"id": 7, "task_id": "t2", "text": "…", "language": "fr", "annotator": 4, "annotation_id": 9,
                 "created_at": "2026-01-02T00:00:00Z", "updated_at": "2026-01-02T00:00:01Z", "lead_time": 3.2},
                {"id": 8, "task_id": "t3", "language": {"choices": ["es"]}, "annotator": 4},
                {"id": 9, "task_id": "t1", "language": {"choices": ["de", "en"]}, "annotator": 4},
                {"id": 10, "task_id": "t1", "annotator": 4}]
    candidates, problems = parse_label_studio(json_min, "min.json")
    assert [(c["task_id"], c["set"], c["value"], c["reviewer"], c["reviewed_at"]) for c in candidates] == [
        ("t2", "language", "fr", "4", "2026-01-02T00:00:01Z"), ("t3", "language", "es", "4", "")]
    assert sorted(p["reason"] for p in problems) == ["empty_annotation", "not_a_single_choice"]
    c, p = parse_jsonl(['{"task_id": "t1", "labels": {"language": "fr"}, "reviewer": "z"}', "{bad", "[]"], "a.jsonl")
    assert [x["value"] for x in c] == ["fr"] and [x["reason"] for x in p] == ["not_json", "malformed_answer"]


def write_job(tmp_path: Path, data, budget: int = 20) -> str:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump({
        "output": str(tmp_path / "out"), "inputs": [{"format": "jsonl", "path": data.docs}],
        "label": label_section(data.model_dir, budget), "beam_args": ["--runner=FnApiRunner"]}))
    return str(path)


def run(config: str) -> str:
    out = io.StringIO()
    assert run_main(["--config", config, "--no-progress", "--no-report", "--log-level", "WARNING"], out=out) == 0
    return out.getvalue()


def labelled(output: Path) -> dict[str, dict]:
    rows = [r for f in sorted(glob.glob(str(output / "docs" / "label" / "*.parquet")))
            for r in pq.read_table(f).to_pylist()]
    return {r["id"]: next(lab for lab in r["labels"] if lab["name"] == "language") for r in rows}


def test_review_loop_end_to_end(tmp_path):
    data = write_label_data(tmp_path / "data")  # own model dir: retrain writes versions
    config = write_job(tmp_path, data)
    printed = run(config)
    out = tmp_path / "out"
    first = labelled(out)
    assert len(first) == 800 and all(lab["origin"] == "model" for lab in first.values())
    truth = {i: data.truth[i.rsplit("@", 1)[0]] for i in first}  # document id → the input id's truth
    queue_dir = glob.glob(str(out / "review" / "queue-*"))[0]
    # the run ends by naming the queue and the command that opens it (issue 18, item 10)
    assert f"review queue: {queue_dir} (20 documents)\n" in printed
    assert f"pipelines.review serve --queue {queue_dir} --out answers.jsonl" in printed
    ls_tasks = json.loads(Path(queue_dir, "tasks.json").read_text())
    assert len(ls_tasks) == 20
    assert ET.fromstring(Path(queue_dir, "label_config.xml").read_text()).find("Choices").get("name") == "language"
    scores = [t["predictions"][0]["score"] for t in ls_tasks]
    assert scores == sorted(scores) and max(scores) < 0.9  # least confident first, all uncertain
    worst_unqueued = min(lab["score"] for i, lab in first.items()
                         if i not in {t["data"]["task_id"] for t in ls_tasks})
    assert max(scores) <= worst_unqueued

    # a Label Studio export answered from the truth, plus a bad and an unknown task
    export = []
    for n, task in enumerate(ls_tasks):
        tid = task["data"]["task_id"]
        export.append({"id": n, "data": task["data"], "annotations": [{
            "completed_by": {"id": 1, "email": "ann@example.org"}, "updated_at": "2026-11-29T10:00:00Z",
            "result": [{"from_name": "language", "to_name": "text", "type": "choices",
                        "value": {"choices": [truth[tid]]}}]}]})
    export[0]["annotations"].append({"completed_by": 2, "result": [
        {"from_name": "language", "type": "choices", "value": {"choices": ["klingon"]}}]})
    export.append({"id": 99, "data": {"task_id": "not-queued"}, "annotations": export[1]["annotations"]})
    (tmp_path / "export.json").write_text(json.dumps(export))
    stdout = io.StringIO()
    import contextlib
    with contextlib.redirect_stdout(stdout):
        assert review_main(["import", "--config", config, str(tmp_path / "export.json")]) == 0
    report = json.loads(stdout.getvalue().split("\nrun the label")[0])
    assert report["accepted"] == 20 and report["set_aside_by_reason"] == {
        "unknown_task": 1, "value_outside_taxonomy": 1}
    corrected = [t["data"]["task_id"] for t in ls_tasks
                 if first[t["data"]["task_id"]]["value"] != truth[t["data"]["task_id"]]]
    assert report["accepted_corrected"] == len(corrected) > 0

    # importing the same export again: everything is a duplicate, nothing applied twice
    with contextlib.redirect_stdout(io.StringIO()):
        assert review_main(["import", "--config", config, str(tmp_path / "export.json")]) == 0
    assert len(glob.glob(str(out / "review" / "reviews" / "*.jsonl"))) == 1

    table = run(config)
    assert "label" in table and "ran in" in table.split("label")[1].splitlines()[0]
    second = labelled(out)
    for task in ls_tasks:
        tid = task["data"]["task_id"]
        lab = second[tid]
        assert (lab["origin"], lab["value"], lab["reviewer"], lab["score"]) == \
            ("human", truth[tid], "ann@example.org", 1.0)
        assert lab["version"] == first[tid]["version"] and lab["reviewed_at"] == "2026-11-29T10:00:00Z"
    new_queue = max(glob.glob(str(out / "review" / "queue-*")))
    assert not {t["task_id"] for t in load_queue(new_queue)} & set(truth) & {t["data"]["task_id"] for t in ls_tasks}

    # active learning: retrain on seed + human labels → new CURRENT version with a report
    old = Labeller.load(data.model_dir).version
    with contextlib.redirect_stdout(io.StringIO()):
        assert labeller_main(["retrain", "--config", config, "--set", "language", "--seed", data.seed,
                              "--minn", "2", "--maxn", "4", "--allow-uncalibrated"]) == 0  # 75 examples
    new = Labeller.load(data.model_dir)
    assert new.version != old
    meta = json.loads(Path(data.model_dir, new.version, "meta.json").read_text())
    assert meta["previous_version"] == old and meta["active_learning"]["reviews"] == 20
    assert meta["active_learning"]["agreement"] == pytest.approx(1 - len(corrected) / 20, abs=1e-3)
    assert {"after", "before", "corpus_auto_accept_fraction"} <= set(meta["active_learning"])
    run(config)  # the new model version makes the label stage run again
    third = labelled(out)
    assert {lab["version"] for lab in third.values() if lab["origin"] == "model"} == {new.version}


def test_training_on_too_few_examples_to_calibrate_is_refused_unless_asked(tmp_path, capsys):
    """60 seed examples hold out about 12 to calibrate: the uncalibrated model would send
    nearly every document to review (issue 18, item 10); the command refuses, naming the
    set and the counts, and trains it only with --allow-uncalibrated."""
    data = write_label_data(tmp_path / "data")
    config = write_job(tmp_path, data)
    before = Labeller.load(data.model_dir).version
    train = ["train", "--config", config, "--set", "language", "--seed", data.seed, "--minn", "2", "--maxn", "4"]
    assert labeller_main(train) == 2
    err = capsys.readouterr().err
    assert re.search(r"error: label set 'language': 60 examples put \d+ in the hash-chosen 20% held out to "
                     r"calibrate the confidences; at least 30 are needed \(by label: .*\)\. Add about \d+ more "
                     r"labelled examples \(about \d+ of each label\)", err)
    assert "--allow-uncalibrated" in err and Labeller.load(data.model_dir).version == before
    with contextlib.redirect_stdout(io.StringIO()):
        assert labeller_main(train + ["--allow-uncalibrated"]) == 0
    assert Labeller.load(data.model_dir).version != before


def test_missing_labeller_is_a_config_error(tmp_path, label_data):
    config = tmp_path / "job.yaml"
    config.write_text(yaml.safe_dump({"output": str(tmp_path / "out"),
                                      "inputs": [{"format": "jsonl", "path": label_data.docs}],
                                      "label": label_section(str(tmp_path / "missing"))}))
    with pytest.raises(ConfigError, match=r"label.sets\[0\].model: .*CURRENT missing"):
        load_config(str(config))
    bad = label_section(label_data.model_dir)
    bad["sets"][0]["values"] = ["de", "en"]
    config.write_text(yaml.safe_dump({"output": str(tmp_path / "out"),
                                      "inputs": [{"format": "jsonl", "path": label_data.docs}], "label": bad}))
    with pytest.raises(ConfigError, match="taxonomy differs"):
        load_config(str(config))


def queue_for_page(tmp_path: Path) -> list[dict]:
    taxonomy = {"language": list(LANGS), "quality": ["low", "high"]}
    tasks = [{"task_id": f"t{i}", "doc_id": f"d{i}", "url": f"https://example.org/{i}", "title": "",
              "text": f"Document {i} <b>not bold</b>", "text_truncated": False, "taxonomy": taxonomy,
              "suggestions": {"language": {"value": "de", "score": 0.41, "version": "v1"},
                              "quality": {"value": "high", "score": 0.55, "version": "q1"}},
              "uncertainty": 0.59} for i in range(3)]
    return tasks


def test_review_page_in_headless_chromium(tmp_path, chromium):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    answers = tmp_path / "answers.jsonl"
    server = serve(ReviewSession(queue_for_page(tmp_path), str(answers), "rita"), port=0)
    try:
        chromium.get(server.url)  # the printed URL, with the session token
        wait = WebDriverWait(chromium, 20)
        wait.until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "1")
        assert "token" not in chromium.current_url  # kept in an HttpOnly cookie instead
        assert [(c["name"], c["httpOnly"], c["sameSite"]) for c in chromium.get_cookies()] == [
            (server.cookie, True, "Strict")]
        progress = chromium.find_element(By.ID, "progress")
        assert progress.text == "0 / 3 reviewed"
        assert "<b>not bold</b>" in chromium.find_element(By.ID, "doc").text  # shown as text, not HTML
        body = chromium.find_element(By.TAG_NAME, "body")
        body.send_keys(Keys.ENTER)  # task 1: accept both suggestions
        wait.until(lambda d: progress.text == "1 / 3 reviewed")
        # task 2: correct the language to "fr" (fourth value → key 4), then quality to "low" (key 1)
        body.send_keys("4")
        body.send_keys("1")
        chosen = [b.text for b in chromium.find_elements(By.CSS_SELECTOR, ".choice.chosen")]
        assert chosen == ["4fr", "1low"]
        body.send_keys(Keys.ENTER)
        wait.until(lambda d: progress.text == "2 / 3 reviewed")
        assert chromium.find_element(By.ID, "where").text == "task 3 of 3"
        assert console_errors(chromium) == []
        chromium.save_screenshot(str(tmp_path / "review.png"))
    finally:
        server.shutdown()
    rows = [json.loads(line) for line in answers.read_text().splitlines()]
    assert [(r["task_id"], r["labels"], r["reviewer"], r["corrected"]) for r in rows] == [
        ("t0", {"language": "de", "quality": "high"}, "rita", []),
        ("t1", {"language": "fr", "quality": "low"}, "rita", ["language", "quality"])]
    # the answers file is our import format
    tasks = {t["task_id"]: t for t in queue_for_page(tmp_path)}
    cfg = LabelConfig(sets=(LabelSetConfig("language", LANGS, "m"), LabelSetConfig("quality", ("low", "high"), "m")))
    accepted, aside = merge_reviews(parse_jsonl(answers.read_text().splitlines(), "a")[0], tasks, cfg, [])
    assert len(accepted) == 4 and aside == []
    assert {(r.task_id, r.set, r.value, r.model_value) for r in accepted if r.task_id == "t1"} == {
        ("t1", "language", "fr", "de"), ("t1", "quality", "low", "high")}
    # a restarted server resumes: the answered tasks stay answered
    assert ReviewSession(queue_for_page(tmp_path), str(answers), "rita").progress() == {"done": 2, "total": 3}


@pytest.mark.parametrize("runner_args", [
    ["--runner=FnApiRunner", "--direct_running_mode=multi_processing", "--direct_num_workers=2"],
    ["--runner=PortableRunner", "--job_endpoint=embed", "--environment_type=LOOPBACK"],
], ids=["multi_processing", "portable_loopback"])
def test_label_stage_on_other_runners(tmp_path, label_data, runner_args):
    docs = tmp_path / "docs.jsonl"
    docs.write_text("".join(Path(label_data.docs).read_text(encoding="utf-8").splitlines(True)[:120]),
                    encoding="utf-8")
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump({
        "output": str(tmp_path / "out"), "inputs": [{"format": "jsonl", "path": str(docs)}],
        "label": label_section(label_data.model_dir, budget=10, sampling="hybrid"), "beam_args": runner_args}))
    run(str(path))
    manifest = json.loads((tmp_path / "out" / "manifests" / "label.json").read_text())
    assert manifest["counts"]["records_in"] == manifest["counts"]["out"] == 120
    assert manifest["extra"]["counters"]["review_queued"] == 10
    assert len(labelled(tmp_path / "out")) == 120
    assert len(load_queue(glob.glob(str(tmp_path / "out" / "review" / "queue-*"))[0])) == 10


def test_report_shows_labels(tmp_path, label_data, chromium):
    from selenium.webdriver.common.by import By

    from pipelines.report import build_report, write_report

    config = write_job(tmp_path, label_data)
    run(config)
    job = load_config(config)
    report = build_report(job.output, job)
    lang = report["labels"]["sets"]["language"]
    assert sum(sum(v) for v in lang["counts"].values()) == 800 and lang["accept_threshold"] == 0.9
    uncertain = sum(lab["score"] < 0.9 for lab in labelled(tmp_path / "out").values())
    assert sum(lang["counts"].get("model, uncertain", [])) == uncertain
    assert lang["confidence"]["n"] == 800
    chromium.get(Path(write_report(job.output, job)).as_uri())
    for plot in ("labels-language", "label-confidence-language"):
        element = chromium.find_element(By.CSS_SELECTOR, f'[data-plot="{plot}"]')
        assert element.size["width"] > 0 and element.find_elements(By.TAG_NAME, "rect")
    assert console_errors(chromium) == []


def test_review_server_rejects_bad_answers(tmp_path):
    import urllib.error
    import urllib.request

    answers = tmp_path / "answers.jsonl"
    server = serve(ReviewSession(queue_for_page(tmp_path), str(answers), "rita"), port=0)
    url = f"http://127.0.0.1:{server.server_address[1]}/api/answer"

    def post(body: bytes) -> int:
        request = urllib.request.Request(url, data=body, method="POST", headers={
            "Content-Type": "application/json", "X-Review-Token": server.token})
        try:
            with urllib.request.urlopen(request, timeout=10) as r:
                return r.status
        except urllib.error.HTTPError as exc:
            return exc.code

    try:
        assert post(b"{not json") == 400
        assert post(json.dumps({"task_id": "t0", "labels": {"language": "klingon"}}).encode()) == 400
        assert post(json.dumps({"task_id": "nope", "labels": {"language": "de"}}).encode()) == 400
        assert post(json.dumps({"task_id": "t0", "labels": ["de"]}).encode()) == 400
        assert not answers.exists()  # nothing written for a rejected answer
        assert post(json.dumps({"task_id": "t0", "labels": {"language": "en"}}).encode()) == 200
        assert json.loads(answers.read_text())["labels"] == {"language": "en"}
    finally:
        server.shutdown()


def test_label_job_and_review_loop_on_an_s3_output(tmp_path, label_data, s3_env):  # noqa: F811
    """Output on S3 (moto): the driver's manifests, the review queue, the import and the
    report all go through Beam's S3 filesystem configured from the job's options."""
    import contextlib

    import s3fs
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options import PipelineOptions

    fs = s3fs.S3FileSystem()
    fs.mkdir("label-job")
    docs = tmp_path / "docs.jsonl"
    docs.write_text("".join(Path(label_data.docs).read_text(encoding="utf-8").splitlines(True)[:200]),
                    encoding="utf-8")
    config = tmp_path / "job.yaml"
    config.write_text(yaml.safe_dump({
        "output": "s3://label-job/out", "inputs": [{"format": "jsonl", "path": str(docs)}],
        "label": label_section(label_data.model_dir, budget=5),
        "beam_args": ["--runner=FnApiRunner", f"--s3_endpoint_url={s3_env}", "--s3_access_key_id=testing",
                      "--s3_secret_access_key=testing", "--s3_region_name=us-east-1"]}))
    try:
        out = io.StringIO()
        assert run_main(["--config", str(config), "--no-progress", "--log-level", "WARNING"], out=out) == 0
        assert "report: s3://label-job/out/report/report.html" in out.getvalue()
        queue = [p for p in fs.find("label-job/out/review") if p.endswith("tasks.jsonl")]
        tasks = [json.loads(line) for line in fs.cat(queue[0]).decode().splitlines()]
        assert len(tasks) == 5
        answers = tmp_path / "answers.jsonl"
        answers.write_text("".join(json.dumps({"task_id": t["task_id"], "reviewer": "ann",
                                               "labels": {"language": t["task_id"][:2]}}) + "\n" for t in tasks))
        with contextlib.redirect_stdout(io.StringIO()) as buf:
            assert review_main(["import", "--config", str(config), str(answers)]) == 0
        assert json.loads(buf.getvalue().split("\nrun the label")[0])["accepted"] == 5
        assert run_main(["--config", str(config), "--no-progress", "--no-report", "--log-level", "WARNING"],
                        out=io.StringIO()) == 0
        manifest = json.loads(fs.cat("label-job/out/manifests/label.json"))
        assert manifest["extra"]["counters"]["label_human"] == 5
    finally:
        FileSystems.set_options(PipelineOptions([]))  # global state: no endpoint for later tests


# ---------------------------------------------------------------- malformed imports (issue 13.11)

def test_malformed_exports_are_set_aside_not_crashes():
    deep = json.loads("[" * 500 + "]" * 500)
    export = [
        {"id": 1, "data": {"task_id": "t1"}, "annotations": 5},
        {"id": 2, "data": {"task_id": "t2"}, "annotations": {"a": 1}},
        {"id": 3, "data": {"task_id": "t1"}, "annotations": [{"completed_by": 1, "result": 5}]},
        {"id": 4, "data": {"task_id": "t1"}, "annotations": [{"completed_by": 1, "result": {"x": 1}}]},
        {"id": 5, "data": {"task_id": "t2"}, "annotations": [{"completed_by": 1, "result": [
            5, {"from_name": "language", "type": "choices", "value": {"choices": ["fr"]}}]}]},
        {"id": 6, "data": deep},
        {"id": 7, "data": {"task_id": "t3"}, "annotations": [deep]},
    ]
    candidates, problems = parse_label_studio(export, "e.json")
    assert [(c["task_id"], c["value"]) for c in candidates] == [("t2", "fr")]  # the good result kept
    assert [p["reason"] for p in problems] == [
        "malformed_annotations", "malformed_annotations", "malformed_result", "malformed_result",
        "malformed_result", "malformed_task", "malformed_annotation"]
    for p in problems:  # every row is small and shallow enough to be written back
        assert len(json.dumps(p)) < 2500
    assert problems[-1]["raw"] == "[nested more than 20 levels deep]"
    c, p = parse_jsonl(["[" * 100_000, json.dumps({"task_id": "t1", "labels": {"language": "fr"}})], "a.jsonl")
    assert [x["value"] for x in c] == ["fr"] and [x["reason"] for x in p] == ["nested_too_deeply"]


def queued_job(tmp_path: Path) -> Path:
    """A job config whose output holds a review queue of ``TASKS`` (no stage run)."""
    out = tmp_path / "out"
    queue = out / "review" / "queue-20260101T000000"
    queue.mkdir(parents=True)
    (queue / "tasks.jsonl").write_text("".join(json.dumps({**t, "taxonomy": {"language": list(LANGS)}}) + "\n"
                                               for t in TASKS.values()))
    (tmp_path / "docs.jsonl").write_text('{"id": "d1", "text": "x"}\n')
    config = tmp_path / "job.yaml"
    config.write_text(yaml.safe_dump({"output": str(out), "inputs": [{"format": "jsonl", "path": str(tmp_path / "docs.jsonl")}],
                                      "label": label_section(str(tmp_path / "models"))}))
    return config


def test_import_counts_and_stores_every_file_exactly(tmp_path):
    """Every file of one import: our JSONL (a non-ASCII reviewer), a Label Studio export,
    broken JSON with a stray non-UTF-8 byte, JSON nested too deeply, a ``.jsonl`` whose
    first line is an array (read as JSONL by its name, not as an export). The report's
    every field, the set-aside rows and the stored reviews, written as UTF-8 text under a
    UTC timestamp."""
    config = load_config(str(queued_job(tmp_path)), check_models=False)
    texts = {"ok.jsonl": json.dumps({"task_id": "t1", "labels": {"language": "fr"}, "reviewer": "Zoë Ødegaard"},
                                    ensure_ascii=False) + "\n" + json.dumps({"task_id": "t2", "labels": {"language": "es"}}),
             "export.json": "\n  " + json.dumps([{"data": {"task_id": "t3"}, "annotations": [{"completed_by": 7, "result": [
                 {"from_name": "language", "type": "choices", "value": {"choices": ["fr"]}}]}]},
                 {"data": {"task_id": "t1"}, "annotations": 5}]),
             "broken.json": "[{not json — Zoë \udcff",
             "deep.json": "[" * 100_000 + "]" * 100_000,
             "array.jsonl": '["not an answer"]\n'}
    paths = []
    for name, text in texts.items():
        (tmp_path / name).write_bytes(text.encode("utf-8", "surrogateescape"))  # broken.json: a stray 0xff
        paths.append(str(tmp_path / name))
    before = datetime.now(timezone.utc)
    report = import_reviews(config, paths)
    assert report == {"files": paths, "candidates": 3, "accepted": 3, "accepted_model_agreed": 1,
                      "accepted_corrected": 2, "set_aside": 4, "known_tasks": 3,
                      "set_aside_by_reason": {"malformed_annotations": 1, "not_json": 1, "nested_too_deeply": 1,
                                              "malformed_answer": 1}}
    review = Path(config.output) / "review"
    [aside_file] = (review / "set_aside").iterdir()
    [reviews_file] = (review / "reviews").iterdir()
    for stored in (aside_file, reviews_file):
        assert re.fullmatch(r"\d{8}T\d{12}\.jsonl", stored.name)
        stamp = datetime.strptime(stored.name[:-6], "%Y%m%dT%H%M%S%f").replace(tzinfo=timezone.utc)
        assert before - timedelta(seconds=1) <= stamp <= datetime.now(timezone.utc)
    aside = [json.loads(line) for line in aside_file.read_text(encoding="utf-8").splitlines()]
    assert [(a["reason"], a["source"], sorted(a)) for a in aside][1:] == [
        ("not_json", paths[2], ["error", "raw", "reason", "source"]),
        ("nested_too_deeply", paths[3], ["raw", "reason", "source"]),
        ("malformed_answer", f"{paths[4]}:1", ["raw", "reason", "source"])]
    assert (aside[0]["reason"], aside[0]["source"]) == ("malformed_annotations", f"{paths[1]}[1].annotations")
    aside = aside[1:]
    # the stray byte decoded as U+FFFD, the file still read
    assert aside[0]["raw"] == "[{not json — Zoë \ufffd" and aside[0]["error"].startswith("Expecting property name")
    assert aside[1]["raw"] == texts["deep.json"][:2000] and aside[2]["raw"] == ["not an answer"]
    assert "— Zoë" in aside_file.read_text(encoding="utf-8")  # UTF-8 text, not \u escapes
    stored = [json.loads(line) for line in reviews_file.read_text(encoding="utf-8").splitlines()]
    assert [(r["task_id"], r["doc_id"], r["value"], r["model_value"], r["reviewer"]) for r in stored] == [
        ("t1", "d1", "fr", "de", "Zoë Ødegaard"), ("t2", "d2", "es", "en", ""), ("t3", "d3", "fr", "", "7")]
    assert "Zoë Ødegaard" in reviews_file.read_text(encoding="utf-8")
    with pytest.raises(ValueError, match=r"job\.yaml: no label: section"):
        import_reviews(dataclasses.replace(config, label=None), paths)


def test_import_command_sets_aside_malformed_files(tmp_path, capsys):
    config = queued_job(tmp_path)
    out = tmp_path / "out"
    files = {"deep.json": "[" * 100_000 + "]" * 100_000,
             "annotations.json": json.dumps([{"data": {"task_id": "t1"}, "annotations": 5}]),
             "result.json": json.dumps([{"data": {"task_id": "t1"}, "annotations": [{"result": 5}]}]),
             "ok.jsonl": json.dumps({"task_id": "t1", "labels": {"language": "fr"}}) + "\n" + "[" * 50_000 + "\n"}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    assert review_main(["import", "--config", str(config)] + [str(tmp_path / n) for n in files]) == 0
    report = json.loads(capsys.readouterr().out.split("\nrun the label")[0])
    assert report["accepted"] == 1 and report["set_aside_by_reason"] == {
        "malformed_annotations": 1, "malformed_result": 1, "nested_too_deeply": 2}
    aside = [json.loads(line) for f in (out / "review" / "set_aside").iterdir() for line in f.read_text().splitlines()]
    assert len(aside) == 4 and all(len(json.dumps(a)) < 2500 for a in aside)


def test_set_aside_excerpts_are_bounded():
    from pipelines.review_import import RAW_DEPTH, RAW_LIMIT, raw_excerpt

    assert (RAW_LIMIT, RAW_DEPTH) == (2000, 20)
    small = {"a": ["x" * 100]}
    assert raw_excerpt(small) is small  # kept as it is
    cut = raw_excerpt(["y" * 5000])
    assert cut == '["' + "y" * (RAW_LIMIT - 2) + " [...]"
    assert raw_excerpt(json.loads("[" * RAW_DEPTH + "]" * RAW_DEPTH)) != "[nested more than 20 levels deep]"
    assert raw_excerpt(json.loads("[" * (RAW_DEPTH + 1) + "]" * (RAW_DEPTH + 1))) == "[nested more than 20 levels deep]"


def test_import_command_line_exit_codes_and_report(tmp_path, capsys):
    """`python -m pipelines.review import`: a command and --config are required (argparse
    exits 2), an unreadable config is exit 2 with one error line, and the report is
    printed as indented JSON, then how to apply the reviews."""
    for argv in ([], ["import", str(tmp_path / "a.jsonl")]):
        with pytest.raises(SystemExit) as exit_:
            review_main(argv)
        assert exit_.value.code == 2
    capsys.readouterr()
    assert review_main(["import", "--config", str(tmp_path / "missing.yaml"), "a.jsonl"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "missing.yaml" in err and err.count("\n") == 1
    config = queued_job(tmp_path)  # its labeller is not trained: import does not need it
    (tmp_path / "a.jsonl").write_text(json.dumps({"task_id": "t1", "labels": {"language": "fr"}}) + "\n")
    assert review_main(["import", "--config", str(config), str(tmp_path / "a.jsonl")]) == 0
    printed = capsys.readouterr().out
    report, hint = printed.split("\nrun the label stage again")
    assert report.startswith('{\n  "files": [\n    "') and json.loads(report)["accepted"] == 1
    assert hint == f" to apply them: python -m pipelines.run --config {config} --stages label\n"


# ---------------------------------------------------------------- field and file sizes (issue 36, item 16)

BIG = 20 << 20  # 20 MB: a field no export legitimately holds


def test_import_caps_field_sizes_and_names_the_task(tmp_path, capsys):
    """A 20 MB reviewer, choice, label set name, time or task id, in our JSONL, a Label
    Studio export and its JSON-MIN form: each review is set aside as ``field_too_large``
    with an error naming the task and the field, and nothing written holds more than a
    bounded excerpt. A 20 MB lead time is not read at all. The good answer is accepted."""
    config = queued_job(tmp_path)
    big = "x" * BIG
    answers = [{"task_id": "t1", "labels": {"language": "fr"}, "reviewer": big},
               {"task_id": "t2", "labels": {"language": big}, "reviewer": "ann"},
               {"task_id": "t2", "labels": {big: "de"}, "reviewer": "ann"},
               {"task_id": "t2", "labels": {"language": "fr"}, "reviewed_at": big},
               {"task_id": big, "labels": {"language": "fr"}},
               {"task_id": "t3", "labels": {"language": "fr"}, "reviewer": "ann",
                "reviewed_at": "2026-12-01T10:00:00Z"}]
    export = [{"data": {"task_id": "t1"}, "annotations": [
        {"completed_by": {"email": big}, "lead_time": big, "result": [
            {"from_name": "language", "type": "choices", "value": {"choices": ["fr"]}}]},
        {"completed_by": 3, "lead_time": big, "result": [
            {"from_name": "language", "type": "choices", "value": {"choices": [big]}}]}]}]
    json_min = [{"task_id": "t2", "language": "fr", "annotator": big, "lead_time": big},
                {"task_id": "t2", "language": "fr", "annotator": 5, "updated_at": big}]
    files = {"answers.jsonl": "".join(json.dumps(a) + "\n" for a in answers),
             "export.json": json.dumps(export), "min.json": json.dumps(json_min)}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    assert review_main(["import", "--config", str(config)] + [str(tmp_path / n) for n in files]) == 0
    report = json.loads(capsys.readouterr().out.split("\nrun the label")[0])
    assert (report["candidates"], report["accepted"], report["set_aside_by_reason"]) == (
        10, 1, {"field_too_large": 9})
    review = tmp_path / "out" / "review"
    for path in list((review / "set_aside").iterdir()) + list((review / "reviews").iterdir()):
        assert path.stat().st_size < 30_000, path  # nine rows, each field cut to its limit
    aside = [json.loads(line) for f in (review / "set_aside").iterdir() for line in f.read_text().splitlines()]
    fields = [re.match(r"task '(.*?)'.*: (\w+) has (\d+) characters, more than the (\d+) an import accepts",
                       row["error"]).groups() for row in aside]
    assert sorted((task[:4], field) for task, field, size, _ in fields if int(size) >= BIG) == sorted([
        ("t1", "reviewer"), ("t2", "value"), ("t2", "set"), ("t2", "reviewed_at"), ("xxxx", "task_id"),
        ("t1", "reviewer"), ("t1", "value"), ("t2", "reviewer"), ("t2", "reviewed_at")])
    assert all(len(row["reviewer"]) <= 256 + 30 and len(row["task_id"]) <= 2048 + 30 for row in aside)
    [stored] = [json.loads(line) for f in (review / "reviews").iterdir() for line in f.read_text().splitlines()]
    assert (stored["task_id"], stored["value"], stored["reviewer"]) == ("t3", "fr", "ann")


def test_merge_reviews_keeps_known_long_names_and_cuts_unknown_ones():
    """The limits apply to what names nothing known: a queued task id or a taxonomy value
    longer than the limit is accepted; a long unknown task id is set aside cut."""
    from pipelines.review_import import FIELD_LIMITS, bounded_row

    long_id, long_value = "t" * 3000, "v" * 2000
    config = LabelConfig(sets=(LabelSetConfig("language", ("de", long_value), "m"),))
    tasks = {long_id: {"task_id": long_id, "doc_id": long_id, "suggestions": {}}}
    accepted, aside = merge_reviews([cand(long_id, long_value), cand("u" * 3000, "de"),
                                     cand(long_id, "de", who="r" * 257)], tasks, config, [])
    assert [(r.task_id, r.value) for r in accepted] == [(long_id, long_value)]
    assert [a["reason"] for a in aside] == ["field_too_large", "field_too_large"]
    assert "task_id has 3000 characters" in aside[0]["error"] and "reviewer has 257" in aside[1]["error"]
    cut = bounded_row(aside[0])
    assert cut["task_id"] == "u" * FIELD_LIMITS["task_id"] + " [... 3000 characters]"


def test_an_import_file_over_the_size_limit_is_set_aside_unread(tmp_path, capsys):
    """A file past ``MAX_IMPORT_BYTES`` (1 GiB, here sparse: nothing is written or read)
    is one ``file_too_large`` row whose error says to split it; the other files import."""
    from pipelines.review import MAX_IMPORT_BYTES

    config = queued_job(tmp_path)
    huge = tmp_path / "huge-export.json"
    with huge.open("wb") as handle:
        handle.truncate(MAX_IMPORT_BYTES + 1)
    (tmp_path / "ok.jsonl").write_text(json.dumps({"task_id": "t1", "labels": {"language": "fr"}}) + "\n")
    assert review_main(["import", "--config", str(config), str(huge), str(tmp_path / "ok.jsonl")]) == 0
    printed = capsys.readouterr()
    report = json.loads(printed.out.split("\nrun the label")[0])
    assert (report["accepted"], report["set_aside_by_reason"]) == (1, {"file_too_large": 1})
    [row] = [json.loads(line) for f in (tmp_path / "out" / "review" / "set_aside").iterdir()
             for line in f.read_text().splitlines()]
    assert row == {"reason": "file_too_large", "source": str(huge), "error": (
        f"{huge}: {MAX_IMPORT_BYTES + 1} bytes, over the {MAX_IMPORT_BYTES} one import reads; split it "
        "(Label Studio: export a filtered view per range of tasks) and import the parts")}
    assert f"set aside unread: {row['error']}" in printed.err  # the command's log
