"""Inputs over the network: S3 (a real moto S3 server) and HTTP with range requests."""

from __future__ import annotations

import gzip
import io
import json
import os
import threading
import uuid
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import boto3
import pytest

from pipelines.run import main
from tests.conftest import shared
from tests.s3server import s3_endpoint, s3_env  # noqa: F401 (fixtures)
from transforms.doc import Failure, RawRecord
from transforms.readers.files import match_pattern, open_input
from transforms.readers.tabular import TextFields, iter_jsonl
from transforms.readers.warc import WarcLimits, iter_warc


def upload(bucket: str, files: dict[str, bytes]) -> None:
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket=bucket)
    for key, body in files.items():
        s3.put_object(Bucket=bucket, Key=key, Body=body)


def test_s3_glob_warc_and_jsonl(s3_env):
    bucket = f"in-{uuid.uuid4().hex[:8]}"
    jsonl = gzip.compress(b"".join(json.dumps({"id": str(i), "text": f"doc {i}"}).encode() + b"\n"
                                   for i in range(10)))
    upload(bucket, {
        "cc/a.warc.gz": shared("warc", "resiliparse_warcfile.warc.gz").read_bytes(),
        "cc/b.warc.gz": shared("warc", "resiliparse_clipped.warc.gz").read_bytes(),
        "cc/notes.txt": b"not matched",
        "docs/part.jsonl.gz": jsonl,
    })
    refs = match_pattern(f"s3://{bucket}/cc/*.warc.gz")
    assert [r.url for r in refs] == [f"s3://{bucket}/cc/a.warc.gz", f"s3://{bucket}/cc/b.warc.gz"]
    assert refs[0].version  # the ETag: part of the resume fingerprint
    items = list(iter_warc(open_input(refs[0].url), refs[0].url, WarcLimits(), "extract"))
    assert sum(isinstance(i, RawRecord) for i in items) == 16
    items = list(iter_warc(open_input(refs[1].url), refs[1].url, WarcLimits(), "extract"))
    assert [i.offset for i in items if isinstance(i, Failure)] == [0]
    records = list(iter_jsonl(f"s3://{bucket}/docs/part.jsonl.gz", TextFields(), "extract"))
    assert [r.text for r in records] == [f"doc {i}" for i in range(10)]


def test_pipeline_reads_s3_inputs(s3_env, tmp_path):
    bucket = f"job-{uuid.uuid4().hex[:8]}"
    upload(bucket, {"w/x.warc.gz": shared("warc", "dolma_sample-0000.warc.gz").read_bytes()})
    config = tmp_path / "s3.yaml"
    config.write_text(f"output: {tmp_path / 'out'}\ninputs:\n  - format: warc\n"
                      f"    path: s3://{bucket}/w/*.warc.gz\nbeam_args: ['--runner=FnApiRunner']\n")
    assert main(["--config", str(config), "--log-level", "WARNING"], out=io.StringIO()) == 0
    counts = json.loads((tmp_path / "out" / "manifests" / "extract.json").read_text())["counts"]
    assert counts["records_in"] == 24 and counts["out"] + counts["rejected"] == 24
    assert counts["rejected_by_reason"] == {"content_type": 2}  # non-HTML records of the wget crawl


class RangeHandler(SimpleHTTPRequestHandler):
    """SimpleHTTPRequestHandler plus single-range requests (as real web servers do)."""

    def log_message(self, *args: object) -> None:
        pass

    def send_head(self):  # type: ignore[override]
        rng = self.headers.get("Range")
        path = self.translate_path(self.path)
        if not rng or not os.path.isfile(path):
            return super().send_head()
        size = os.path.getsize(path)
        start_s, _, end_s = rng.replace("bytes=", "").partition("-")
        start = int(start_s or 0)
        end = min(int(end_s) if end_s else size - 1, size - 1)
        fh = open(path, "rb")
        fh.seek(start)
        self.send_response(206)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.send_header("Content-Length", str(end - start + 1))
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        return io.BytesIO(fh.read(end - start + 1))


@pytest.fixture
def http_root():
    root = shared("warc")
    handler = lambda *a, **k: RangeHandler(*a, directory=str(root), **k)  # noqa: E731
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_http_warc_and_damaged_http_warc(http_root):
    url = f"{http_root}/cc_whirlwind.warc.wet.gz"
    refs = match_pattern(url)
    assert refs[0].url == url and refs[0].size == os.path.getsize(shared("warc", "cc_whirlwind.warc.wet.gz"))
    items = list(iter_warc(open_input(url), url, WarcLimits(), "extract"))
    assert [i.kind for i in items if isinstance(i, RawRecord)] == ["text"]
    clipped = f"{http_root}/resiliparse_clipped.warc.gz"
    items = list(iter_warc(open_input(clipped), clipped, WarcLimits(), "extract"))
    assert len(items) == 1 and isinstance(items[0], Failure) and clipped in items[0].error
    with pytest.raises(FileNotFoundError):
        match_pattern(f"{http_root}/missing.warc.gz")
