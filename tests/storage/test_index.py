"""index.json names and versions: hostile names refused, every index version still read."""

from __future__ import annotations

import pytest

from storage.index import (IndexFileError, check_documents_name, check_shard_name, check_tokenizer_name,
                           check_version_name, repeat_counts, special_ids, validate_index, version_files)

SHA = "ab" * 32
HOSTILE = ["..", ".", "", "../../..", "../x", "a/b", "/abs", "v1/../..", "x\\y", "v1\x00", "v1\n", " v1", "-rf",
           ".hidden", "v\u2028", "v1/", "~root", None, 5, ["v1"]]


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_version_names_are_refused(name):
    with pytest.raises(IndexFileError, match="version"):
        check_version_name(name)
    with pytest.raises(IndexFileError, match="outside its version"):
        validate_index({"version": name, "shards": []}, "s3://b/index.json")


@pytest.mark.parametrize("name", HOSTILE + ["../../x.tfs", "x.tfs/../../y.tfs", "/tmp/x.tfs", "x.tfs.partial",
                                            "documents/x.tfs", ".tfs"])
def test_hostile_shard_names_are_refused(name):
    entry = {"name": name, "num_docs": 1, "num_tokens": 1, "num_bytes": 112, "sha256": SHA}
    with pytest.raises(IndexFileError, match="shard name"):
        validate_index({"version": "v1", "shards": [entry]}, "idx")


@pytest.mark.parametrize("name", ["../x.parquet", "documents/../../x.parquet", "/documents/x.parquet",
                                  "documents/a/b.parquet", "x.parquet", "documents/.parquet", ""])
def test_hostile_documents_names_are_refused(name):
    with pytest.raises(IndexFileError, match="documents table"):
        check_documents_name(name)


@pytest.mark.parametrize("name", ["../t.model", "tok/../../t.model", "/etc/t.model", "a/t.model", ".model",
                                  "tokenizer.model.tmp", "", None])
def test_hostile_tokenizer_names_are_refused(name):
    with pytest.raises(IndexFileError, match="tokenizer file"):
        check_tokenizer_name(name)


def test_plain_names_pass():
    assert check_version_name("v20261129T194757-b8f58a35") == "v20261129T194757-b8f58a35"
    assert check_shard_name("shard-00000-of-00012.tfs") and check_shard_name("s0.tfs")
    assert check_documents_name("documents/shard-00000-of-00012.parquet")
    assert check_tokenizer_name("tokenizer.model")


def entry(i: int, **extra) -> dict:
    return {"name": f"shard-{i:05d}-of-00002.tfs", "num_docs": 1, "num_tokens": 3, "num_bytes": 110,
            "sha256": f"{i:064x}", **extra}


def test_version_files_of_index_versions_1_2_and_3():
    v1 = {"version": "v1", "shards": [entry(0), entry(1)]}
    assert [(f.name, f.kind) for f in version_files(v1)] == [
        ("shard-00000-of-00002.tfs", "shard"), ("shard-00001-of-00002.tfs", "shard"),
        ("documents/part-00000-of-00001.parquet", "unchecked")]
    v2 = {"version": "v2", "index_version": 2,
          "shards": [entry(i, documents=f"documents/shard-{i:05d}-of-00002.parquet") for i in range(2)]}
    assert [(f.name, f.sha256, f.kind) for f in version_files(v2)][2:] == [
        ("documents/shard-00000-of-00002.parquet", None, "unchecked"),
        ("documents/shard-00001-of-00002.parquet", None, "unchecked")]
    v3 = {"version": "v3", "index_version": 3,
          "tokenizer": {"file": "tokenizer.model", "sha256": SHA, "vocab_size": 400, "eos_id": 2, "bos_id": 1,
                        "pad_id": -1, "unk_id": 0},
          "shards": [entry(0, documents="documents/shard-00000-of-00002.parquet", documents_sha256=SHA)]}
    assert [(f.name, f.sha256, f.kind) for f in version_files(v3)] == [
        ("shard-00000-of-00002.tfs", f"{0:064x}", "shard"),
        ("documents/shard-00000-of-00002.parquet", SHA, "file"), ("tokenizer.model", SHA, "file")]
    assert special_ids(v3) == {"eos_id": 2, "bos_id": 1, "pad_id": None, "unk_id": 0, "vocab_size": 400}
    assert special_ids({"vocab_size": 500, "shards": []})["vocab_size"] == 500  # version 2: top level
    assert special_ids(v1) == {"eos_id": None, "bos_id": None, "pad_id": None, "unk_id": None, "vocab_size": None}


@pytest.mark.parametrize("bad,match", [
    ({"version": "v", "index_version": 4, "shards": []}, "index_version 4"),
    ({"version": "v", "shards": [entry(0), entry(0)]}, "listed twice"),
    ({"version": "v", "shards": [entry(0, num_tokens=-1)]}, "num_tokens"),
    ({"version": "v", "shards": [entry(0, num_bytes="112")]}, "num_bytes"),
    ({"version": "v", "shards": [entry(0, sha256="XYZ")]}, "sha256"),
    ({"version": "v", "dtype": "float32", "shards": []}, "dtype"),
    ({"version": "v", "vocab_size": 1 << 33, "shards": []}, "vocab_size"),
    ({"version": "v", "tokenizer": {"file": "../t.model", "sha256": SHA}, "shards": []}, "tokenizer file"),
    ([], "not a token index"),
])
def test_malformed_indexes_name_the_field(bad, match):
    with pytest.raises(IndexFileError, match=match):
        validate_index(bad, "gs://b/v/index.json")


@pytest.mark.parametrize("bad,match", [
    ({"shards": [entry(0, repeat_tokens=-1)]}, "repeat_tokens must be an integer >= 0"),
    ({"shards": [entry(0, repeat_docs=-3)]}, "repeat_docs must be an integer >= 0"),
    ({"shards": [entry(0, repeat_docs=True)]}, "repeat_docs must be an integer"),
    ({"shards": [entry(0, repeat_tokens="2")]}, "repeat_tokens must be an integer"),
    ({"shards": [entry(0, repeat_tokens=2.0)]}, "repeat_tokens must be an integer"),
    ({"shards": [entry(0, repeat_tokens=4)]}, "repeat_tokens 4 exceeds num_tokens 3"),
    ({"shards": [entry(0, repeat_docs=1 << 62)]}, "repeat_docs 4611686018427387904 exceeds num_docs 1"),
    ({"repeat_tokens": -1, "shards": [entry(0)]}, "repeat_tokens must be an integer >= 0"),
    ({"repeat_tokens": 1 << 70, "shards": [entry(0, repeat_tokens=3)]}, "not the sum over the shards"),
    ({"repeat_docs": 1, "shards": [entry(0), entry(1)]}, "repeat_docs 1 is not the sum over the shards \\(0\\)"),
    ({"repeat_docs": None, "shards": [entry(0)]}, "repeat_docs must be an integer"),
])
def test_hostile_repeat_counts_are_refused(bad, match):
    with pytest.raises(IndexFileError, match=match):
        validate_index({"version": "v", **bad}, "gs://b/v/index.json")


def test_repeat_counts_default_to_zero_for_indexes_before_upsampling():
    old = validate_index({"version": "v", "index_version": 3, "shards": [entry(0), entry(1)]})
    assert repeat_counts(old) == (0, 0) and repeat_counts(old["shards"][0]) == (0, 0)
    new = validate_index({"version": "v", "repeat_docs": 1, "repeat_tokens": 5,
                          "shards": [entry(0, num_docs=2, num_tokens=6, repeat_docs=1, repeat_tokens=3),
                                     entry(1, repeat_docs=0, repeat_tokens=2)]})
    assert repeat_counts(new) == (1, 5) and repeat_counts(new["shards"][1]) == (0, 2)


WHERE = "gs://b/tokens/v7/index.json"


@pytest.mark.parametrize("text,match", [
    ('{"index_version": [1], "shards": []}', r"index_version \[1\] is not one of \(1, 2, 3\)"),
    ('{"index_version": "x", "shards": []}', r"index_version 'x' is not one of"),
    ('{"index_version": 1e400, "shards": []}', r"index_version inf is not one of .*damaged"),
    ('{"index_version": NaN, "shards": []}', r"index_version nan is not one of"),
    ('{"index_version": 2.0, "shards": []}', r"index_version 2.0 is not one of"),
    ('{"index_version": true, "shards": []}', r"index_version True is not one of"),
    ('{"index_version": 9, "shards": []}', r"index_version 9 .*newer tokenfactory: upgrade"),
    ('{"dtype": ["uint16"], "shards": []}', r"dtype must be one of \['uint16', 'uint32'\], got \['uint16'\]"),
    ('{"dtype": {"a": 1}, "shards": []}', r"dtype must be one of"),
    ('{"tokenizer": ["tokenizer.model"], "shards": []}', r"tokenizer must be an object"),
    ('{"tokenizer": {"sha256": ["ab"]}, "shards": []}', r"tokenizer.sha256 must be 64 lowercase hex digits"),
    ('{"tokenizer": {"vocab_size": 1e400}, "shards": []}', r"vocab_size must be an integer, got inf"),
    ('{"vocab_size": "400", "shards": []}', r"vocab_size must be an integer, got '400'"),
    ('{"index_version": [' + "1, " * 10000 + '1], "shards": []}', r"index_version \[1, 1, .*\.\.\. is not one"),
])
def test_fields_of_the_wrong_type_are_index_file_errors_naming_the_index(text, match):
    """Before, these raised TypeError, ValueError or OverflowError from int() and set
    lookups, naming neither the index nor the field."""
    import json

    with pytest.raises(IndexFileError, match=match) as error:
        validate_index(json.loads(text), WHERE)
    assert str(error.value).startswith(WHERE + ": ") and len(str(error.value)) < 400


def test_wrong_types_and_absent_files_through_the_loader_name_the_index(tmp_path):
    """The loader's read of a real index.json file: a wrong type, undecodable bytes and
    an index that is not there are IndexFileErrors naming the file."""
    from storage.cache import ShardCache

    cache = ShardCache(hot_dir=str(tmp_path / "hot"))
    version = tmp_path / "v7"
    version.mkdir()
    path = version / "index.json"
    for text, match in [('{"index_version": 1e400, "version": "v7", "shards": []}', "index_version inf"),
                        ('{"dtype": ["uint16"], "version": "v7", "shards": []}', "dtype must be one of"),
                        ('{"shards": [' * 100_000, "not JSON"), ("\udcff", "not JSON")]:
        path.write_bytes(text.encode("utf-8", "surrogateescape"))
        with pytest.raises(IndexFileError, match=match) as error:
            ShardCache(hot_dir=str(tmp_path / "hot")).read_index(str(path))
        assert str(error.value).startswith(f"{path}: ")
    with pytest.raises(IndexFileError, match="no such index.json") as missing:
        cache.read_index(str(tmp_path / "v8" / "index.json"))
    assert str(missing.value).startswith(f"{tmp_path}/v8/index.json: ")


@pytest.mark.parametrize("path", ["out/tokenizer/tokenizer.model", "/abs/elsewhere/tokenizer.model",
                                  "../../../tokenizer.model", ["not", "a", "string"]])
def test_an_older_index_with_tokenizer_path_is_still_read(tmp_path, path):
    """Indexes written before the tokenizer's origin left index.json carry tokenizer.path
    (any path, relative to that run's working directory): read as before, never used."""
    from storage.cache import ShardCache
    from tests.storage.datasets import make_version

    tokenizer = {"path": path, "file": "tokenizer.model", "sha256": SHA, "vocab_size": 100_000}
    index_url = make_version(tmp_path / "v1", shards=2, extra={"index_version": 3, "tokenizer": tokenizer})
    (tmp_path / "v1" / "tokenizer.model").write_bytes(b"model")
    index = ShardCache(hot_dir=str(tmp_path / "hot")).read_index(index_url)
    assert [f.name for f in version_files(index)] == ["shard-00000.tfs", "shard-00001.tfs", "tokenizer.model"]
    cache = ShardCache(hot_dir=str(tmp_path / "hot"))
    assert len(cache.tokens(index_url, "shard-00001.tfs")) == index["shards"][1]["num_tokens"]
