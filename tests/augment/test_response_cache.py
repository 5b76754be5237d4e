"""The response cache: one file per key under a 2-char fan-out, atomic, hostile keys refused."""

from __future__ import annotations

import hashlib
import pickle
from pathlib import Path

import pytest

from transforms.augment.response_cache import ResponseCache

KEY = hashlib.sha256(b"a request").hexdigest()


def test_put_then_get(tmp_path: Path) -> None:
    cache = ResponseCache(str(tmp_path / "cache"))
    assert cache.get(KEY) is None
    cache.put(KEY, "a generation\nwith lines ü")
    assert cache.get(KEY) == "a generation\nwith lines ü"
    assert (tmp_path / "cache" / KEY[:2] / f"{KEY}.txt").is_file()
    assert [p.name for p in (tmp_path / "cache" / KEY[:2]).iterdir()] == [f"{KEY}.txt"]  # no temp file left
    cache.put(KEY, "")  # an empty generation is cached too (it is rejected, deterministically)
    assert cache.get(KEY) == ""


def test_undecodable_text_round_trips(tmp_path: Path) -> None:
    cache = ResponseCache(str(tmp_path))
    text = "bytes \udcff\udcfe and a lone \ud800"
    cache.put(KEY, text)
    assert cache.get(KEY) == text


@pytest.mark.parametrize("key", ["", "../" + KEY[3:], KEY.upper(), KEY[:63], KEY + "0", "/" + KEY[1:],
                                 KEY[:62] + "/.", None, 7])
def test_hostile_keys_never_become_paths(tmp_path: Path, key: object) -> None:
    cache = ResponseCache(str(tmp_path / "c"))
    with pytest.raises(ValueError, match="64 lowercase hex"):
        cache.put(key, "x")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="64 lowercase hex"):
        cache.get(key)  # type: ignore[arg-type]
    assert not (tmp_path / "c").exists() or not any((tmp_path / "c").rglob("*"))


def test_fsspec_url_and_pickle() -> None:
    cache = ResponseCache("memory://tokenfactory-test-cache")
    cache.put(KEY, "in memory")
    copy = pickle.loads(pickle.dumps(cache))
    assert copy.get(KEY) == "in memory" and repr(copy) == "ResponseCache('memory://tokenfactory-test-cache')"
