"""The whole-pipeline benchmark's helpers (no datatrove needed: it lives in .bench-venv only)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import trafilatura
from warcio.archiveiterator import ArchiveIterator

from benchmarks.bench_pipeline import DATA, LID_WHOLE_TEXT, VARIANTS, copy_warcs, job_config, write_job_config
from benchmarks.scrapinghub import load_pages
from pipelines.config import load_config
from transforms.extract.html import Method, extract_html

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


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_job_config_is_valid_and_runs_the_compared_stages(tmp_path: Path, variant: str) -> None:
    copy_warcs([SAMPLE], tmp_path / "in", copies=1)
    path = write_job_config(tmp_path / "job.yaml", job_config(str(tmp_path / "out"), str(tmp_path / "in" / "*.warc.gz"),
                                                              variant=VARIANTS[variant]))
    config = load_config(str(path))  # also loads lid.176 and the sentencepiece model
    assert config.active_stages() == ("extract", "clean", "dedup_exact", "dedup_minhash", "tokenize")
    assert config.clean is not None and not config.clean.redact_pii
    assert not config.clean.anomaly.model and not config.clean.quality.model
    assert config.clean.langid.languages == ("en",) and config.clean.langid.threshold == 0.65
    assert config.tokenize is not None and config.tokenize.model.endswith(".model")
    assert config.extract is not None and config.extract.method == VARIANTS[variant].ours_method
    if VARIANTS[variant].ours_lid_whole_text:  # one window over the whole text, as datatrove's LanguageFilter
        assert config.clean.langid.max_windows == 1 and config.clean.langid.max_chars == LID_WHOLE_TEXT
    else:  # the stage's defaults
        assert (config.clean.langid.max_windows, config.clean.langid.max_chars) == (8, 1000)


def test_same_variant_gives_datatrove_the_options_our_trafilatura_method_uses(monkeypatch: pytest.MonkeyPatch) -> None:
    """datatrove's Trafilatura calls extract(html, favor_precision=favour_precision,
    include_comments=False, deduplicate=deduplicate, **rest): with the 'same' variant's
    arguments that must be the call our trafilatura method makes."""
    calls: list[dict] = []
    monkeypatch.setattr(trafilatura, "extract", lambda html, **kwargs: calls.append(kwargs) or "text")
    _, page, _ = load_pages(DATA / "html" / "scrapinghub")[0]
    extract_html(page, "", Method.TRAFILATURA)
    dt = dict(VARIANTS["same"].dt_extractor())
    dt.pop("timeout")  # datatrove's sandbox, not an extract() option
    datatrove_call = {"favor_precision": dt.pop("favour_precision"), "include_comments": False,
                      "deduplicate": dt.pop("deduplicate"), **dt}
    assert calls == [datatrove_call]


def test_median_run_is_a_run_that_happened() -> None:
    from benchmarks.bench_pipeline import median_run

    runs = [{"cpu": 5.0, "n": "a"}, {"cpu": 1.0, "n": "b"}, {"cpu": 3.0, "n": "c"}]
    assert median_run(runs)["n"] == "c"
    assert median_run(runs[:2])["n"] == "b"  # of two: the lower, not an average
    assert median_run(runs[:1])["n"] == "a"
