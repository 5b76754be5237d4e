"""The run report: pure collection on synthetic outputs, and a real job's report in Chromium."""

from __future__ import annotations

import dataclasses
import io
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from selenium.webdriver.common.by import By

from models.anomaly import DETECTORS
from pipelines import report, report_html
from pipelines.config import load_config
from pipelines.manifest import Manifest, StageCounts, write_manifest
from pipelines.report_html import render_html
from pipelines.run import main as run_main
from tests.browser import chromium, console_errors  # noqa: F401  (fixture)
from tests.cleanmodels import clean_models  # noqa: F401  (fixture)
from tests.conftest import shared
from tests.s3server import s3_endpoint, s3_env  # noqa: F401  (fixtures)
from transforms.doc import DOC_SCHEMA, REJECTED_SCHEMA, Doc, Rejected, Signals, doc_to_row, rejected_to_row

HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)>'


def manifest(output: Path, stage: str, counts: StageCounts, seconds: float | None = 2.0,
             started: str = "2026-01-01T00:00:00Z", finished: str = "2026-01-01T00:00:04Z") -> None:
    extra = {"seconds": seconds} if seconds is not None else {}
    write_manifest(str(output), Manifest(stage=stage, config_hash="h", inputs_fingerprint="f",
                                         code_version="v", counts=counts, inputs=[], outputs=[],
                                         started_at=started, finished_at=finished, runner="FnApiRunner",
                                         extra=extra))


def write_docs(path: Path, docs: list[Doc], rejected_reason: str = "") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if rejected_reason:
        rows, schema = [rejected_to_row(Rejected(d, rejected_reason, "detail")) for d in docs], REJECTED_SCHEMA
    else:
        rows, schema = [doc_to_row(d) for d in docs], DOC_SCHEMA
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)


def doc(i: int, lang: str = "en", words: float = 100.0, anomaly: float | None = 0.1,
        cluster: str = "") -> Doc:
    return Doc(id=f"d{i}", url=f"http://x/{i}", text="never read by the report", source="s", fetched_at="",
               lang=lang, lang_score=0.9, signals=Signals(words=words, dup_line_frac=0.05 * (i % 5)),
               anomaly_score=anomaly, dup_cluster=cluster)


@pytest.fixture
def synthetic(tmp_path: Path) -> Path:
    """An output with manifests (one stage unknown to STAGES) and clean / dedup / tokens data."""
    out = tmp_path / "out"
    manifest(out, "extract", StageCounts(10, 8, 1, 1, {"too_short": 1}, {"bad_record": 1}))
    manifest(out, "clean", StageCounts(8, 5, 3, 0, {"language": 2, HOSTILE: 1}), seconds=None)
    manifest(out, "dedup_minhash", StageCounts(5, 3, 2, 0, {"near_duplicate": 2}), seconds=0.5)
    manifest(out, "zz_custom", StageCounts(3, 3, 0, 0))
    manifest(out, "label", StageCounts(3, 3, 0, 0))
    write_docs(out / "docs/clean/part-00000-of-00001.parquet",
               [doc(0), doc(1, words=1e9), doc(2, anomaly=None), doc(3, lang=HOSTILE), doc(4)])
    write_docs(out / "rejected/clean/part-00000-of-00001.parquet",
               [doc(5, lang="de"), doc(6, lang="de"), doc(7, words=3.0)], rejected_reason="language")
    write_docs(out / "docs/dedup_minhash/part-00000-of-00001.parquet",
               [doc(0, cluster="c1"), doc(1, cluster="c2"), doc(4)])
    write_docs(out / "rejected/dedup_minhash/part-00000-of-00001.parquet",
               [doc(2, cluster="c1"), doc(3, cluster="c1")], rejected_reason="near_duplicate")
    index = {"version": "v2", "dtype": "uint16", "num_tokens": 30, "num_docs": 3,
             "shards": [{"name": HOSTILE, "num_tokens": 10, "num_docs": 1},
                        {"name": "shard-00001-of-00002.tfs", "num_tokens": 20, "num_docs": 2}]}
    for version, body in (("v1", dict(index, version="v1", shards=[])), ("v2", index)):
        (out / "tokens" / version).mkdir(parents=True)
        (out / "tokens" / version / "index.json").write_text(json.dumps(body))
    return out


def clean_config(tmp_path: Path, extra: str = "") -> object:
    data = tmp_path / "in.jsonl"
    data.write_text('{"id": "a", "text": "x"}\n')
    path = tmp_path / "job.yaml"
    path.write_text(f"output: {tmp_path / 'out'}\ninputs:\n  - format: jsonl\n    path: {data}\n"
                    f"clean:\n  langid:\n    model: lid.ftz\n    threshold: 0.4\n{extra}")
    return load_config(str(path), check_models=False)


def test_funnel_follows_manifests_in_stage_order(synthetic):
    rows = report.collect_funnel(str(synthetic))
    # STAGES order, then stages STAGES does not know (the new label stage may join STAGES).
    assert [r["stage"] for r in rows][:3] == ["extract", "clean", "dedup_minhash"]
    assert set(r["stage"] for r in rows[3:]) == {"label", "zz_custom"} and rows[-1]["stage"] == "zz_custom"
    extract = rows[0]
    assert (extract["in"], extract["out"], extract["rejected"], extract["failed"]) == (10, 8, 1, 1)
    assert extract["rejected_by_reason"] == {"too_short": 1}
    assert extract["failed_by_error"] == {"bad_record": 1} and extract["reconciles"]
    assert extract["docs_per_s"] == pytest.approx(10 / 2.0)
    assert rows[1]["seconds"] == 4.0 and rows[1]["docs_per_s"] == pytest.approx(2.0)  # from timestamps


def test_run_time_sums_the_stages_and_says_what_is_missing(synthetic, tmp_path):
    data = report.build_report(str(synthetic))
    run = data["run_time"]
    # extract 2.0, clean from its timestamps (4.0), dedup 0.5, label 2.0, zz_custom 2.0; no CPU recorded
    assert run["stages_wall_s"] == pytest.approx(10.5) and run["stages_cpu_s"] is None
    assert (run["first_started_at"], run["last_finished_at"]) == ("2026-01-01T00:00:00Z", "2026-01-01T00:00:04Z")
    assert "CPU not recorded (older manifests)" in render_html(data)
    out = tmp_path / "timed"
    for stage, cpu in (("extract", 90.0), ("clean", 3000.0)):
        write_manifest(str(out), Manifest(stage=stage, config_hash="h", inputs_fingerprint="f", code_version="v",
                                          counts=StageCounts(1, 1, 0, 0), inputs=[], outputs=[],
                                          started_at="2026-01-01T00:00:00Z", finished_at="2026-01-01T01:00:00Z",
                                          runner="FnApiRunner", extra={"seconds": 60.0, "cpu_seconds": cpu}))
    html = render_html(report.build_report(str(out)))
    assert "Run time: <b>2 min 00 s</b> wall, <b>51 min 30 s</b> CPU, summed over the 2 stages" in html
    assert [report_html.clock(x) for x in (59.94, 60.0, 3725.0)] == ["59.9 s", "1 min 00 s", "1 h 02 min"]


def test_histograms_count_every_document_without_reading_text(synthetic, monkeypatch):
    seen = []
    original = report.iter_batches
    monkeypatch.setattr(report, "iter_batches", lambda paths, cols: seen.append(tuple(cols)) or original(paths, cols))
    clean = report.collect_clean(str(synthetic))
    assert all("text" not in cols for cols in seen)
    assert clean["docs"] == 8
    words = clean["signals"]["words"]
    assert sum(sum(c) for c in words["counts"].values()) == words["n"] == 8
    assert sum(words["counts"]["kept"]) == 5 and sum(words["counts"]["rejected"]) == 3
    assert words["above"] == 1 and words["counts"]["kept"][-1] == 1  # 1e9 words: in the last bin
    anomaly = clean["anomaly_score"]
    assert anomaly["n"] == 7  # one document has no score
    langs = {r["lang"]: (r["kept"], r["rejected"]) for r in clean["languages"]}
    assert langs == {"en": (4, 1), "de": (0, 2), HOSTILE: (1, 0)}


def test_histogram_streams_batches():
    hist = report.Histogram(np.linspace(0, 1, 11))
    for chunk in np.array_split(np.linspace(0, 1, 1000), 7):
        hist.add(chunk, "kept")
    hist.add(np.array([np.nan, -1.0, 2.0]), "rejected")
    data = hist.to_json()
    assert data["n"] == 1002 and data["below"] == data["above"] == 1
    assert sum(data["counts"]["kept"]) == 1000 and sum(data["counts"]["rejected"]) == 2


def test_signals_are_drawn_with_the_thresholds_of_the_table_that_judged_them(synthetic, tmp_path):
    clean = report.collect_clean(str(synthetic))
    by_table = clean["signals_by_table"]
    # English first; German has a table of its own; the hostile language code has none: "other"
    assert list(by_table) == ["en", "de", "other"]
    assert {g: d["docs"] for g, d in by_table.items()} == {"en": 5, "de": 2, "other": 1}
    assert sum(d["signals"]["words"]["n"] for d in by_table.values()) == clean["signals"]["words"]["n"]
    config = clean_config(tmp_path)
    th = report.config_thresholds(config, list(by_table))
    assert set(th["signals_by_table"]) == {"en", "de"}
    english = {m["rule"]: m["value"] for m in th["signals_by_table"]["en"]["mean_word_length"]}
    german = {m["rule"]: m["value"] for m in th["signals_by_table"]["de"]["mean_word_length"]}
    assert english == {m["rule"]: m["value"] for m in th["signals"]["mean_word_length"]}  # the configured ones
    assert german["gopher_quality.max_mean_word_length"] > english["gopher_quality.max_mean_word_length"]
    html = render_html({**report.build_report(str(synthetic), config)})
    assert 'data-plot="signal-words"' in html and 'data-plot="signal-de-words"' in html
    assert '<details data-table="de"><summary>de: its own table&#x27;s thresholds: 2 documents</summary>' in html
    assert "languages without a table of their own" in html and 'data-plot="signal-other-words"' in html
    # a language the rules do not check gets no threshold
    only_en = clean_config(tmp_path, "  rules_languages: [en]\n")
    assert report.config_thresholds(only_en, ["en", "de"])["signals_by_table"]["de"] == {}


def test_table_groups_are_english_the_largest_others_then_other():
    def group(n: int) -> dict:
        h = report.Histogram(np.linspace(0, 1, 3))
        h.add(np.zeros(n), "kept")
        return {"words": h}

    by_table = {"other": group(50), "de": group(9), "fr": group(7), "es": group(7), "it": group(3), "nl": group(2),
                "pt": group(1), "en": group(1)}
    top = report._top_tables(by_table)
    # 6 in all: English first whatever its size, 4 others by size (ties by code), "other" last
    assert list(top) == ["en", "de", "es", "fr", "it", "other"] and report.MAX_TABLE_GROUPS == 6
    assert top["de"]["docs"] == 9 and top["other"]["docs"] == 50


def test_components_and_tokens(synthetic):
    comp = report.collect_components(str(synthetic))
    assert comp["sizes"] == {"1": 2, "3": 1} and comp["largest"] == 3  # c1 = 3 docs; c2 and d4 alone
    tokens = report.collect_tokens(str(synthetic))
    assert tokens["version"] == "v2" and [s["num_tokens"] for s in tokens["shards"]] == [10, 20]


def test_thresholds_come_from_the_config(tmp_path):
    config = clean_config(tmp_path, "  rules:\n    families: [gopher_quality]\n    gopher_quality:\n"
                                    "      min_words: 77\n      max_words: null\n"
                                    "  anomaly:\n    threshold: 0.42\n")
    th = report.config_thresholds(config)
    assert th["signals"]["words"] == [{"value": 77.0, "kind": "min", "rule": "gopher_quality.min_words",
                                       "active": True}]
    assert th["signals"]["dup_line_frac"][0]["active"] is False  # family switched off
    assert th["lang_score"] == 0.4 and th["anomaly"] == 0.42
    assert report.config_thresholds(None)["signals"] == {}


def test_anomaly_threshold_from_the_model_artifact(tmp_path, clean_models):
    from models.anomaly import AnomalyDetector

    detector = AnomalyDetector.load(clean_models["anomaly"])
    config = clean_config(tmp_path, f"  anomaly:\n    model: {clean_models['anomaly']}\n")
    thresholds = report.config_thresholds(config)
    assert thresholds["anomaly"] == pytest.approx(detector.threshold)
    assert [thresholds["anomaly_detectors"][d] for d in DETECTORS] == \
        pytest.approx(list(detector.detector_thresholds))
    broken = dataclasses.replace(config, clean=dataclasses.replace(
        config.clean, anomaly=dataclasses.replace(config.clean.anomaly, model=str(tmp_path / "gone.pt"))))
    assert report.config_thresholds(broken)["anomaly"] is None  # logged, not raised
    # read from meta.json: the report never imports torch for them
    import subprocess
    import sys

    script = ("import sys; from pipelines import report; from pipelines.config import load_config; "
              f"t = report.config_thresholds(load_config({config.source_file!r}, check_models=False)); "
              "assert t['anomaly'] is not None; print('torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=str(tmp_path))
    assert done.returncode == 0 and done.stdout.strip() == "False", done.stderr[-2000:]


def test_hostile_strings_are_escaped(synthetic):
    page = render_html(report.build_report(str(synthetic)))
    assert "<script" not in page and "<img" not in page
    assert html_escaped(HOSTILE) in page


def html_escaped(text: str) -> str:
    import html

    return html.escape(text, quote=True)


def test_missing_stages_and_empty_outputs(tmp_path):
    out = tmp_path / "out"
    manifest(out, "extract", StageCounts(2, 2, 0, 0))
    data = report.build_report(str(out))
    assert [s["stage"] for s in data["stages"]] == ["extract"]
    assert data["clean"] is None and data["dedup_components"] is None and data["tokens"] is None
    page = render_html(data)
    assert 'data-plot="funnel"' in page and 'data-plot="languages"' not in page
    assert report.build_report(str(tmp_path / "nothing"))["stages"] == []
    # a clean manifest without any Parquet: no plots of empty data, no crash
    manifest(out, "clean", StageCounts(0, 0, 0, 0))
    assert "No documents reached the clean stage" in render_html(report.build_report(str(out)))


def test_command_writes_both_files(synthetic, tmp_path, capsys):
    assert report.main(["--output", str(synthetic)]) == 0
    assert "report.html" in capsys.readouterr().out
    data = json.loads((synthetic / "report" / "report.json").read_text())
    assert data["stages"][0]["stage"] == "extract" and (synthetic / "report" / "report.html").exists()
    assert report.main(["--output", str(tmp_path / "not-an-output")]) == 2


def test_report_failure_does_not_fail_the_job(tmp_path, monkeypatch):
    data = tmp_path / "in.jsonl"
    data.write_text("".join(json.dumps({"id": str(i), "text": f"document {i} " * 30}) + "\n" for i in range(5)))
    config = tmp_path / "job.yaml"
    config.write_text(f"output: {tmp_path / 'out'}\ninputs:\n  - format: jsonl\n    path: {data}\n"
                      "beam_args: ['--runner=FnApiRunner']\n")

    def boom(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(report, "write_report", boom)
    out = io.StringIO()
    assert run_main(["--config", str(config), "--log-level", "ERROR", "--no-progress"], out=out) == 0
    assert "report: failed" in out.getvalue()
    out = io.StringIO()
    assert run_main(["--config", str(config), "--log-level", "ERROR", "--no-report"], out=out) == 0
    assert "report:" not in out.getvalue()


# ------------------------------------------------------------------ a real job, in Chromium


def job_corpus(tmp_path: Path) -> Path:
    """News articles with planted near-duplicate pairs, an exact duplicate and other languages."""
    lines = shared("neardup", "mccormick_articles_100.train").read_text(encoding="utf-8").splitlines()
    docs = [{"id": line.split(" ", 1)[0], "text": line.split(" ", 1)[1]} for line in lines if " " in line]
    docs.append({"id": "exact-copy", "text": docs[0]["text"]})
    for lang in ("de", "fr", "es"):
        sentences = shared("langid", "lingua_sentences", f"{lang}.txt").read_text(encoding="utf-8").splitlines()
        for k in range(4):
            docs.append({"id": f"{lang}{k}", "text": " ".join(sentences[k * 12:(k + 1) * 12])})
    path = tmp_path / "docs.jsonl"
    path.write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def real_job(tmp_path_factory) -> tuple[Path, str]:
    """extract → clean (lid.176 + an anomaly model trained on the corpus) → dedup → tokenize."""
    from tests.cleanmodels import train_small_detector

    tmp = tmp_path_factory.mktemp("report_job")
    corpus = job_corpus(tmp)
    texts = [json.loads(line)["text"] for line in corpus.read_text(encoding="utf-8").splitlines()]
    train_small_detector(texts, texts, str(tmp / "anomaly"))
    config = tmp / "job.yaml"
    config.write_text(f"""
output: {tmp / 'out'}
inputs:
  - format: jsonl
    path: {corpus}
clean:
  langid:
    model: {shared('models', 'lid.176.ftz')}
    languages: [en, de]
  anomaly:
    model: {tmp / 'anomaly'}
dedup: {{}}
tokenize:
  vocab_size: 500
  target_shard_bytes: 8000
beam_args: ["--runner=FnApiRunner"]
""")
    out = io.StringIO()
    code = run_main(["--config", str(config), "--log-level", "WARNING", "--no-progress"], out=out)
    assert code == 0, out.getvalue()
    return tmp / "out", out.getvalue()


def test_real_job_report_numbers(real_job):
    out, printed = real_job
    path = out / "report" / "report.html"
    assert f"report: {path}" in printed
    data = json.loads((out / "report" / "report.json").read_text())
    stages = [s["stage"] for s in data["stages"]]
    assert stages == ["extract", "clean", "dedup_exact", "dedup_minhash", "tokenizer", "tokenize"]
    for s in data["stages"]:
        manifest_counts = json.loads((out / "manifests" / f"{s['stage']}.json").read_text())["counts"]
        assert (s["in"], s["out"], s["rejected"], s["failed"]) == (
            manifest_counts["records_in"], manifest_counts["out"], manifest_counts["rejected"],
            manifest_counts["failed"])
        assert s["docs_per_s"] and s["docs_per_s"] > 0
    clean = data["stages"][1]
    import pyarrow.parquet as pq

    rejected = [r for f in sorted((out / "rejected" / "clean").glob("*.parquet"))
                for r in pq.read_table(f, columns=["id", "reason"]).to_pylist()]
    # documents language ID dropped carry no signals or scores (issue 37, item 5)
    by_language = sum(r["reason"] in ("language", "lang_score") for r in rejected)
    scored = clean["out"] + clean["rejected"] - by_language
    words = data["clean"]["signals"]["words"]
    assert by_language > 0 and words["n"] == scored
    assert data["clean"]["docs"] == clean["out"] + clean["rejected"]
    assert {r["lang"] for r in data["clean"]["languages"]} >= {"en", "de", "fr", "es"}
    assert data["thresholds"]["signals"]["words"][0]["value"] == 50.0
    assert data["thresholds"]["anomaly"] is not None
    # the anomaly section: every scored document in each detector's histogram, the top rows
    # by combined score, and exactly the documents the detector alone rejected
    anomaly = data["anomaly"]
    # German has 4 of the reference's ~105 documents, too few held out for a centre of its
    # own: no detector scores its documents (combined 0), and the report says so
    uncentred = anomaly["without_language_terms"]
    assert set(uncentred) == {"de"} and uncentred["de"] > 0
    centred = scored - uncentred["de"]
    assert {k: h["n"] for k, h in anomaly["histograms"].items()} == {
        "combined": scored, **{k: centred for k in DETECTORS}}
    only = {r["id"] for r in rejected if r["reason"] == "anomaly"}
    assert anomaly["caught_only_count"] == len(only) > 0, len(only)
    assert {e["id"] for e in anomaly["caught_only_by_detector"]} <= only
    assert all(e["status"] == "anomaly" and e["snippet"] for e in anomaly["caught_only_by_detector"])
    scores = [e["score"] for e in anomaly["top"]]
    assert scores == sorted(scores, reverse=True) and len(scores) == min(20, scored)
    assert data["dedup_components"]["largest"] >= 2  # the planted near-duplicate pairs
    index = json.loads(next((out / "tokens").glob("*/index.json")).read_text())
    assert sum(s["num_tokens"] for s in data["tokens"]["shards"]) == index["num_tokens"]


EXPECTED_PLOTS = {"funnel", "throughput", "languages", "lang_score", "anomaly", "dedup_components",
                  "anomaly-perplexity", "anomaly-representation", "anomaly-signals", "anomaly-context",
                  "tokens_per_shard", "signal-words", "signal-mean_word_length", "signal-symbol_word_ratio",
                  "signal-alpha_words_ratio", "signal-stop_words", "signal-dup_line_frac",
                  "signal-top_2gram_char_frac", "signal-dup_10gram_char_frac", "signal-c4_sentences",
                  "signal-fineweb_line_punct_ratio", "signal-fineweb_short_line_ratio"}


def test_real_job_report_renders_in_chromium(real_job, chromium, synthetic):  # noqa: F811
    out, _ = real_job
    chromium.get((out / "report" / "report.html").as_uri())
    assert console_errors(chromium) == []
    plots = {e.get_attribute("data-plot"): e for e in chromium.find_elements(By.CSS_SELECTOR, "[data-plot]")}
    assert EXPECTED_PLOTS <= set(plots)
    for name, element in plots.items():
        assert element.size["width"] > 100 and element.size["height"] > 50, name
        marks = element.find_elements(By.CSS_SELECTOR, "rect")
        assert marks and any(m.size["height"] > 0 for m in marks), name
        assert element.find_elements(By.CSS_SELECTOR, "text"), name  # title and axis labels
    thresholds = plots["signal-words"].find_elements(By.CSS_SELECTOR, "path.threshold")
    assert thresholds and thresholds[0].size["height"] > 0
    assert plots["anomaly"].find_elements(By.CSS_SELECTOR, "path.threshold")
    # the contents: one link per section, each to a heading on the page, the run time under it
    links = chromium.find_elements(By.CSS_SELECTOR, "nav.toc a")
    titles = [h.text for h in chromium.find_elements(By.CSS_SELECTOR, "h2")]
    assert [a.text for a in links] == titles and "Anomaly detector" in titles
    for a in links:
        assert chromium.find_elements(By.CSS_SELECTOR, "h2#" + a.get_attribute("href").split("#", 1)[1])
    chromium.execute_script("window.scrollTo(0, 0)")
    links[-1].click()
    assert chromium.execute_script("return window.scrollY") > 1000  # the last section is far down
    runtime = chromium.find_element(By.CSS_SELECTOR, "p.runtime").text
    assert runtime.startswith("Run time: ") and " wall, " in runtime and " CPU" in runtime
    chromium.save_screenshot("/tmp/tokenfactory-report.png")
    # hostile strings in manifests, languages and shard names stay text
    report.write_report(str(synthetic))
    chromium.get((synthetic / "report" / "report.html").as_uri())
    assert console_errors(chromium) == []
    assert chromium.execute_script("return document.querySelectorAll('script, img').length") == 0
    assert HOSTILE in chromium.find_element(By.TAG_NAME, "body").text


def test_report_of_an_s3_output(synthetic, s3_env):  # noqa: F811
    import s3fs

    fs = s3fs.S3FileSystem()
    fs.mkdir("report-bucket")
    fs.put(str(synthetic), "report-bucket/out", recursive=True)
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options import PipelineOptions

    try:
        assert report.main(["--output", "s3://report-bucket/out", f"--s3_endpoint_url={s3_env}"]) == 0
    finally:
        FileSystems.set_options(PipelineOptions([]))  # global state: no endpoint for later tests
    assert fs.exists("report-bucket/out/report/report.html")
    data = json.loads(fs.cat("report-bucket/out/report/report.json"))
    assert [s["stage"] for s in data["stages"]][:3] == ["extract", "clean", "dedup_minhash"]
    assert data["clean"]["docs"] == 8 and data["tokens"]["version"] == "v2"


def test_tokens_section_follows_tokens_current(tmp_path):
    """A rerun whose tokens did not change reuses an older version: the report shows the
    one ``tokens/CURRENT`` names, not the newest folder."""
    from pipelines.report import collect_tokens

    for version, docs in (("v20260101T000000-aaaa", 3), ("v20260202T000000-bbbb", 5)):
        d = tmp_path / "tokens" / version
        d.mkdir(parents=True)
        (d / "index.json").write_text(json.dumps({"version": version, "num_docs": docs, "shards": []}))
    (tmp_path / "tokens" / "CURRENT").write_text("v20260101T000000-aaaa\n")
    assert collect_tokens(str(tmp_path))["num_docs"] == 3
    (tmp_path / "tokens" / "CURRENT").unlink()
    assert collect_tokens(str(tmp_path))["num_docs"] == 5


def test_real_job_queues_the_anomaly_detectors_doubtful_band(real_job):
    """Issue 39, item 6: kept documents between the review and the drop threshold go to
    review/anomaly-<time>/, highest first, with each detector's score, the nearest
    reference document and the signal features; the review page's task format."""
    import pyarrow.parquet as pq

    from pipelines.anomaly_review import TAXONOMY
    from pipelines.review import load_queue
    from transforms.clean.features import FEATURE_NAMES

    out, _ = real_job
    extra = json.loads((out / "manifests" / "clean.json").read_text())["extra"]
    queues = sorted((out / "review").glob("anomaly-*"))
    assert len(queues) == 1 and Path(extra["anomaly_review_queue"]) == queues[0]
    assert extra["counters"]["anomaly_review_queued"] == len(load_queue(str(queues[0])))
    tasks = load_queue(str(queues[0]))
    task0 = tasks[0]["anomaly"]
    review, drop = task0["review_threshold"], task0["threshold"]
    kept = [r for f in sorted((out / "docs" / "clean").glob("*.parquet"))
            for r in pq.read_table(f, columns=["id", "anomaly_score"]).to_pylist()]
    band = sorted(((r["anomaly_score"], r["id"]) for r in kept
                   if r["anomaly_score"] is not None and review < r["anomaly_score"] <= drop), reverse=True)
    assert 0 < len(tasks) == min(len(band), 100)
    assert [t["task_id"] for t in tasks] == [i for _, i in band[:len(tasks)]]  # highest first
    assert review < drop and all(review < t["anomaly"]["score"] <= drop for t in tasks)
    for t in tasks:
        assert t["taxonomy"] == TAXONOMY and t["suggestions"]["anomaly"]["value"] == "ok"
        assert len(t["anomaly"]["features"]) == len(FEATURE_NAMES) and t["anomaly"]["nearest_reference"]
        assert t["context"][0].startswith(f"anomaly score {t['anomaly']['score']:.3f}")
        assert any(line.startswith("nearest reference document: ") for line in t["context"])
