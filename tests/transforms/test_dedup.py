"""Deduplication: datasketch-identical signatures, components vs scipy, real planted pairs."""

from __future__ import annotations

import io
import json
import random
from pathlib import Path

import apache_beam as beam
import numpy as np
import pyarrow.parquet as pq
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to
from datasketch import MinHash
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from pipelines.run import main
from tests.conftest import shared
from transforms.dedup.components import (StarRound, components_in_memory, components_union_find, large_star,
                                         small_star)
from transforms.dedup.dedup import DedupConfig, ExactDedup, MinHashConfig
from transforms.dedup.minhash import (MinHasher, band_keys, is_empty, normalize_for_dedup,
                                      normalized_words, optimal_bands, shingle_strings)
from transforms.doc import Doc


def book_docs(n: int = 40) -> list[str]:
    text = shared("text", "pg2701_moby_dick.txt").read_text(encoding="utf-8")
    return [text[i:i + 3000] for i in range(0, 3000 * n, 3000)]


@pytest.mark.parametrize("seed,num_perm,ngram", [(1, 112, 5), (7, 64, 3), (1, 128, 1)])
def test_compat_signatures_equal_datasketch(seed, num_perm, ngram):
    texts = book_docs(15) + ["Grüße aus Köln — “naïve” café, 東京 2024!", "one two", "x"]
    ours = MinHasher(num_perm=num_perm, seed=seed, ngram=ngram, compat=True).signatures(texts)
    for text, row in zip(texts, ours):
        words = normalized_words(text)
        shingles = [b" ".join(words[i:i + ngram]) for i in range(max(1, len(words) - ngram + 1))] if words else []
        assert shingle_strings(words, ngram) == shingles
        ref = MinHash(num_perm=num_perm, seed=seed)
        ref.update_batch(shingles)
        assert np.array_equal(ref.hashvalues.astype(np.uint32), row)


# Texts where a batch shortcut could differ from the per-document definition: NULs (the
# batch separator), characters str.lower() changes (İ lowers to two, the Kelvin sign to
# ASCII k, final sigma, full-width and Roman-numeral letters), blanked punctuation of
# every range, words of 255-257 bytes and longer (powers stop growing at 256), fewer words than the n-gram, nothing at all.
HARD_TEXTS = ["", " ", "\x00", "a", "a b", "x\x00y z w v u t", "ΣΑΣ ΣΑΣ. Σ end", "İstanbul KELVIN \u212a k",
              "w" * 300 + " and some more words after it", " ".join(c * k for c, k in zip("xyz", (255, 256, 257))), "é" * 200 + " x y z w q r", "Ⅰ Ⅱ Ⅲ Ⅳ Ⅴ Ⅵ Ⅶ",
              "😀 😀 a b c d e f g", "\ud800 lone surrogate a b c d e", "ＡＢＣ！ＤＥＦ　ｇｈｉ a b c d",
              "¡hola! «quote» ¿qué? 1·2 a–b—c “d” ‘e’ … 、。「東京」 ＃１", "...!!!", "ÀÉÎÕÜ Ÿ Ǆ ǅ ǆ a b c",
              "tab\tnew\nline\rcarriage\x0bvt\x0cff a b",
              "\U00010400\U00010401 DESERET \U00010428 w x y z", "\U0001e900\U0001e922 adlam a b c d e",
              "osage \U000104b0\U000104b1 q r s t", "\U00010400hello world a b c", "\u2c00\u2c01 glagolitic a b c"]  # 4- and 3-byte letters that lower


@pytest.mark.parametrize("compat", [False, True])
@pytest.mark.parametrize("ngram", [1, 3, 5])
def test_batch_signatures_equal_the_per_document_definition(monkeypatch, compat, ngram):
    """``signatures`` (batched normalisation, word hashes from one prefix sum, chunked
    permutations) gives, for every document, the minimum over the per-document
    ``shingle_hashes`` of every permutation: small batch and chunk limits make every
    path run (several sub-batches, chunks, a long document alone)."""
    import transforms.dedup.minhash as minhash

    rng = random.Random(ngram)
    alphabet = "aZ09 .,!\x00\t—“”’éÉİ\u212aΣσς東京Ⅰ😀ßł²ＡＢ！　" + "".join(map(chr, range(0x2000, 0x2070, 5)))
    noise = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 120))) for _ in range(60)]
    texts = book_docs(6) + HARD_TEXTS + noise + ["".join(book_docs(3))] + book_docs(2)
    monkeypatch.setattr(minhash, "_BATCH_CHARS", 4000)
    monkeypatch.setattr(minhash, "_LONG_DOC_CHARS", 8000)
    monkeypatch.setattr(minhash, "_PERM_CHUNK", 500)
    hasher = MinHasher(num_perm=32, ngram=ngram, compat=compat)
    a, b = hasher.permutations
    for text, row in zip(texts, hasher.signatures(texts)):
        ref = hasher.shingle_hashes(text)
        want = (a[:, None] * ref[None, :] + b[:, None]).min(axis=1) if len(ref) else np.full(32, 0xFFFFFFFF)
        assert np.array_equal(row, want), repr(text[:40])


def test_code_point_flags_follow_lower_and_the_punctuation_pattern():
    from transforms.dedup.minhash import _BLANK, _LOWERS, code_point_flags

    flags = code_point_flags()
    for char, flag in [("“", _BLANK), ("\u00a0", _BLANK), ("。", _BLANK), ("！", _BLANK), ("İ", _LOWERS),
                       ("\u212a", _LOWERS), ("Σ", _LOWERS), ("Ａ", _LOWERS), ("\U00010400", _LOWERS),
                       ("é", 0), ("ß", 0), ("東", 0), ("😀", 0), ("ª", 0)]:
        assert flags[ord(char)] == flag, char
    assert not flags[:0x80].any()


def test_fast_signatures_estimate_jaccard():
    base = book_docs(1)[0]
    words = base.split()
    rng = random.Random(0)
    edited = list(words)
    for i in rng.sample(range(len(words)), len(words) // 20):  # 5% of words replaced
        edited[i] = "zzz"
    other = book_docs(3)[2]
    a, b, c = MinHasher(num_perm=256).signatures([base, " ".join(edited), other])
    grams = lambda ws: {tuple(ws[i:i + 5]) for i in range(len(ws) - 4)}  # noqa: E731
    wa, wb = normalize_for_dedup(base).split(), normalize_for_dedup(" ".join(edited)).split()
    true = len(grams(wa) & grams(wb)) / len(grams(wa) | grams(wb))
    assert abs((a == b).mean() - true) < 0.08
    assert (a == c).mean() < 0.05


@pytest.mark.parametrize("text,empty", [("", True), ("   ...!!!", True), ("word", False), ("a b c", False)])
def test_short_and_empty_documents(text, empty):
    sig = MinHasher().signatures([text])[0]
    assert is_empty(sig) is empty


def test_band_keys_and_optimal_layout():
    sig = np.arange(112, dtype=np.uint32)
    keys = band_keys(sig, 14, 8)
    assert len(keys) == 14 and len(set(keys)) == 14 and keys[0][0] == 0
    bands, rows = optimal_bands(0.8, 112)
    assert bands * rows <= 112
    from datasketch import MinHashLSH  # the same layout datasketch picks, default weights and others

    for threshold, num_perm, weights in [(0.8, 112, (0.5, 0.5)), (0.5, 128, (0.5, 0.5)), (0.8, 112, (0.7, 0.3))]:
        lsh = MinHashLSH(threshold=threshold, num_perm=num_perm, weights=weights)
        got = optimal_bands(threshold, num_perm) if weights == (0.5, 0.5) else optimal_bands(threshold, num_perm, *weights)
        assert got == (lsh.b, lsh.r)
    assert MinHashConfig(threshold=0.8).layout() == (bands, rows)
    with pytest.raises(ValueError, match="exceeds num_perm"):
        MinHashConfig(bands=20, rows=8)


def test_a_band_key_covers_every_row_of_its_band():
    """Changing any one of the 112 values changes exactly its own band's key: a key built
    from 6 of 8 rows would merge documents that differ there (precision at J >= 0.8 falls
    from 0.43 to 0.29 with such keys)."""
    sig = np.arange(112, dtype=np.uint32)
    base = band_keys(sig, 14, 8)
    for row in range(112):
        other = sig.copy()
        other[row] += 1000
        changed = [b for b, (x, y) in enumerate(zip(base, band_keys(other, 14, 8))) if x != y]
        assert changed == [row // 8], row


def graphs() -> list[tuple[str, list[tuple[int, int]], int]]:
    rng = random.Random(2)
    chain = [(i, i + 1) for i in range(30)]
    star = [(0, i) for i in range(1, 30)] + [(40, i) for i in range(41, 50)]
    clique = [(i, j) for i in range(10) for j in range(i + 1, 10)]
    disjoint = [(i, i + 1) for i in range(0, 40, 2)]
    rand = [(rng.randrange(80), rng.randrange(80)) for _ in range(70)]
    reverse_chain = [(i + 1, i) for i in range(25)]
    return [("chain", chain, 31), ("stars", star, 50), ("clique", clique, 10),
            ("disjoint", disjoint, 40), ("random", [e for e in rand if e[0] != e[1]], 80),
            ("reverse_chain", reverse_chain, 26)]


def check_against_scipy(edges: list[tuple[int, int]], n: int, roots: dict[str, str]) -> None:
    name = lambda i: f"n{i:04d}"  # noqa: E731
    matrix = coo_matrix((np.ones(len(edges)), ([a for a, _ in edges], [b for _, b in edges])), shape=(n, n))
    _, labels = connected_components(matrix, directed=False)
    nodes = {x for e in edges for x in e}
    for node in nodes:
        members = [i for i in nodes if labels[i] == labels[node]]
        assert roots.get(name(node), name(node)) == min(name(i) for i in members)


@pytest.mark.parametrize("kind,edges,n", graphs(), ids=[g[0] for g in graphs()])
def test_components_match_scipy(kind, edges, n):
    named = [(f"n{a:04d}", f"n{b:04d}") for a, b in edges]
    check_against_scipy(edges, n, components_in_memory(named))


@pytest.mark.parametrize("kind,edges,n", graphs(), ids=[g[0] for g in graphs()])
def test_union_find_in_the_driver_is_what_the_star_rounds_converge_to(kind, edges, n):
    """``components_union_find`` (the driver's path for edge sets that fit its memory)
    gives exactly the rounds' final edge set: every non-root node to its component's
    smallest node, in both edge directions and with repeated edges."""
    named = [(f"n{a:04d}", f"n{b:04d}") for a, b in edges]
    roots = components_union_find(named + [(b, a) for a, b in named[::3]] + named[:5])
    assert roots == components_in_memory(named)
    check_against_scipy(edges, n, roots)


def beam_components(beam_options, tmp_path, edges, **hot) -> tuple[dict[str, str], dict]:
    """Star rounds in Beam, one pipeline per round as the stage's driver runs them; returns
    node → root and the largest star group seen (``star_group_size`` max)."""
    from apache_beam.metrics.metric import MetricsFilter

    current = [(f"n{a:04d}", f"n{b:04d}") for a, b in edges]
    largest = 0
    for k in range(20):
        prefix = str(tmp_path / f"round{k}")
        p = TestPipeline(options=beam_options)
        (p | beam.Create(current) | StarRound(**hot) | beam.Map(json.dumps)
         | beam.io.WriteToText(prefix, shard_name_template=""))
        result = p.run()
        result.wait_until_finish()
        for d in result.metrics().query(MetricsFilter().with_name("star_group_size"))["distributions"]:
            largest = max(largest, d.committed.max)
        collected = [tuple(json.loads(line)) for line in open(prefix)]
        if set(collected) == set(current):
            break
        current = collected
    return dict(current), {"largest_group": largest, "rounds": k}


def test_star_rounds_in_beam_converge_to_scipy(beam_options, tmp_path):
    edges = [(i, i + 1) for i in range(20)] + [(30, 31), (31, 32), (40, 41)]
    roots, _ = beam_components(beam_options, tmp_path, edges)
    check_against_scipy(edges, 50, roots)


@pytest.mark.parametrize("kind,edges,n", graphs(), ids=[g[0] for g in graphs()])
def test_split_hot_nodes_give_the_same_components(beam_options, tmp_path, kind, edges, n):
    """Every node with more than 2 neighbours split into sub-groups (the hot-key path):
    the same components as scipy, and no group larger than a few members."""
    roots, seen = beam_components(beam_options, tmp_path, edges, hot_degree=2, sample_every=1)
    check_against_scipy(edges, n, roots)
    assert seen["largest_group"] <= 8


def test_hot_node_split_bounds_the_largest_group(beam_options, tmp_path):
    """A star of 1,500 around one node: unsplit, the node's group holds all 1,500; split
    at 250, no group exceeds a small multiple of 250 and the components are the same."""
    edges = [(i, 0) for i in range(1, 1500)] + [(1500 + i, 1501 + i) for i in range(20)]
    whole, plain = beam_components(beam_options, tmp_path / "plain", edges)
    split, hot = beam_components(beam_options, tmp_path / "hot", edges, hot_degree=250, sample_every=4)
    assert plain["largest_group"] >= 1499 and hot["largest_group"] <= 500
    assert whole == split
    check_against_scipy(edges, 1600, split)


def test_salts_for_and_stable_hash():
    from transforms.dedup.components import salts_for, stable_hash

    assert salts_for(0, 64, 10_000) == 1 and salts_for(156, 64, 10_000) == 1  # 9,984: not hot
    assert salts_for(157, 64, 10_000) == 2  # 10,048 > 10,000
    assert salts_for(1563, 64, 10_000) == 11  # ~100,000 → 11 groups of < 10,000
    assert salts_for(10**9, 64, 10_000) == 4096  # capped
    assert stable_hash("n0001") == 3136820681  # crc32: the same in every process


def test_star_primitives():
    assert sorted(large_star("b", ["a", "c", "d"])) == [("c", "a"), ("d", "a")]
    assert sorted(small_star("d", ["b", "c"])) == [("c", "b"), ("d", "b")]


def test_exact_dedup_transform(beam_options):
    words = {1000: "alpha", 1001: "beta", 1002: "gamma 1002"}
    docs = [Doc(id=f"d{i:04d}", url="", text="The same text, again." if i < 1000 else words[i],
                source="t", fetched_at="") for i in range(1003)]
    docs.append(Doc(id="n1", url="", text="gamma 2001", source="t", fetched_at=""))  # digits -> 0
    docs.append(Doc(id="u1", url="http://x.org/a#f", text="first", source="t", fetched_at=""))
    docs.append(Doc(id="u2", url="HTTP://X.ORG/a", text="second", source="t", fetched_at=""))
    docs.append(Doc(id="p1", url="", text="THE same text again", source="t", fetched_at=""))
    with TestPipeline(options=beam_options) as p:
        out = p | beam.Create(docs) | ExactDedup(DedupConfig())
        assert_that(out.kept | beam.Map(lambda d: d.id),
                    equal_to(["d0000", "d1000", "d1001", "d1002", "u1"]), label="kept")
        assert_that(out.rejected | beam.Map(lambda r: r.reason) | beam.combiners.Count.PerElement(),
                    equal_to([("duplicate_text", 1001), ("duplicate_url", 1)]), label="rejected")


def test_documents_without_a_url_are_never_url_duplicates_whatever_their_ids(beam_options):
    """Issue 36: URL-less documents were keyed by their id for the URL step, so distinct
    documents that shared an id were rejected as ``duplicate_url``."""
    docs = [Doc(id="0", url="", text=f"text {w}", source=s, fetched_at="")
            for s, w in (("a", "alpha"), ("b", "beta"), ("c", "gamma"))]
    docs.append(Doc(id="0", url="not a url", text="delta", source="d", fetched_at=""))
    with TestPipeline(options=beam_options) as p:
        out = p | beam.Create(docs) | ExactDedup(DedupConfig(exact_text=False))
        assert_that(out.kept | beam.Map(lambda d: d.text),
                    equal_to(["text alpha", "text beta", "text gamma", "delta"]), label="kept")
        assert_that(out.rejected, equal_to([]), label="rejected")


def test_exact_dedup_with_one_rule_off_applies_the_other(beam_options):
    """URL rule off: text duplicates still go (and the reverse); nothing fails; the
    counters are the stage's (``dedup_exact`` by default)."""
    import dataclasses

    from apache_beam.metrics.metric import MetricsFilter

    docs = [Doc(id="a", url="http://x.org/", text="same text", source="t", fetched_at=""),
            Doc(id="b", url="http://x.org/", text="same TEXT!", source="t", fetched_at=""),
            Doc(id="c", url="http://y.org/", text="other", source="t", fetched_at="")]
    for exact_url, exact_text, reason in ((False, True, "duplicate_text"), (True, False, "duplicate_url")):
        p = TestPipeline(options=beam_options)
        out = p | beam.Create(docs) | ExactDedup(dataclasses.replace(DedupConfig(), exact_url=exact_url,
                                                                      exact_text=exact_text))
        assert_that(out.kept | beam.Map(lambda d: d.id), equal_to(["a", "c"]), label="kept")
        assert_that(out.rejected | beam.Map(lambda r: (r.doc.id, r.reason, r.detail)),
                    equal_to([("b", reason, "duplicate of a")]), label="rejected")
        assert_that(out.failed, equal_to([]), label="failed")
        result = p.run()
        result.wait_until_finish()
        counters = {c.key.metric.name: c.committed
                    for c in result.metrics().query(MetricsFilter().with_namespace("dedup_exact"))["counters"]}
        assert counters["records_in"] == 3 and counters["records_out"] == 2, counters


def test_band_keys_skip_an_empty_document_and_go_on_with_the_batch():
    from transforms.dedup.dedup import _BandKeysFn

    config = MinHashConfig()
    fn = _BandKeysFn(config)
    fn.setup()
    text = "a text with more than five words in it"
    keys = list(fn.process([("1|e", "..."), ("1|a", text), ("1|f", ""), ("1|b", text)]))
    assert [node for _, node in keys] == ["1|a"] * 14 + ["1|b"] * 14
    assert [k for k, _ in keys[:14]] == band_keys(config.hasher().signatures([text])[0], 14, 8)


def test_the_config_builds_its_hasher_and_node_keys_are_documented():
    from transforms.dedup.components import node_key, stable_hash

    config = MinHashConfig(num_perm=64, seed=7, ngram=3, compat=True, bands=8, rows=8)
    assert config.hasher() == MinHasher(num_perm=64, seed=7, ngram=3, compat=True)
    assert MinHashConfig().hasher() == MinHasher(num_perm=112, seed=1, ngram=5, compat=False)
    assert node_key("a") == "1|a" and node_key("a", True) == "0|a"
    assert node_key("a", False, 0.25) == "10.750000|a" and node_key("a", True, 7.0) == "00.000000|a"
    assert stable_hash("x\ud800y") == stable_hash("x\ud800y") != stable_hash("xy")  # a lone surrogate hashes


def test_exact_dedup_with_both_rules_off_passes_everything(beam_options):
    import dataclasses

    docs = [Doc(id=f"d{i}", url="http://x.org/", text="same", source="t", fetched_at="") for i in range(3)]
    with TestPipeline(options=beam_options) as p:
        out = p | beam.Create(docs) | ExactDedup(dataclasses.replace(DedupConfig(), exact_url=False,
                                                                      exact_text=False))
        assert_that(out.kept | beam.Map(lambda d: d.id), equal_to(["d0", "d1", "d2"]), label="kept")
        assert_that(out.rejected, equal_to([]), label="rejected")


def jsonl_job(tmp_path, docs: list[tuple[str, str]], extra: str = "", name: str = "job") -> str:
    data = tmp_path / f"{name}.jsonl"
    data.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in docs))
    config = tmp_path / f"{name}.yaml"
    config.write_text(f"output: {tmp_path / name}\ninputs:\n  - format: jsonl\n    path: {data}\n"
                      f"dedup:\n{extra}beam_args: ['--runner=FnApiRunner']\n")
    return str(config)


def own(doc_id: str) -> str:
    """The input's own id of a document id ``<own id>@<hash of file and offset>``."""
    return doc_id.rsplit("@", 1)[0]


def rejected_pairs(out) -> set[tuple[str, str]]:
    pairs = set()
    for path in out.glob("rejected/dedup_minhash/*.parquet"):
        for row in pq.read_table(path).to_pylist():
            pairs.add(tuple(sorted((own(row["id"]), own(row["dup_cluster"])))))
    return pairs


@pytest.mark.parametrize("size", [100, 1000])
def test_mccormick_planted_pairs_exactly(tmp_path, size):
    lines = shared("neardup", f"mccormick_articles_{size}.train").read_text().splitlines()
    docs = [tuple(line.split(" ", 1)) for line in lines if line.strip()]
    truth = {tuple(sorted(line.split())) for line in
             shared("neardup", f"mccormick_articles_{size}.truth").read_text().splitlines() if line.strip()}
    config = jsonl_job(tmp_path, docs, "  exact_text: false\n  minhash:\n    salts: 4\n")
    assert main(["--config", config, "--log-level", "WARNING"], out=io.StringIO()) == 0
    assert rejected_pairs(tmp_path / "job") == truth
    # smallest_id keeps the numerically smaller id of each pair: t980 over t2023 (issue 18, 5)
    kept_over = {(own(row["dup_cluster"]), own(row["id"]))
                 for path in (tmp_path / "job").glob("rejected/dedup_minhash/*.parquet")
                 for row in pq.read_table(path).to_pylist()}
    assert kept_over == {tuple(sorted(pair, key=lambda i: int(i[1:]))) for pair in truth}



def test_components_in_the_driver_and_in_star_rounds_give_identical_outputs(tmp_path):
    """The same job with the components computed in the driver (the default for edge sets
    that fit) and by star-round pipelines (``driver_max_edges: 0``): byte-identical kept
    and rejected documents; the rounds ran only in the second."""
    lines = shared("neardup", "mccormick_articles_1000.train").read_text().splitlines()
    docs = [tuple(line.split(" ", 1)) for line in lines if line.strip()]
    base = Path(jsonl_job(tmp_path, docs, "  exact_text: false\n  minhash:\n    salts: 4\n", "driver"))
    rounds = tmp_path / "rounds.yaml"  # the same input file (ids come from it), another output
    rounds.write_text(base.read_text().replace(str(tmp_path / "driver") + "\n", str(tmp_path / "rounds") + "\n")
                      .replace("    salts: 4\n", "    salts: 4\n    driver_max_edges: 0\n"))
    outputs = {}
    for name, config in (("driver", str(base)), ("rounds", str(rounds))):
        assert main(["--config", config, "--log-level", "WARNING", "--no-report"], out=io.StringIO()) == 0
        counters = json.loads((tmp_path / name / "manifests" / "dedup_minhash.json").read_text())["extra"]["counters"]
        rows = {sub: sorted((r for p in (tmp_path / name).glob(f"{sub}/dedup_minhash/*.parquet")
                             for r in pq.read_table(p).to_pylist()), key=lambda r: r["id"])
                for sub in ("docs", "rejected")}
        outputs[name] = (rows, counters)
    (driver_rows, driver), (round_rows, rounds) = outputs["driver"], outputs["rounds"]
    planted = shared("neardup", "mccormick_articles_1000.truth").read_text().split("\n")
    assert len(driver_rows["rejected"]) == len([line for line in planted if line.strip()]) > 5
    assert driver_rows == round_rows
    assert (driver["cc_in_driver"], driver.get("cc_rounds", 0)) == (1, 0) and rounds["cc_rounds"] >= 1
    assert rounds.get("cc_in_driver", 0) == 0 and driver["edges"] == rounds["edges"]

def test_components_applied_per_file_are_the_join_of_every_document_with_its_root(tmp_path):
    """The stage's per-file application (``assign_files``: node ids shuffled, rows cut
    Arrow-native) writes exactly what the ``CoGroupByKey`` of every ``Doc`` with its
    component's root and ``assign_component`` write: every column of every kept row
    (``dup_cluster`` on the kept root too) and every rejected row with its detail; and a
    second input file and an ``highest_quality`` ranking change nothing of that."""
    from transforms.dedup.dedup import assign_component
    from transforms.doc import doc_from_row, doc_to_row, rejected_to_row

    lines = shared("neardup", "mccormick_articles_1000.train").read_text().splitlines()
    docs = [tuple(line.split(" ", 1)) for line in lines if line.strip()]
    config = Path(jsonl_job(tmp_path, docs, "  exact_text: false\n  keep: highest_quality\n  minhash:\n    salts: 4\n"))
    assert main(["--config", str(config), "--log-level", "WARNING", "--no-report"], out=io.StringIO()) == 0
    out = tmp_path / "job"
    inputs = sorted(out.glob("docs/dedup_exact/*.parquet"))
    dedup = DedupConfig(keep="highest_quality")
    roots: dict[str, list[str]] = {}
    final = max((out / "work" / "dedup_minhash").glob("edges-*"))
    edges = [(r["a"], r["b"]) for p in final.glob("*.parquet") for r in pq.read_table(p).to_pylist()]
    for a, b in edges:
        roots.setdefault(a, []).append(b)
    for b in {b for _, b in edges}:
        roots.setdefault(b, []).append(b)
    expected = {"docs": [], "rejected": []}
    for path in inputs:
        for row in pq.read_table(path).to_pylist():
            doc = doc_from_row(row)
            node = dedup.node(doc)
            for result in assign_component((node, {"docs": [doc], "roots": roots.get(node, [])})):
                if isinstance(result, Doc):
                    expected["docs"].append(doc_to_row(result))
                else:
                    expected["rejected"].append(rejected_to_row(result.value))
    got = {sub: [r for p in sorted(out.glob(f"{sub}/dedup_minhash/*.parquet")) for r in pq.read_table(p).to_pylist()]
           for sub in ("docs", "rejected")}
    key = lambda r: r["id"]  # noqa: E731
    assert len(expected["rejected"]) > 5 and any(r["dup_cluster"] for r in expected["docs"])
    for sub in ("docs", "rejected"):
        assert sorted(got[sub], key=key) == sorted(expected[sub], key=key)

    # the transform over the same rows cut into three files, three join buckets
    import pyarrow as pa

    from transforms.dedup.assign_files import AssignFiles

    table = pa.concat_tables([pq.read_table(p) for p in inputs])
    files = []
    for k, (lo, hi) in enumerate([(0, 300), (300, 301), (301, table.num_rows)]):
        files.append(str(tmp_path / f"part-{k}.parquet"))
        pq.write_table(table.slice(lo, hi - lo), files[-1])
    with beam.Pipeline("FnApiRunner") as pipeline:
        outputs = (pipeline | beam.Create(edges) | AssignFiles(files, dedup, "dedup_minhash", buckets=3))
        for sub, tables in (("docs", outputs.kept), ("rejected", outputs.rejected)):
            rows = tables | f"Rows{sub}" >> beam.FlatMap(lambda t: t.to_pylist())
            assert_that(rows, equal_to(expected[sub]), label=f"Check{sub}")


def test_thousand_identical_and_short_documents(tmp_path):
    docs = [(f"same{i:04d}", "the very same boilerplate text repeated on every page of a site")
            for i in range(1000)]
    docs += [("empty", ""), ("short", "two words"), ("short2", "two words!")]
    config = jsonl_job(tmp_path, docs, "  exact_text: false\n")
    out = io.StringIO()
    assert main(["--config", config, "--log-level", "WARNING"], out=out) == 0
    manifest = json.loads((tmp_path / "job" / "manifests" / "dedup_minhash.json").read_text())
    counts = manifest["counts"]
    assert counts["records_in"] == 1002  # the empty text was rejected at extract
    assert counts["rejected_by_reason"] == {"near_duplicate": 1000}  # 999 + "short2"
    assert counts["out"] == 2
    # without an index, the band keys are not written (only the index extension reads them)
    work = tmp_path / "job" / "work" / "dedup_minhash"
    assert not (work / "band_keys").exists() and not list(tmp_path.glob("job/**/band_keys"))


def test_incremental_dedup_against_earlier_runs(tmp_path):
    index = tmp_path / "index"
    texts = book_docs(6)
    first = [(f"a{i}", t) for i, t in enumerate(texts[:4])]
    extra = f"  index: {index}\n"
    assert main(["--config", jsonl_job(tmp_path, first, extra, "run1"), "--log-level", "WARNING"],
                out=io.StringIO()) == 0
    assert len(list(index.glob("run-*/*.parquet"))) == 1
    assert list((tmp_path / "run1" / "work" / "dedup_minhash" / "band_keys").glob("*.parquet"))
    edited = texts[1].replace("whale", "WHALE", 2)
    second = [("b0", edited), ("b1", texts[4]), ("b2", texts[5])]
    run2 = jsonl_job(tmp_path, second, extra, "run2")
    assert main(["--config", run2, "--log-level", "WARNING"], out=io.StringIO()) == 0
    rows = [r for p in (tmp_path / "run2").glob("rejected/dedup_minhash/*.parquet")
            for r in pq.read_table(p).to_pylist()]
    assert [(own(r["id"]), r["dup_cluster"].split(":", 1)[0].startswith("run-"),
             own(r["dup_cluster"].split(":", 1)[1])) for r in rows] == [("b0", True, "a1")]
    assert "earlier run" in rows[0]["reason_detail"]
    assert len(list(index.glob("run-*/*.parquet"))) == 2

    # rerunning a job never matches its documents against its own earlier index part
    out = io.StringIO()
    assert main(["--config", run2, "--log-level", "WARNING"], out=out) == 0
    assert "resumed" in out.getvalue().split("dedup_minhash")[1].splitlines()[0]
    for config in (run2, str(tmp_path / "run1.yaml")):
        assert main(["--config", config, "--force", "--log-level", "WARNING"], out=io.StringIO()) == 0
    kept1 = {own(r["id"]) for p in (tmp_path / "run1").glob("docs/dedup_minhash/*.parquet") for r in pq.read_table(p).to_pylist()}
    rows = [r for p in (tmp_path / "run2").glob("rejected/dedup_minhash/*.parquet") for r in pq.read_table(p).to_pylist()]
    assert kept1 == {"a0", "a1", "a2", "a3"} and [own(r["id"]) for r in rows] == ["b0"]
    assert len({p.parent for p in index.glob("run-*/*.parquet")}) == 2  # one part per job output


def test_band_keys_and_salted_bucket_edges(beam_options):
    """500 documents in one bucket: salted sub-buckets, then one star to the minimum."""
    from transforms.dedup.dedup import BandKeys, BucketEdges

    same = "the very same boilerplate footer text on every page of the site"
    nodes = [(f"1|d{i:03d}", same) for i in range(500)] + [("1|x", "a completely different text here")]
    with TestPipeline(options=beam_options) as p:
        keyed = p | beam.Create(nodes) | BandKeys(MinHashConfig())
        assert_that(keyed | "Count" >> beam.combiners.Count.Globally(), equal_to([501 * 14]), label="keys")
        edges = keyed | BucketEdges(salts=8)
        roots = edges | beam.Map(lambda e: e[1]) | beam.Distinct()
        # every edge points at a sub-bucket minimum or the bucket minimum; all in one component
        assert_that(edges | "NoX" >> beam.Filter(lambda e: "1|x" in e), equal_to([]), label="x alone")
        assert_that(roots | "Few" >> beam.combiners.Count.Globally(),
                    lambda got: _check_few(got[0], 9), label="roots")


def _check_few(count: int, most: int) -> None:
    if not 1 <= count <= most:
        raise AssertionError(f"{count} roots, expected 1..{most}")


def test_bucket_edges_connect_everything_with_components():
    edges = []
    from transforms.dedup.dedup import _link_to_min, _salted

    nodes = [f"1|d{i:03d}" for i in range(200)]
    groups: dict = {}
    for n in nodes:
        key, node = _salted((b"bucket", n), 8)
        groups.setdefault(key, []).append(node)
    mins = []
    assert len(groups) <= 8 and all(isinstance(salt, int) and 0 <= salt < 8 for _, salt in groups)
    for key, members in groups.items():
        for out in _link_to_min((key, members)):
            if isinstance(out, tuple):
                edges.append(out)
            else:  # the sub-bucket's minimum, under the bucket's own key for the second grouping
                assert out.tag == "min" and out.value == (b"bucket", min(members))
                mins.append(out.value[1])
    edges += [e for e in _link_to_min((b"bucket", mins)) if isinstance(e, tuple)]
    roots = components_in_memory(edges)
    assert {roots.get(n, n) for n in nodes} == {"1|d000"}


def test_keep_rule_orders_nodes():
    def d(i: str, q):
        return Doc(id=i, url="", text="", source="", fetched_at="", quality_score=q)

    smallest = DedupConfig()
    assert sorted([d("b", 0.9), d("a", 0.1)], key=smallest.node)[0].id == "a"
    best = DedupConfig(keep="highest_quality")
    assert sorted([d("a", 0.1), d("b", 0.9), d("c", None)], key=best.node)[0].id == "b"
    assert sorted([d("b", 0.5), d("a", 0.5)], key=best.node)[0].id == "a"  # tie: smallest id
    assert best.node(d("z", 1.0), previous_run=True) < best.node(d("a", 1.0))  # earlier runs win
    assert sorted([d("b", 0.0), d("a", None)], key=best.node)[0].id == "a"  # no score ranks as 0: a tie
    assert sorted([d("b", 1.5), d("a", 1.0)], key=best.node)[0].id == "a"  # scores are clamped to [0, 1]
    assert sorted([d("b", -1.0), d("a", 0.0)], key=best.node)[0].id == "a"
    with pytest.raises(ValueError, match="keep"):
        DedupConfig(keep="random")


@pytest.mark.parametrize("ids,first", [
    (["t2023", "t980"], "t980"),  # the McCormick planted pair (string order kept t2023)
    (["doc-10", "doc-9", "doc-100"], "doc-9"),
    (["t7", "t007"], "t007"),  # equal numbers: the raw id decides
    (["t1a", "t1"], "t1"),  # an id before its extensions
    (["b1", "a99"], "a99"),  # text first, then the number
    (["a|2", "a|10"], "a|2"),  # the node separator inside ids
    (["x" + "9" * 12, "x" + "1" + "0" * 12], "x" + "9" * 12),  # long digit runs
    (["x1000000000", "x999999999"], "x999999999"),  # 10 digits after 9 (where the long form starts)
    (["x100000000", "x99999999"], "x99999999"),  # 9 digits after 8
    (["t1!", "t1"], "t1"),  # an id before any extension, punctuation too
])
def test_smallest_id_is_natural_order(ids, first):
    from transforms.dedup.components import doc_id_of

    docs = [Doc(id=i, url="", text="", source="", fetched_at="") for i in ids]
    for config in (DedupConfig(), DedupConfig(keep="highest_quality")):
        ranked = sorted(docs, key=config.node)
        assert ranked[0].id == first
        assert doc_id_of(config.node(ranked[0])) == first


def test_the_natural_order_key_is_each_digit_run_as_its_length_and_digits():
    """``id_order_key`` against its definition, written the plain way (a regex callback per
    digit run), on ids with control characters, separators, zeros and long runs."""
    import random
    import re

    from transforms.dedup.dedup import id_order_key

    def run_key(match):
        digits = match.group().lstrip("0") or "0"
        return (str(len(digits)) if len(digits) < 9 else f"9{len(digits):09d}") + digits

    def reference(doc_id):
        cleaned = "".join("{" if c == "|" else " " if ord(c) < 0x20 else c for c in doc_id)
        return re.sub(r"[0-9]+", run_key, cleaned) + " "

    rng = random.Random(5)
    ids = ["".join(rng.choice("ab|09\x00\x1f-7 xé") for _ in range(rng.randint(0, 14))) for _ in range(3000)]
    ids += ["", "0", "000", "007", "x" + "9" * 12, "9" * 9, "12345678", "a|2", "t007", "d123456"]
    assert [id_order_key(i) for i in ids] == [reference(i) for i in ids]
    assert id_order_key("doc-0010a") == "doc-210a "


def test_exact_dedup_keeps_the_smallest_id_in_natural_order(beam_options):
    docs = [Doc(id=i, url="", text="The same news-wire story.", source="t", fetched_at="")
            for i in ("t2023", "t980", "t10000")]
    with TestPipeline(options=beam_options) as p:
        out = p | beam.Create(docs) | ExactDedup(DedupConfig())
        assert_that(out.kept | beam.Map(lambda d: d.id), equal_to(["t980"]), label="kept")
        assert_that(out.rejected | beam.Map(lambda r: (r.doc.id, r.detail)),
                    equal_to([("t2023", "duplicate of t980"), ("t10000", "duplicate of t980")]),
                    label="rejected")


def test_normalisation_keeps_every_multibyte_character_intact():
    """Bytes 0xB2/0xB3/0xB9 are UTF-8 continuation bytes (of "²", "ł", "й"...), not digits:
    a real Common Crawl page in ../shared/data/warc crashed exact dedup this way."""
    every = "".join(chr(c) for c in range(0x20, 0x30000) if not 0xD800 <= c < 0xE000)
    normalize_for_dedup(every)  # decodes: no character was cut
    assert normalize_for_dedup("x² ³ 42 ł й ²³ β") == "x² ³ 00 ł й ²³ β"
    for compat in (False, True):
        assert MinHasher(compat=compat).signatures(["łódź й² " * 5]).shape[0] == 1


@pytest.mark.parametrize("kind", ["large", "small"])
@pytest.mark.parametrize("salts", [1, 2, 5])
def test_the_pieces_of_a_split_node_give_the_edges_of_the_unsplit_star(kind, salts):
    """The hot-node path piece by piece (the Beam tests run it whole): members keyed to
    sub-groups by salt, each sub-group's minimum combined with the node and broadcast
    back, the sub-groups' edges joined: exactly the edges of ``large_star`` /
    ``small_star`` on the whole group, the node's own small-star link once."""
    from apache_beam.pvalue import TaggedOutput

    from transforms.dedup.components import (_broadcast_min, _key_by_salt, _split_edges, _StarGroupFn,
                                             stable_hash)

    rng = random.Random(salts)
    for node in ("n050", "n000", "n999"):
        members = {f"n{rng.randrange(1000):03d}" for _ in range(40)} - {node}
        whole = set(large_star(node, members) if kind == "large" else small_star(node, members))
        hot = {node: salts} if salts > 1 else {}
        groups: dict = {}
        for member in members:
            key, value = _key_by_salt((node, member), hot)
            assert key == (node, stable_hash(member) % salts if salts > 1 else 0) and value == member
            groups.setdefault(key, []).append(value)
        fn = _StarGroupFn(kind)
        fn.setup()
        if not hot:  # not hot: the group's edges come straight out
            assert set(fn.process(((node, 0), members), hot)) == whole
            continue
        partials, split = [], {}
        for key, group in groups.items():
            out = list(fn.process((key, group + group[:1]), hot))  # a repeated member counts once
            assert all(isinstance(o, TaggedOutput) for o in out)
            partials += [o.value for o in out if o.tag == "partial"]
            split.update(o.value for o in out if o.tag == "split")
        assert partials and all(p == (node, min(groups[k])) for k, p in zip(groups, partials))
        smallest = min(min(p for _, p in partials), node)
        broadcast = list(_broadcast_min((node, min(p for _, p in partials)), hot))
        assert broadcast == [((node, s), smallest) for s in range(salts)]
        edges = [e for key, members_ in split.items()
                 for e in _split_edges(kind, (key, {"min": [smallest], "members": [members_]}))]
        if kind == "small" and node != smallest and (node, 0) not in split:  # salt 0 got no member
            edges += list(_split_edges(kind, ((node, 0), {"min": [smallest], "members": []})))
        assert len(edges) == len(set(edges)) and set(edges) == whole


def test_assign_component_keeps_the_root_and_rejects_the_others():
    from apache_beam.pvalue import TaggedOutput

    from transforms.dedup.dedup import assign_component
    from transforms.routing import REJECTED

    def doc(i: str) -> Doc:
        return Doc(id=i, url="", text="t", source="s", fetched_at="")

    (kept,) = assign_component(("1|a", {"docs": [doc("a")], "roots": ["1|a"]}))
    assert kept.id == "a" and kept.dup_cluster == "a"
    alone = list(assign_component(("1|z", {"docs": [doc("z"), doc("z")], "roots": []})))  # in no component
    assert [(d.id, d.dup_cluster) for d in alone] == [("z", ""), ("z", "")]
    (out,) = assign_component(("1|b", {"docs": [doc("b")], "roots": ["1|a"]}))
    assert isinstance(out, TaggedOutput) and out.tag == REJECTED
    assert (out.value.doc.id, out.value.doc.dup_cluster, out.value.reason, out.value.detail) == \
        ("b", "a", "near_duplicate", "component a: kept a")
    (old,) = assign_component(("1|b", {"docs": [doc("b")], "roots": ["0|x|y"]}))
    assert old.value.doc.dup_cluster == "x|y" and old.value.detail == "component x|y: kept an earlier run's x|y"


def test_edge_checksum_is_a_fixed_64_bit_value_of_the_directed_edge():
    """The stage driver sums ``edge_checksum`` over a round's edges to tell whether the
    round changed anything: it must be the same in every process and run (pinned here),
    use all 64 bits, and tell (a, b) from (b, a)."""
    from transforms.dedup.components import _both_ways, edge_checksum

    assert edge_checksum(("1|b", "1|a")) == 9836960825723775713
    assert edge_checksum(("1|a", "1|b")) == 15463784703394560594
    values = [edge_checksum((f"1|n{i}", "1|a")) for i in range(200)]
    assert len(set(values)) == 200 and max(values) >= 1 << 63 and min(values) < 1 << 62
    assert list(_both_ways(("1|b", "1|a"))) == [("1|b", "1|a"), ("1|a", "1|b")]


def _fast_hash_reference(text: str, n: int) -> list[int]:
    """The ``fast`` shingle hash as the module docstring defines it, in Python integers:
    word hash sum((byte + 1) * M^(k+1)) (k capped at 255), words combined as h * POLY + w,
    MurmurHash3's 64-bit finaliser steps, the top 32 bits. Signatures written to an earlier
    run's index are compared with new ones: the function must not drift."""
    mask, m, poly = (1 << 64) - 1, 0x100000001B3, 0x9E3779B97F4A7C15
    words = [sum((b + 1) * pow(m, min(k, 255) + 1, 1 << 64) for k, b in enumerate(word)) & mask
             for word in normalized_words(text)]
    if not words:
        return []
    n = min(n, len(words))
    out = []
    for i in range(len(words) - n + 1):
        h = words[i]
        for w in words[i + 1:i + n]:
            h = (h * poly + w) & mask
        h ^= h >> 33
        h = (h * 0xFF51AFD7ED558CCD) & mask
        h ^= h >> 33
        out.append(h >> 32)
    return out


@pytest.mark.parametrize("ngram", [1, 2, 5])
def test_fast_shingle_hashes_are_the_documented_function(ngram):
    from transforms.dedup.minhash import fast_shingle_hashes, fmix32, word_hashes

    for text in book_docs(2) + ["w" * 300 + " x y", "a b", "", "Grüße aus Köln, 2024!"]:
        got = fast_shingle_hashes(word_hashes(normalized_bytes_of(text)), ngram)
        assert got.dtype == np.uint32 and got.tolist() == _fast_hash_reference(text, ngram)
        raw = got.copy()
        fmix32(got)
        assert np.array_equal(got, raw)  # fmix32 leaves its argument alone


def normalized_bytes_of(text: str) -> bytes:
    from transforms.dedup.minhash import normalized_bytes

    return normalized_bytes(text)


def test_position_tables_built_from_scratch_and_grown(monkeypatch):
    """The batch path's tables of P^j and P^(1-j) (a process-wide cache, so built here
    anew): exact powers, at least 2^16 long, doubled when a batch needs more; signatures
    of a batch longer than the first table equal the per-document ones."""
    import transforms.dedup.minhash as minhash

    monkeypatch.setattr(minhash, "_tables", [])
    p, mod = 0x100000001B3, 1 << 64
    powers, inverse = minhash._position_tables(10)
    assert len(powers) == len(inverse) == 1 << 16 and powers.dtype == inverse.dtype == np.uint64
    for j in (0, 1, 2, 255, 4097, (1 << 16) - 1):
        assert int(powers[j]) == pow(p, j, mod) and int(inverse[j]) == pow(p, 1 - j, mod)
    assert minhash._position_tables(1 << 16)[0] is powers  # long enough: the same table
    grown, _ = minhash._position_tables((1 << 16) + 5)
    assert len(grown) == 1 << 17 and int(grown[-1]) == pow(p, (1 << 17) - 1, mod)
    assert len(minhash._position_tables(300_000)[0]) == 300_000
    monkeypatch.setattr(minhash, "_tables", [])
    texts = book_docs(25)  # 75,000 characters in one batch: more than the first table
    hasher = MinHasher(num_perm=16)
    a, b = hasher.permutations
    for text, row in zip(texts, hasher.signatures(texts)):
        ref = hasher.shingle_hashes(text)
        assert np.array_equal(row, (a[:, None] * ref[None, :] + b[:, None]).min(axis=1))


def test_signature_batches_are_bounded_and_a_long_document_goes_alone(monkeypatch):
    """Batches hold at most ``_BATCH_CHARS`` characters (one longer document alone), and
    a document over ``_LONG_DOC_CHARS`` takes the per-document path."""
    import transforms.dedup.minhash as minhash

    monkeypatch.setattr(minhash, "_BATCH_CHARS", 100)
    monkeypatch.setattr(minhash, "_LONG_DOC_CHARS", 300)
    calls: list[tuple[str, list[int]]] = []
    batch, single = MinHasher.batch_hashes, MinHasher.shingle_hashes
    monkeypatch.setattr(MinHasher, "batch_hashes",
                        lambda self, texts: calls.append(("batch", [len(t) for t in texts])) or batch(self, texts))
    hasher = MinHasher(num_perm=8)
    lengths = [40, 60, 1, 100, 99, 2, 300, 301, 5, 150]
    texts = [("word " * 80)[:k] for k in lengths]
    monkeypatch.setattr(MinHasher, "shingle_hashes",
                        lambda self, text: calls.append(("single", [len(text)])) or single(self, text))
    rows = hasher.signatures(texts)
    batches = [c for c in calls if c[0] == "batch" or c[1] == [301]]
    assert batches == [("batch", [40, 60]), ("batch", [1]), ("batch", [100]), ("batch", [99]), ("batch", [2]),
                       ("batch", [300]), ("single", [301]), ("batch", [5]), ("batch", [150])]
    a, b = hasher.permutations
    for text, row in zip(texts, rows):
        ref = single(hasher, text)
        assert np.array_equal(row, (a[:, None] * ref[None, :] + b[:, None]).min(axis=1))


@pytest.mark.parametrize("ngram", [1, 3, 5])
def test_a_batch_of_exactly_ngram_words_and_lone_surrogates_with_lowering(ngram):
    hasher = MinHasher(num_perm=8, ngram=ngram)
    a, b = hasher.permutations
    texts = [" ".join(["alpha", "beta", "gamma", "delta", "eps"][:ngram]),  # alone: exactly n words
             "\ud800 İSTANBUL ÄÖÜ a b c d e f"]  # the str.lower() path with a lone surrogate
    for batch in ([texts[0]], [texts[1]], texts):
        for text, row in zip(batch, hasher.signatures(batch)):
            ref = hasher.shingle_hashes(text)
            assert len(ref) and np.array_equal(row, (a[:, None] * ref[None, :] + b[:, None]).min(axis=1))


def test_configs_refuse_each_bad_value_alone():
    assert MinHasher(num_perm=1, ngram=1).num_perm == 1
    for bad in ({"num_perm": 0}, {"ngram": 0}, {"num_perm": -1}):
        with pytest.raises(ValueError, match="^num_perm and ngram must be > 0$"):
            MinHasher(**bad)
    assert MinHashConfig(threshold=0.01).threshold == 0.01 and MinHashConfig(threshold=0.99).layout()
    for threshold in (0.0, 1.0, 1.5, -0.5):
        with pytest.raises(ValueError, match=rf"^threshold must be in \(0, 1\), got {threshold}$"):
            MinHashConfig(threshold=threshold)
    for name in ("num_perm", "bands", "rows", "ngram", "batch_size", "salts", "max_rounds", "hot_degree"):
        ones = {"num_perm": 1, "bands": 1, "rows": 1, name: 1}
        assert getattr(MinHashConfig(**ones), name) == 1
        with pytest.raises(ValueError, match=f"^{name} must be > 0$"):
            MinHashConfig(**{**ones, name: 0, "threshold": 0.5})


def test_star_step_refuses_bad_settings():
    from transforms.dedup.components import StarRound, StarStep

    StarStep("large", hot_degree=1, sample_every=1), StarStep("small"), StarRound(hot_degree=1, sample_every=1)
    for args, got in [(("medium",), "'medium', 10000, 64"), (("large", 0), "'large', 0, 64"),
                      (("small", 10, 0), "'small', 10, 0")]:
        with pytest.raises(ValueError, match=r"^StarStep\(kind large\|small, hot_degree >= 1, sample_every >= 1\), "
                                             rf"got {got}$"):
            StarStep(*args)


def _one_round_in_memory(edges: list[tuple[str, str]]) -> set[tuple[str, str]]:
    """One large-star + small-star round, as ``components_in_memory`` runs it."""
    grouped: dict = {}
    for a, b in edges:
        grouped.setdefault(a, set()).add(b)
        grouped.setdefault(b, set()).add(a)
    large = {e for u, n in grouped.items() for e in large_star(u, n)}
    smaller: dict = {}
    for a, b in large:
        hi, lo = (a, b) if a > b else (b, a)
        smaller.setdefault(hi, set()).add(lo)
    return {e for u, n in smaller.items() for e in small_star(u, n)}


@pytest.mark.parametrize("hot", [{}, {"hot_degree": 2, "sample_every": 1}, {"hot_degree": 3, "sample_every": 2}],
                         ids=["plain", "all-hot", "sampled"])
def test_one_star_round_in_beam_is_the_in_memory_round(beam_options, hot):
    """One ``StarRound`` pipeline (the fast stand-in for the rounds to convergence): the
    same edges as the in-memory round, with hot nodes split or not; split, no star group
    holds the 29 neighbours of the stars graph's centre (``star_group_size``)."""
    from apache_beam.metrics.metric import MetricsFilter

    edges = sorted({(f"n{a:04d}", f"n{b:04d}") for _, g, _ in graphs()[1:5:3] for a, b in g})
    want = sorted(_one_round_in_memory(edges))
    assert want != sorted(edges)
    p = TestPipeline(options=beam_options)
    out = p | beam.Create(edges) | StarRound(**hot)
    assert_that(out, equal_to(want))
    result = p.run()
    result.wait_until_finish()
    sizes = result.metrics().query(MetricsFilter().with_namespace("dedup_edges").with_name("star_group_size"))
    largest = max(d.committed.max for d in sizes["distributions"])
    assert largest >= 29 if not hot else largest <= 12, largest


def test_chunk_edges_link_each_run_of_equal_band_values_to_its_smallest_node():
    from transforms.dedup.band_chunks import BandChunk, chunk_edges

    v = lambda *rows: np.array(rows, dtype=np.uint32)  # noqa: E731
    chunks = [BandChunk(v([5, 1], [7, 7], [5, 1]), ("1|c", "1|x", "1|b")),
              BandChunk(v([5, 1], [5, 2], [7, 7]), ("1|a", "1|y", "1|w")),
              BandChunk(v([5, 1], [9, 9]), ("1|c", "1|z"))]  # "1|c" twice in its run
    edges = chunk_edges(chunks)
    # runs: [5,1] = {c, b, a, c} -> a; [7,7] = {x, w} -> w; [5,2] and [9,9] alone
    assert sorted(edges) == [("1|b", "1|a"), ("1|c", "1|a"), ("1|c", "1|a"), ("1|x", "1|w")]
    assert chunk_edges([BandChunk(v([1, 2]), ("1|a",))]) == []
    # the first value decides the order of runs, a later one splits them
    assert chunk_edges([BandChunk(v([1, 2], [1, 3], [1, 2]), ("1|b", "1|a", "1|c"))]) == [("1|c", "1|b")]


def test_cut_groups_every_band_by_its_first_value_and_drops_empty_signatures():
    from transforms.dedup.band_chunks import cut, key_chunk

    hasher = MinHashConfig().hasher()
    texts = book_docs(5) + [""]
    signatures = hasher.signatures(texts)
    nodes = [f"1|d{i}" for i in range(len(texts))]
    got = list(cut(signatures, nodes, 14, 8, parts=3))
    assert {k[0] for k, _ in got} == set(range(14)) and all(0 <= k[1] < 3 for k, _ in got)
    seen = set()
    for (band, part), chunk in got:
        assert "1|d5" not in chunk.nodes  # no shingles: nothing to compare
        assert (chunk.values[:, 0] % 3 == part).all() and chunk.values.dtype == np.uint32
        for node, values in zip(chunk.nodes, chunk.values):
            d = int(node[3:])
            assert (values == signatures[d, band * 8:(band + 1) * 8]).all()
            seen.add((band, node))
            # an earlier run's index row (band_keys' bytes) lands in the same group, same values
            key = band_keys(signatures[d], 14, 8)[band]
            (kb, kp), one = key_chunk(key, node, 8, 3)
            assert (kb, kp) == (band, part) and (one.values == values).all() and one.nodes == (node,)
    assert len(seen) == 14 * 5


@pytest.mark.parametrize("flush_rows", [1 << 16, 50])
def test_band_chunks_give_the_components_of_the_per_key_path(beam_options, monkeypatch, flush_rows):
    """300 documents with near copies and one bucket shared by 120 pages: the chunked path
    (with sends at the bundle's end only, and every 50 entries) and the per-key reference
    (BandKeys + salted BucketEdges) give the same components."""
    import transforms.dedup.band_chunks as band_chunks
    from transforms.dedup.band_chunks import BandChunks, ChunkEdges
    from transforms.dedup.dedup import BandKeys, BucketEdges

    monkeypatch.setattr(band_chunks, "FLUSH_ROWS", flush_rows)
    rng = random.Random(3)
    base = book_docs(60)
    texts = []
    for i in range(300):
        words = base[i % 60].split()
        if i >= 60:  # an edited copy: a few words changed
            for _ in range(rng.randint(0, 6)):
                words[rng.randrange(len(words))] = rng.choice(["whale", "sea", "ship", "Ahab"])
        texts.append(" ".join(words))
    texts += ["the very same boilerplate footer text on every page of the site"] * 120
    nodes = [(f"1|d{i:03d}", t) for i, t in enumerate(texts)]
    config = MinHashConfig()
    with TestPipeline(options=beam_options) as p:
        docs = p | beam.Create(nodes)
        chunked = (docs | "Chunks" >> BandChunks(config.hasher(), 14, 8, 4, config.batch_size)
                   | "ChunkEdges" >> ChunkEdges())
        per_key = docs | "Keys" >> BandKeys(config) | "KeyEdges" >> BucketEdges(salts=8)

        def same_components(got: list) -> None:
            chunked_edges = [e for tag, e in got if tag == "chunk"]
            key_edges = [e for tag, e in got if tag == "key"]
            assert len(chunked_edges) == len(set(chunked_edges)) > 100  # distinct
            assert components_union_find(chunked_edges) == components_union_find(key_edges)

        both = ((chunked | "TagC" >> beam.Map(lambda e: ("chunk", e)),
                 per_key | "TagK" >> beam.Map(lambda e: ("key", e))) | beam.Flatten())
        assert_that(both, same_components)


def test_parts_per_band_grow_with_the_input_past_the_least():
    from transforms.dedup.band_chunks import BYTES_PER_PART, parts_for

    assert BYTES_PER_PART == 256 << 20
    assert parts_for(0, 16) == 16 and parts_for(16 * BYTES_PER_PART, 16) == 16
    assert parts_for(16 * BYTES_PER_PART + 1, 16) == 17 and parts_for(1000 * BYTES_PER_PART, 16) == 1000
