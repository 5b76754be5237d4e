"""The review server refuses everything but its own page's requests: plain HTTP tests
(token, Host, Origin, content type, bodies, timeouts) and a real cross-origin attack in
headless Chromium."""

from __future__ import annotations

import http.client
import json
import os
import socket
import time
from pathlib import Path

import pytest

from pipelines.review_page import AnswerError, ReviewSession
from pipelines.review_server import (IDLE_TIMEOUT_S, LINGER_BYTES, LINGER_S, MAX_BODY_BYTES,
                                     REQUEST_DEADLINE_S, ReviewServer, serve)
from tests.browser import PageSite, chromium  # noqa: F401  (fixture)
from tests.labelmodels import LANGS

TAXONOMY = {"language": list(LANGS), "quality": ["low", "high"]}


def tasks() -> list[dict]:
    return [{"task_id": f"t{i}", "doc_id": f"d{i}", "url": f"https://example.org/{i}", "title": "",
             "text": f"Document {i} secret text", "text_truncated": False, "taxonomy": TAXONOMY,
             "suggestions": {"language": {"value": "de", "score": 0.41, "version": "v1"},
                             "quality": {"value": "high", "score": 0.55, "version": "q1"}},
             "uncertainty": 0.59} for i in range(3)]


@pytest.fixture
def server(tmp_path):
    srv = serve(ReviewSession(tasks(), str(tmp_path / "answers.jsonl"), "rita"), port=0,
                idle_timeout_s=1.0, request_deadline_s=2.0)
    yield srv
    srv.shutdown()
    srv.server_close()


def call(srv: ReviewServer, method: str, path: str, body: bytes | None = None,
         headers: dict[str, str] | None = None, host: str | None = None) -> tuple[int, dict, bytes]:
    """One request with exactly the given headers (Host too)."""
    port = srv.server_address[1]
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
    conn.putheader("Host", host if host is not None else f"127.0.0.1:{port}")
    for name, value in (headers or {}).items():
        conn.putheader(name, value)
    if body is not None and "Content-Length" not in (headers or {}):
        conn.putheader("Content-Length", str(len(body)))
    conn.endheaders(body)
    response = conn.getresponse()
    data = response.read()
    conn.close()
    return response.status, dict(response.getheaders()), data


def answer(srv: ReviewServer, body: object, **headers: str) -> tuple[int, bytes]:
    hdrs = {"Content-Type": "application/json", "X-Review-Token": srv.token, **headers}
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    status, _, data = call(srv, "POST", "/api/answer", raw, hdrs)
    return status, data


def answers_file(tmp_path: Path) -> dict[str, dict]:
    path = tmp_path / "answers.jsonl"
    if not path.exists():
        return {}
    return {r["task_id"]: r["labels"] for r in map(json.loads, path.read_text().splitlines())}


GOOD = {"task_id": "t0", "labels": {"language": "en", "quality": "low"}}


def test_token_is_required_and_accepted_in_url_cookie_and_headers(server):
    port = server.server_address[1]
    for headers in ({}, {"X-Review-Token": "wrong"}, {"Cookie": f"{server.cookie}=wrong"},
                    {"Authorization": "token "}, {"Cookie": "=;;bad\x7f"}):
        for path in ("/", "/api/state"):
            status, _, data = call(server, "GET", path, headers=headers)
            assert status == 403 and b"secret text" not in data and b"session token" in data
    status, headers, page = call(server, "GET", f"/?token={server.token}")
    assert status == 200 and b"<!doctype html>" in page
    assert headers["Set-Cookie"] == f"{server.cookie}={server.token}; HttpOnly; SameSite=Strict; Path=/"
    assert "frame-ancestors 'none'" in headers["Content-Security-Policy"]
    assert headers["X-Frame-Options"] == "DENY" and headers["Referrer-Policy"] == "no-referrer"
    for headers in ({"Cookie": f"other=1; {server.cookie}={server.token}"},
                    {"X-Review-Token": server.token}, {"Authorization": f"token {server.token}"},
                    {"Authorization": f"Bearer {server.token}"}):
        status, _, data = call(server, "GET", "/api/state", headers=headers)
        assert status == 200 and json.loads(data)["total"] == 3
    assert server.url == f"http://127.0.0.1:{port}/?token={server.token}" and len(server.token) >= 40
    other = serve(ReviewSession(tasks(), "/nonexistent/a.jsonl", "x"), port=0)
    try:
        assert other.token != server.token  # random per server
    finally:
        other.shutdown()
        other.server_close()
    assert call(server, "GET", "/favicon.ico")[0] == 204  # no data, no token needed


@pytest.mark.parametrize("host", ["evil.example:{port}", "evil.example", "127.0.0.1:1", "127.0.0.1",
                                  "localhost.evil.example:{port}", ""])
def test_a_foreign_host_gets_nothing_even_with_the_token(server, host):
    """DNS rebinding: a page of evil.example whose name now resolves to 127.0.0.1."""
    port = server.server_address[1]
    status, _, data = call(server, "GET", f"/api/state?token={server.token}", host=host.format(port=port))
    assert status in (400, 403) and b"secret text" not in data
    status, _, _ = call(server, "POST", "/api/answer", json.dumps(GOOD).encode(),
                        {"Content-Type": "application/json", "X-Review-Token": server.token},
                        host=host.format(port=port))
    assert status in (400, 403)
    for ok in (f"127.0.0.1:{port}", f"localhost:{port}", f"LOCALHOST:{port}", f"[::1]:{port}"):
        assert call(server, "GET", f"/api/state?token={server.token}", host=ok)[0] == 200


@pytest.mark.parametrize("headers", [
    {"Origin": "http://127.0.0.1:1"}, {"Origin": "http://evil.example"}, {"Origin": "null"},
    {"Origin": "https://127.0.0.1:{port}"}, {"Sec-Fetch-Site": "same-site"},
    {"Sec-Fetch-Site": "cross-site"},
])
def test_a_foreign_origin_cannot_answer_or_read(server, tmp_path, headers):
    port = server.server_address[1]
    headers = {k: v.format(port=port) for k, v in headers.items()}
    assert answer(server, GOOD, **headers)[0] == 403
    status, _, data = call(server, "GET", "/api/state", headers={"X-Review-Token": server.token, **headers})
    assert status == 403 and b"secret text" not in data
    assert answers_file(tmp_path) == {}
    assert answer(server, GOOD, Origin=f"http://127.0.0.1:{port}", **{"Sec-Fetch-Site": "same-origin"})[0] == 200
    assert answers_file(tmp_path) == {"t0": GOOD["labels"]}


@pytest.mark.parametrize("body,kind,status,message", [
    (json.dumps(GOOD).encode(), "text/plain", 415, "must be application/json"),
    (b"task_id=t0&labels=x", "application/x-www-form-urlencoded", 415, "must be application/json"),
    (json.dumps(GOOD).encode(), "", 415, "must be application/json"),
    (b"{not json", "application/json", 400, "not JSON"),
    (b"\xff\xfe", "application/json", 400, "not JSON"),
    (b"[" * 30000 + b"]" * 30000, "application/json", 400, "not JSON"),  # RecursionError before
    (json.dumps([GOOD]).encode(), "application/json", 400, "must be an object"),
    (b'"t0"', "application/json", 400, "must be an object"),
    (b"null", "application/json", 400, "must be an object"),
    (json.dumps({**GOOD, "extra": 1}).encode(), "application/json", 400, "unknown key 'extra'"),
    (json.dumps({"task_id": 5, "labels": GOOD["labels"]}).encode(), "application/json", 400, "task_id must"),
    (json.dumps({"task_id": "t0", "labels": ["en"]}).encode(), "application/json", 400, "labels must"),
    (json.dumps({"task_id": "t0", "labels": {"language": 5}}).encode(), "application/json", 400, "labels must"),
    (json.dumps({"task_id": "t0"}).encode(), "application/json", 400, "labels must"),
    (json.dumps({"task_id": "t0", "labels": {}}).encode(), "application/json", 400, "labels is empty"),
    (json.dumps({"task_id": "t0", "labels": {"topic": "x"}}).encode(), "application/json", 400,
     "unknown label set"),
    (json.dumps({"task_id": "t0", "labels": {"language": "klingon"}}).encode(), "application/json", 400,
     "not in the taxonomy"),
    (json.dumps({"task_id": "nope", "labels": {"language": "de"}}).encode(), "application/json", 400,
     "unknown task"),
])
def test_bad_bodies_get_a_4xx_answer_and_change_nothing(server, tmp_path, body, kind, status, message):
    assert answer(server, GOOD)[0] == 200
    got, data = answer(server, body, **{"Content-Type": kind})
    assert (got, message in json.loads(data)["error"]) == (status, True)
    assert answers_file(tmp_path) == {"t0": GOOD["labels"]}  # {"labels": {}} erased it before


def test_partial_answers_add_to_an_earlier_one(server, tmp_path):
    assert answer(server, {"task_id": "t1", "labels": {"language": "fr"}})[0] == 200
    assert answer(server, {"task_id": "t1", "labels": {"quality": "low"}})[0] == 200
    assert answers_file(tmp_path) == {"t1": {"language": "fr", "quality": "low"}}
    row = json.loads((tmp_path / "answers.jsonl").read_text())
    assert row["corrected"] == ["language", "quality"]


def test_missing_negative_and_huge_lengths(server, tmp_path):
    hdrs = {"Content-Type": "application/json", "X-Review-Token": server.token}
    port = server.server_address[1]
    huge = b"x" * (8 * MAX_BODY_BYTES)  # sent whole: the 413 must still arrive, not a reset
    status, _, data = call(server, "POST", "/api/answer", huge, hdrs)
    assert status == 413 and b"Content-Length must be" in data
    for length, expected in (("-5", 400), ("abc", 400), ("0", 400), (str(10 ** 12), 413)):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(f"POST /api/answer HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-Review-Token: "
                         f"{server.token}\r\nContent-Type: application/json\r\nContent-Length: {length}"
                         "\r\n\r\n{".encode())
            reply = sock.recv(65536)
        assert reply.startswith(f"HTTP/1.0 {expected}".encode()), (length, reply[:80])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:  # chunked: no length
        sock.sendall(f"POST /api/answer HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-Review-Token: {server.token}"
                     "\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"
                     .encode())
        assert sock.recv(65536).startswith(b"HTTP/1.0 411")
    for method in ("PUT", "DELETE", "OPTIONS", "PATCH"):
        status, headers, _ = call(server, method, "/api/answer", b"{}", hdrs)
        assert status == 405 and "Access-Control-Allow-Origin" not in headers
    assert call(server, "POST", "/api/other", b"{}", hdrs)[0] == 404
    assert answers_file(tmp_path) == {}


def closed_after(sock: socket.socket, limit: float) -> float:
    """Seconds until the server closed ``sock`` (reads until EOF or reset)."""
    started = time.monotonic()
    sock.settimeout(limit)
    try:
        while sock.recv(4096):
            pass
    except ConnectionResetError:
        pass
    return time.monotonic() - started


def test_idle_and_slowloris_connections_are_closed(server, tmp_path):
    port = server.server_address[1]
    idle = socket.create_connection(("127.0.0.1", port))
    assert 0.5 < closed_after(idle, 10) < 4  # idle_timeout_s=1
    slow = socket.create_connection(("127.0.0.1", port))
    request = (f"POST /api/answer HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-Review-Token: {server.token}\r\n"
               f"Content-Type: application/json\r\nContent-Length: {len(json.dumps(GOOD))}\r\n\r\n"
               + json.dumps(GOOD)).encode()
    started, sent = time.monotonic(), 0
    try:
        for byte in request:  # one byte every 0.3 s: never idle for 1 s, but far too slow
            slow.sendall(bytes([byte]))
            sent += 1
            if sent == 3:  # meanwhile the server still serves others
                assert answer(server, {"task_id": "t2", "labels": {"quality": "low"}})[0] == 200
            time.sleep(0.3)
    except (BrokenPipeError, ConnectionResetError):
        pass
    remaining = closed_after(slow, 10)
    assert time.monotonic() - started < 6 and sent < len(request)  # request_deadline_s=2
    assert remaining < 5
    assert ("-", "-", 408, "request deadline passed") in server.refused
    assert answers_file(tmp_path) == {"t2": {"quality": "low"}}  # served meanwhile; slow one never stored


def test_default_limits():
    """The defaults the server runs with (the test above uses shorter ones)."""
    assert (IDLE_TIMEOUT_S, REQUEST_DEADLINE_S, MAX_BODY_BYTES) == (10.0, 30.0, 64 * 1024)
    assert (LINGER_BYTES, LINGER_S) == (16 * 1024 * 1024, 2.0)
    srv = serve(ReviewSession(tasks(), "/nonexistent/a.jsonl", "x"), port=0)
    try:
        assert (srv.idle_timeout_s, srv.request_deadline_s, srv.max_body_bytes) == (10.0, 30.0, 65536)
        sock = socket.create_connection(("127.0.0.1", srv.server_address[1]))
        assert 9 < closed_after(sock, 20) < 14
    finally:
        srv.shutdown()
        srv.server_close()


def test_session_validates_tasks_and_resume_lines(tmp_path):
    with pytest.raises(ValueError, match="task 2: taxonomy must map"):
        ReviewSession([tasks()[0], {"task_id": "x", "doc_id": "y", "taxonomy": {"a": "not a list"}}], "a", "r")
    with pytest.raises(ValueError, match="task 1: task_id must be a string"):
        ReviewSession([{"doc_id": "d"}], "a", "r")
    out = tmp_path / "answers.jsonl"
    out.write_text("[" * 100_000 + "\n" + json.dumps({"task_id": "t1", "labels": {"language": "fr"}}) + "\n"
                   + json.dumps({"task_id": "t2", "labels": 5}) + "\n")
    session = ReviewSession(tasks(), str(out), "r")
    assert session.progress() == {"done": 1, "total": 3}
    with pytest.raises(AnswerError, match="labels is empty"):
        session.answer("t1", {})
    assert json.loads(out.read_text().splitlines()[1])["labels"] == {"language": "fr"}  # untouched


ATTACK = """<!doctype html><html><body>
<iframe name="sink1"></iframe><iframe name="sink2"></iframe>
<form id="f1" method="POST" action="{review}/api/answer" enctype="text/plain" target="sink1">
<input name='{{"task_id":"t0","labels":{{"language":"fr","quality":"low"}},"x":"' value='"}}'></form>
<form id="f2" method="POST" action="{control}/api/answer" enctype="text/plain" target="sink2">
<input name='{{"task_id":"t0","labels":{{"language":"fr","quality":"low"}},"x":"' value='"}}'></form>
<script>
const R = {{}}, body = JSON.stringify({{task_id: "t0", labels: {{language: "fr", quality: "low"}}}});
let frames = 0;
for (const name of ["sink1", "sink2"]) document.getElementsByName(name)[0].addEventListener("load", () => frames++);
document.getElementById("f1").submit();
document.getElementById("f2").submit();
const tries = [
  fetch("{review}/api/answer", {{method: "POST", mode: "no-cors", credentials: "include",
    headers: {{"Content-Type": "text/plain"}}, body}}).then(() => R.nocors = "sent", () => R.nocors = "failed"),
  fetch("{review}/api/answer", {{method: "POST", credentials: "include",
    headers: {{"Content-Type": "application/json"}}, body}}).then((r) => R.json = "status " + r.status,
    () => R.json = "blocked"),
  fetch("{review}/api/state", {{credentials: "include"}}).then((r) => r.text()).then((t) => R.state = t,
    () => R.state = "blocked"),
];
Promise.all(tries).then(() => {{ const wait = () => {{ if (frames >= 2) {{
  document.body.dataset.result = JSON.stringify(R); }} else setTimeout(wait, 50); }}; wait(); }});
</script></body></html>"""


def test_cross_origin_attack_in_chromium_changes_nothing(tmp_path, chromium):
    """A page on another port of 127.0.0.1 (same site, so the SameSite cookie IS sent)
    auto-submits a text/plain form crafted as JSON and tries fetch(): the answer stays.
    The same form sent to a server without checks (the control) arrives intact."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    answers = tmp_path / "answers.jsonl"
    srv = serve(ReviewSession(tasks(), str(answers), "rita"), port=0)
    review = f"http://127.0.0.1:{srv.server_address[1]}"
    control = PageSite({})
    attacker = PageSite({})
    attacker.pages["/attack.html"] = ATTACK.format(review=review, control=control.origin)
    try:
        wait = WebDriverWait(chromium, 30)
        chromium.get(srv.url)  # the reviewer's browser: it holds the session cookie
        wait.until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "1")
        progress = chromium.find_element(By.ID, "progress")
        chromium.find_element(By.TAG_NAME, "body").send_keys(Keys.ENTER)  # t0: accept de / high
        wait.until(lambda d: progress.text == "1 / 3 reviewed")
        before = answers.read_text()
        chromium.get(f"{attacker.origin}/attack.html")
        wait.until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-result"))
        result = json.loads(chromium.find_element(By.TAG_NAME, "body").get_attribute("data-result"))
    finally:
        srv.shutdown()
        srv.server_close()
        control.close()
        attacker.close()
    assert answers.read_text() == before
    assert json.loads(before)["labels"] == {"language": "de", "quality": "high"}
    assert result["json"] == "blocked" and result["state"] == "blocked"  # no CORS grant, Origin refused
    # the control received the attack whole: the form POST is real and would have worked
    posts = [(h, b) for m, p, h, b in control.requests if m == "POST"]
    assert posts and json.loads(posts[0][1].decode())["labels"] == {"language": "fr", "quality": "low"}
    assert posts[0][0]["Content-Type"] == "text/plain" and posts[0][0]["Origin"] == attacker.origin
    refused = [(m, p, s) for m, p, s, _ in srv.refused]
    assert ("POST", "/api/answer", 403) in refused and ("GET", "/api/state", 403) in refused
    assert ("OPTIONS", "/api/answer", 405) in refused  # the JSON fetch's preflight


def test_two_servers_on_one_answers_file_lose_no_answer(tmp_path):
    """Two reviewers' servers on one queue and one answers file, answering in turn and
    then at once from 8 threads: every answer is in the file (before: each server
    rewrote the file from its own memory, 2 of the first 4 answers lost)."""
    import threading

    many = [{**tasks()[0], "task_id": f"t{i}", "doc_id": f"d{i}"} for i in range(20)]
    out = str(tmp_path / "answers.jsonl")
    servers = [serve(ReviewSession(many, out, name), port=0) for name in ("rita", "sam")]
    try:
        turns = [(0, "t0", {"language": "en"}), (1, "t1", {"language": "fr"}), (0, "t2", {"quality": "low"}),
                 (1, "t0", {"quality": "low"})]
        for which, task_id, labels in turns:
            assert answer(servers[which], {"task_id": task_id, "labels": labels})[0] == 200
        assert answers_file(tmp_path) == {"t0": {"language": "en", "quality": "low"}, "t1": {"language": "fr"},
                                          "t2": {"quality": "low"}}
        statuses: list[int] = []
        threads = [threading.Thread(target=lambda i=i: statuses.append(answer(
            servers[i % 2], {"task_id": f"t{i}", "labels": {"language": "de"}})[0])) for i in range(3, 20)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert statuses == [200] * 17
        assert sorted(answers_file(tmp_path), key=lambda t: int(t[1:])) == [f"t{i}" for i in range(20)]
        state = json.loads(call(servers[0], "GET", "/api/state", headers={"X-Review-Token": servers[0].token})[2])
        assert state["done"] == 20  # the other server's answers show on this one's page too
        assert sorted(os.listdir(tmp_path)) == ["answers.jsonl", "answers.jsonl.lock"]  # no .tmp left
    finally:
        for srv in servers:
            srv.shutdown()
            srv.server_close()
