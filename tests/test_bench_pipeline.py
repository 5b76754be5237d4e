"""The whole-pipeline benchmark's helpers (no datatrove needed: it lives in .bench-venv only)."""

from __future__ import annotations

import re
from pathlib import Path

from warcio.archiveiterator import ArchiveIterator

from benchmarks.bench_pipeline import DATA, copy_warcs, job_config, write_job_config
from pipelines.config import load_config

SAMPLE = DATA / "warc" / "warcio_example.warc.gz"


def _records(path: Path) -> list[tuple[str, str, bytes, str]]:
    with open(path, "rb") as fh:
        return [(r.rec_type, r.rec_headers.get_header("WARC-Record-ID"), r.content_stream().read(),
                 r.rec_headers.get_header("WARC-Target-URI") or "") for r in ArchiveIterator(fh)]


def test_copies_are_valid_warcs_with_fresh_record_ids(tmp_path: Path) -> None:
    files = copy_warcs([SAMPLE], tmp_path, copies=2)
    assert [f.name for f in files] == ["copy000-warcio_example.warc.gz", "copy001-warcio_example.warc.gz"]
    original = _records(SAMPLE)
    copies = [_records(f) for f in files]
    for records in copies:
        assert [(t, body) for t, _, body, _ in records] == [(t, body) for t, _, body, _ in original]
    for k, records in enumerate(copies):  # exact URL dedup must not see the copies
        urls = [url for *_, url in records if url]
        assert urls and all(url.endswith(f"copy={k}") for url in urls)
    ids = [rid for records in copies for _, rid, _, _ in records]
    assert len(set(ids)) == len(ids)
    assert all(re.fullmatch(r"<urn:uuid:[0-9a-fA-F-]{36}>", rid) for rid in ids)


def test_job_config_is_valid_and_runs_the_compared_stages(tmp_path: Path) -> None:
    copy_warcs([SAMPLE], tmp_path / "in", copies=1)
    path = write_job_config(tmp_path / "job.yaml",
                            job_config(str(tmp_path / "out"), str(tmp_path / "in" / "*.warc.gz")))
    config = load_config(str(path))  # also loads lid.176 and the sentencepiece model
    assert config.active_stages() == ("extract", "clean", "dedup_exact", "dedup_minhash", "tokenize")
    assert config.clean is not None and not config.clean.redact_pii
    assert not config.clean.anomaly.model and not config.clean.quality.model
    assert config.clean.langid.languages == ("en",) and config.clean.langid.threshold == 0.65
    assert config.tokenize is not None and config.tokenize.model.endswith(".model")
