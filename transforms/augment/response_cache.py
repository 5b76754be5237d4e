"""A cache of model responses by request key, on any fsspec filesystem (pure, no Beam).

One small file per key, ``<dir>/<key[:2]>/<key>.txt``, written to a temporary name and then
renamed, so a reader sees a whole response or none, and two workers writing the same key
write the same bytes. The key is the request's sha256 (``rephrase.request_key``) and must
be 64 lowercase hex characters: any other string is refused before it becomes a path.
Text is stored as UTF-8 with ``surrogatepass``, so a generation carrying undecodable bytes
(to be rejected as ``invalid_utf8``) reads back the same as it was returned.
"""

from __future__ import annotations

import logging
import re
import uuid

import fsspec

_LOGGER = logging.getLogger(__name__)
_KEY = re.compile(r"^[0-9a-f]{64}$")


def check_key(key: object) -> str:
    if not isinstance(key, str) or not _KEY.match(key):
        raise ValueError("response cache key: expected 64 lowercase hex characters (a sha256)")
    return key


class ResponseCache:
    """``get(key) -> str | None`` and ``put(key, text)`` over ``directory`` (path or URL)."""

    def __init__(self, directory: str) -> None:
        if not isinstance(directory, str) or not directory.strip():
            raise ValueError("response cache directory: expected a non-empty path or URL")
        self.directory = directory
        self._fs, root = fsspec.core.url_to_fs(directory)
        self._root = root.rstrip("/")

    def __repr__(self) -> str:
        return f"ResponseCache({self.directory!r})"

    def __getstate__(self) -> dict[str, str]:
        return {"directory": self.directory}

    def __setstate__(self, state: dict[str, str]) -> None:
        self.__init__(state["directory"])  # type: ignore[misc]

    def path(self, key: str) -> str:
        key = check_key(key)
        return f"{self._root}/{key[:2]}/{key}.txt"

    def get(self, key: str) -> str | None:
        path = self.path(key)
        try:
            with self._fs.open(path, "rb") as handle:
                data = handle.read()
        except (FileNotFoundError, NotADirectoryError):  # not there (or a file where a folder would be)
            return None
        return data.decode("utf-8", "surrogatepass")

    def put(self, key: str, text: str) -> None:
        if not isinstance(text, str):
            raise ValueError("response cache: text must be a str")
        path = self.path(key)
        folder = path.rsplit("/", 1)[0]
        self._fs.makedirs(folder, exist_ok=True)
        tmp = f"{folder}/.tmp-{uuid.uuid4().hex}-{key}"
        with self._fs.open(tmp, "wb") as handle:
            handle.write(text.encode("utf-8", "surrogatepass"))
        try:
            self._fs.mv(tmp, path)
        except Exception:
            self._fs.rm(tmp)
            raise
        _LOGGER.debug("cached response %s", key)
