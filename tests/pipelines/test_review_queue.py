"""The review queue's files, exactly: our JSONL task, the Label Studio task and labelling
config built from it, and the three files ``write_queue`` leaves (no pipeline, no
browser: what Label Studio and the review page read, field by field)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from types import SimpleNamespace

import pytest

from pipelines.review import (TEXT_LIMIT, label_studio_config, label_studio_task, load_queue, review_task,
                              write_queue, write_text)
from transforms.doc import Doc, Label
from transforms.label.label import LabelConfig, LabelSetConfig

CFG = LabelConfig(sets=(LabelSetConfig("topic", ("news", "sport", 'a"quoted"<value>&'), "m", accept_threshold=0.9),
                        LabelSetConfig("tone", ("calm", "angry"), "m2", accept_threshold=0.6)))


def labelled(doc_id: str, text: str = "Body text.", **scores: float) -> Doc:
    labels = [Label("topic", "sport", scores.get("topic", 0.5), "model", "v2"),
              Label("tone", "calm", scores.get("tone", 0.95), "model", "v7"),
              Label("topic", "news", 1.0, "human", "v2", reviewer="ann", reviewed_at="2026-11-29T10:00:00Z"),
              Label("other", "x", 0.1, "model", "v9")]  # a set this config does not have
    return Doc(id=doc_id, url=f"https://example.org/{doc_id}", text=text, source="s.jsonl", fetched_at="",
               title=f"Title {doc_id}", labels=tuple(labels), source_id=f"own-{doc_id}")


def test_a_task_holds_the_model_suggestions_of_the_configured_sets_only():
    task = review_task(labelled("d1", topic=0.42), CFG)
    assert task == {
        "task_id": "d1", "doc_id": "d1", "source_id": "own-d1", "id_scheme": 2,
        "url": "https://example.org/d1", "title": "Title d1",
        "text": "Body text.", "text_truncated": False,
        "suggestions": {"topic": {"value": "sport", "score": 0.42, "version": "v2"},
                        "tone": {"value": "calm", "score": 0.95, "version": "v7"}},
        "taxonomy": {"topic": ["news", "sport", 'a"quoted"<value>&'], "tone": ["calm", "angry"]},
        "uncertainty": 1.0 - 0.42,
    }


def test_the_text_is_cut_at_the_limit_and_says_so():
    exact = review_task(labelled("d", text="x" * TEXT_LIMIT), CFG)
    assert len(exact["text"]) == TEXT_LIMIT and exact["text_truncated"] is False
    over = review_task(labelled("d", text="x" * (TEXT_LIMIT + 1)), CFG)
    assert len(over["text"]) == TEXT_LIMIT and over["text_truncated"] is True


def test_the_label_studio_task_carries_the_suggestions_as_one_prediction():
    task = review_task(labelled("d1", topic=0.42, tone=0.7), CFG)
    assert label_studio_task(task) == {
        "data": {"text": "Body text.", "task_id": "d1", "doc_id": "d1", "source_id": "own-d1",
                 "url": "https://example.org/d1", "title": "Title d1"},
        "predictions": [{"model_version": "v2,v7", "score": 0.42, "result": [
            {"id": "topic-pred", "from_name": "topic", "to_name": "text", "type": "choices",
             "value": {"choices": ["sport"]}},
            {"id": "tone-pred", "from_name": "tone", "to_name": "text", "type": "choices",
             "value": {"choices": ["calm"]}}]}],
    }
    # versions sorted and each once; the score is the least confident suggestion
    task["suggestions"]["tone"]["version"] = "v2"
    task["suggestions"]["tone"]["score"] = 0.3
    prediction = label_studio_task(task)["predictions"][0]
    assert prediction["model_version"] == "v2" and prediction["score"] == 0.3
    task["suggestions"] = {}
    assert label_studio_task(task)["predictions"] == [{"model_version": "", "score": 0.0, "result": []}]


def test_the_labelling_config_has_one_single_choice_control_per_set_and_escapes_values():
    xml = label_studio_config(CFG)
    assert xml.endswith("</View>\n") and xml.startswith('<View>\n  <Text name="text" value="$text"/>\n')
    root = ET.fromstring(xml)
    assert [h.get("value") for h in root.iter("Header")] == ["topic", "tone"]
    choices = root.findall("Choices")
    assert [(c.get("name"), c.get("toName"), c.get("choice"), c.get("required")) for c in choices] \
        == [("topic", "text", "single", "false"), ("tone", "text", "single", "false")]
    assert [[v.get("value") for v in c.iter("Choice")] for c in choices] \
        == [["news", "sport", 'a"quoted"<value>&'], ["calm", "angry"]]


def test_write_queue_leaves_three_files_in_order_of_importance(tmp_path: Path):
    docs = [labelled("d2", topic=0.3), labelled("d1", text="Zwei Wörter — ünïcode", topic=0.6)]
    out = tmp_path / "review"
    out.mkdir()
    assert write_queue(str(out), docs, CFG) == {"directory": str(out), "tasks": 2}
    assert sorted(p.name for p in out.iterdir()) == ["label_config.xml", "tasks.json", "tasks.jsonl"]
    assert (out / "label_config.xml").read_text(encoding="utf-8") == label_studio_config(CFG)
    ours = load_queue(str(out / "tasks.jsonl"))
    assert [t["task_id"] for t in ours] == ["d2", "d1"] and ours == [review_task(d, CFG) for d in docs]
    raw = (out / "tasks.jsonl").read_text(encoding="utf-8")
    assert "Zwei Wörter — ünïcode" in raw and raw.endswith("\n") and raw.count("\n") == 2  # not \u-escaped
    studio = json.loads((out / "tasks.json").read_text(encoding="utf-8"))
    assert studio == [label_studio_task(t) for t in ours]
    assert "ünïcode" in (out / "tasks.json").read_text(encoding="utf-8")
    assert write_queue(str(out), [], CFG)["tasks"] == 0 and (out / "tasks.jsonl").read_text() == ""


def test_write_text_replaces_the_file_whole_and_leaves_no_temporary(tmp_path: Path):
    path = tmp_path / "f.json"
    write_text(str(path), "first ünïcode")
    write_text(str(path), "second")
    assert path.read_bytes() == b"second" and [p.name for p in tmp_path.iterdir()] == ["f.json"]


# ---------------------------------------------------------------- the serve command

def _queue(tmp_path: Path) -> Path:
    out = tmp_path / "queue"
    out.mkdir()
    write_queue(str(out), [labelled("d1", topic=0.3), labelled("d2", topic=0.5)], CFG)
    return out


class _StopAfter:
    """Stands in for pipelines.review's ``threading.Event``: its ``wait`` runs ``check``
    (the server is up then), then stops the command as Ctrl-C would."""

    def __init__(self, check) -> None:
        self.check = check

    def __call__(self) -> "_StopAfter":
        return self

    def wait(self) -> None:
        self.check()
        raise KeyboardInterrupt


def test_the_serve_command_serves_the_queue_until_interrupted(tmp_path, capsys, monkeypatch):
    import socket
    import urllib.request

    import pipelines.review as review

    seen: dict = {}

    def check() -> None:
        printed = capsys.readouterr().out
        url = printed.split("review page: ", 1)[1].split("\n", 1)[0]
        seen["url"], seen["printed"] = url, printed
        with urllib.request.urlopen(url.replace("/?token=", "/api/state?token="), timeout=10) as r:
            seen["state"] = json.loads(r.read())

    monkeypatch.setattr(review, "threading", SimpleNamespace(Event=_StopAfter(check)))
    queue, answers = _queue(tmp_path), tmp_path / "answers.jsonl"
    code = review.main(["serve", "--queue", str(queue), "--out", str(answers), "--reviewer", "rita", "--port", "0"])
    assert code == 0
    assert f"(2 tasks, answers to {answers};" in seen["printed"] and "Ctrl-C stops" in seen["printed"]
    assert seen["url"].startswith("http://127.0.0.1:") and "?token=" in seen["url"]
    assert [t["task_id"] for t in seen["state"]["tasks"]] == ["d1", "d2"] and seen["state"]["reviewer"] == "rita"
    port = int(seen["url"].split(":")[2].split("/")[0])
    with socket.socket() as s:  # shut down: nothing listens there any more
        assert s.connect_ex(("127.0.0.1", port)) != 0
    # the queue's tasks.jsonl names the same queue
    monkeypatch.setattr(review, "threading", SimpleNamespace(Event=_StopAfter(lambda: None)))
    assert review.main(["serve", "--queue", str(queue / "tasks.jsonl"), "--out", str(answers), "--port", "0"]) == 0


def test_the_serve_command_fails_clearly_on_a_bad_queue_or_a_taken_port(tmp_path, capsys, monkeypatch):
    import socket

    import pipelines.review as review

    code = review.main(["serve", "--queue", str(tmp_path / "nowhere"), "--out", str(tmp_path / "a.jsonl"),
                        "--port", "0"])
    err = capsys.readouterr().err
    assert code == 2 and err == (f"error: cannot read queue {tmp_path / 'nowhere'}: [Errno 2] No such file or "
                                 f"directory: '{tmp_path / 'nowhere' / 'tasks.jsonl'}'\n")  # the folder's tasks.jsonl
    for missing in (["--out", str(tmp_path / "a.jsonl")], ["--queue", str(tmp_path)]):
        with pytest.raises(SystemExit) as usage:  # both are required
            review.main(["serve", *missing])
        assert usage.value.code == 2
    capsys.readouterr()
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"task_id": "t1"}\n')  # a task without its fields
    assert review.main(["serve", "--queue", str(bad), "--out", str(tmp_path / "a.jsonl")]) == 2
    assert "cannot read queue" in capsys.readouterr().err
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        code = review.main(["serve", "--queue", str(_queue(tmp_path)), "--out", str(tmp_path / "a.jsonl"),
                            "--port", str(port)])
    assert code == 2 and capsys.readouterr().err.startswith(f"error: cannot listen on 127.0.0.1:{port}: ")


def test_the_serve_command_defaults_to_the_user_and_port_8766(tmp_path, monkeypatch):
    import pipelines.review as review
    import pipelines.review_server as review_server

    asked = {}

    def refuse(session, port):
        asked.update(reviewer=session.reviewer, port=port, tasks=len(session.tasks), out=session.out)
        raise OSError("refused for the test")

    monkeypatch.setattr(review_server, "serve", refuse)
    monkeypatch.setenv("USER", "mallory")
    queue = _queue(tmp_path)
    # the default is read when the parser is built, so after USER is set
    assert review.main(["serve", "--queue", str(queue), "--out", str(tmp_path / "a.jsonl")]) == 2
    assert asked == {"reviewer": "mallory", "port": 8766, "tasks": 2, "out": str(tmp_path / "a.jsonl")}
    monkeypatch.delenv("USER")
    review.main(["serve", "--queue", str(queue), "--out", "o.jsonl", "--reviewer", "x", "--port", "9"])
    assert (asked["reviewer"], asked["port"], asked["out"]) == ("x", 9, "o.jsonl")
    review.main(["serve", "--queue", str(queue), "--out", "o.jsonl"])
    assert asked["reviewer"] == "reviewer"
