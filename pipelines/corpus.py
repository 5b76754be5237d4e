"""Reading a finished stage's documents, and reference text files, outside Beam (for the
model training commands)."""

from __future__ import annotations

import hashlib
import heapq
from typing import Iterator, Sequence

import pyarrow.parquet as pq
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from pipelines.config import JobConfig
from pipelines.manifest import read_manifest
from pipelines.stage_specs import doc_stages
from transforms.doc import Doc, RawRecord, doc_from_row
from transforms.readers.tabular import TextFields, iter_jsonl, iter_parquet


def stage_doc_files(config: JobConfig, stage: str) -> list[str]:
    """The Parquet files of ``docs/<stage>/`` that the stage's manifest lists."""
    manifest = read_manifest(config.output, stage)
    if manifest is None:
        raise FileNotFoundError(f"no manifest for stage {stage!r} under {config.output}: run it first")
    marker = f"/docs/{stage}/"
    return [path for path in manifest.outputs if marker in path.replace("\\", "/")]


def finished_doc_stages(config: JobConfig) -> list[str]:
    """The document-writing stages that have a manifest under the output, latest first."""
    return [s for s in reversed(doc_stages()) if read_manifest(config.output, s) is not None]


def iter_docs(paths: list[str]) -> Iterator[Doc]:
    for path in paths:
        with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as fh:
            pfile = pq.ParquetFile(fh)
            for group in range(pfile.num_row_groups):
                for row in pfile.read_row_group(group).to_pylist():
                    yield doc_from_row(row)


def _key(doc_id: str, seed: int) -> int:
    return int.from_bytes(hashlib.sha1(f"{seed}:{doc_id}".encode()).digest()[:8], "big")


def sample_docs(config: JobConfig, stage: str, n: int, seed: int = 0) -> list[Doc]:
    """A uniform sample of ``n`` documents (bottom-n by a seeded hash of the id: the same
    sample for the same corpus and seed, in one streaming pass)."""
    heap: list[tuple[int, str, Doc]] = []
    for doc in iter_docs(stage_doc_files(config, stage)):
        item = (-_key(doc.id, seed), doc.id, doc)
        if len(heap) < n:
            heapq.heappush(heap, item)
        elif item[0] > heap[0][0]:
            heapq.heapreplace(heap, item)
    return [doc for _, _, doc in sorted(heap, key=lambda t: (-t[0], t[1]))]


def text_chunks(text: str, size: int = 3000) -> Iterator[str]:
    """~``size``-character chunks cut at blank lines."""
    current = ""
    for para in text.split("\n\n"):
        current += para.strip() + "\n\n"
        if len(current) >= size:
            yield current.strip()
            current = ""
    if current.strip():
        yield current.strip()


def reference_texts(paths: Sequence[str]) -> Iterator[str]:
    """The texts of reference files for training: plain text cut by ``text_chunks``, JSONL
    or Parquet files with a ``text`` field, each through the extract stage's
    ``normalize_text`` (NBSP, bidi and other format characters, control characters, blank
    runs), as corpus documents are: unnormalised, the same words scored up to 0.56 apart."""
    from transforms.extract.html import normalize_text

    for path in paths:
        if path.endswith((".jsonl", ".jsonl.gz", ".jsonl.zst", ".json")):
            records = iter_jsonl(path, TextFields(), "train")
        elif path.endswith(".parquet"):
            records = iter_parquet(path, TextFields(), "train")
        else:
            with open(path, encoding="utf-8", errors="replace") as fh:
                yield from (normalize_text(chunk) for chunk in text_chunks(fh.read()))
            continue
        yield from (normalize_text(r.text) for r in records if isinstance(r, RawRecord))
