"""Moving dataset versions between the storage tiers (``storage/tiers.py``: hot, warm,
cold; verified, atomic, resumable copies) with the tier URLs of a job config.

    python -m pipelines.tiers status  --config CONFIG
    python -m pipelines.tiers verify  --config CONFIG --tier warm [--version V]   (every version
            folder, incomplete ones too; every file in full: header, sha256, token ids)
    python -m pipelines.tiers promote --config CONFIG --version V [--from cold] [--to warm]
    python -m pipelines.tiers demote  --config CONFIG --version V [--from warm] [--to cold] [--delete-source]
    python -m pipelines.tiers gc      --config CONFIG    (archive warm versions older than storage.keep_warm_versions to cold)

promote, demote and gc write a tier: they take the output's lease (``<output>/_lease.json``,
as ``pipelines.run`` does) and are refused (exit 2, nothing copied) while a run holds it,
since that run's tokenize stage removes the version folders without index.json it finds
(``--break-lease`` takes a lease whose run is gone before it expired). Each version
folder they write holds its writer's lease (``<version>/_writer.json``) until index.json
is in place, so no cleanup elsewhere removes it meanwhile.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any, Optional, Sequence, TextIO

from pipelines.cli import setup_logging
from storage.index import IndexFileError
from storage.tiers import (StorageConfig, TierError, copy_version, delete_version, gc, incomplete_versions, list_versions,
                           verify_version, version_dirs)

_LOGGER = logging.getLogger(__name__)

__all__ = ["main"]


def _job_of(config_path: str) -> tuple[str, StorageConfig, tuple[str, ...]]:
    """The config's output, storage settings and pipeline options (the lease's S3 client)."""
    from pipelines.config import load_config  # after setup_logging: it imports Beam

    config = load_config(config_path, check_models=False)
    return config.output, config.storage or StorageConfig(), tuple(config.beam_args)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m pipelines.tiers", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["status", "verify", "promote", "demote", "gc"])
    parser.add_argument("--config", required=True)
    parser.add_argument("--version")
    parser.add_argument("--tier", default="warm")
    parser.add_argument("--from", dest="source")
    parser.add_argument("--to", dest="target")
    parser.add_argument("--delete-source", action="store_true")
    parser.add_argument("--break-lease", action="store_true",
                        help="promote/demote/gc: take the output's lease even from a live run (its owner is "
                             "logged): for a run you know is gone whose lease has not expired yet")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    setup_logging(logging.INFO, "%(levelname)s %(name)s: %(message)s")
    output, storage, beam_args = _job_of(args.config)
    out = sys.stdout
    if args.command not in ("status", "verify", "gc") and not args.version:
        parser.error(f"{args.command} needs --version")
    try:
        if args.command == "status":
            return _status(output, storage, out)
        if args.command == "verify":
            return _verify(args, output, storage, out)
        return _write(args, list(sys.argv[1:] if argv is None else argv), output, storage, beam_args, out)
    except (TierError, IndexFileError) as exc:  # a damaged or incomplete version: its message says what to do
        from storage.redact import redact_text

        sys.stderr.write(redact_text(f"{args.command} failed: {exc}\n"))
        return 1


def _status(output: str, storage: StorageConfig, out: TextIO) -> int:
    for tier in ("hot", "warm", "cold"):
        try:
            url = storage.url(tier, output)
        except ValueError:
            continue
        out.write(f"{tier:<5} {url}: {', '.join(list_versions(url, storage)) or '(no versions)'}\n")
        incomplete = incomplete_versions(url, storage)
        if incomplete:
            out.write(f"{'':<5} incomplete (no index.json): {', '.join(incomplete)}\n")
    return 0


def _verify(args: argparse.Namespace, output: str, storage: StorageConfig, out: TextIO) -> int:
    url = storage.url(args.tier, output)
    problems = []
    versions = [args.version] if args.version else version_dirs(url, storage)  # incomplete too
    for version in versions:
        problems += verify_version(url, version, storage)
    for problem in problems:
        out.write(f"BAD {problem}\n")
    if not versions:
        out.write(f"verified: no versions under {url}\n")
    elif not problems:
        out.write(f"verified: every file of {len(versions)} version(s) matches its index.json\n")
    return 1 if problems else 0


def _write(args: argparse.Namespace, argv: list[str], output: str, storage: StorageConfig,
           beam_args: tuple[str, ...], out: TextIO) -> int:
    """promote, demote or gc under the output's lease; exit 2 while a run (or another tier
    command) holds it or another process writes the same version folder."""
    from pipelines.lease import LeaseHeld, output_lease, version_writer
    from storage.redact import redact_command, redact_text

    command = redact_command(["python -m pipelines.tiers", *argv])

    def guard(folder: str) -> Any:
        return version_writer(folder, list(beam_args), command)

    try:
        with output_lease(output, list(beam_args), command).acquire(break_lease=args.break_lease):
            if args.command == "gc":
                for moved in gc(output, storage, guard):
                    out.write(f"archived {moved['version']} to cold ({moved['sent']} files sent)\n")
                return 0
            return _move(args, output, storage, guard, out)
    except LeaseHeld as held:
        sys.stderr.write(redact_text(f"{args.command} refused: {held}\n(the tier commands that write take the "
                                     "output's lease: a run's tokenize stage removes version folders without "
                                     "index.json)\n"))
        return 2


def _move(args: argparse.Namespace, output: str, storage: StorageConfig, guard: Any, out: TextIO) -> int:
    source = args.source or ("cold" if args.command == "promote" else "warm")
    target = args.target or ("warm" if args.command == "promote" else "cold")
    src, dst = storage.url(source, output), storage.url(target, output)
    result = copy_version(args.version, src, dst, storage, guard)
    problems = verify_version(dst, args.version, storage)
    if problems:
        out.write("".join(f"BAD {p}\n" for p in problems))
        return 1
    if args.delete_source:
        delete_version(src, args.version, storage)
    out.write(f"{args.command}d {args.version} {source} -> {target}: {result['sent']} files sent, "
              f"{result['skipped']} already there, {result['bytes'] / 1e6:.1f} MB\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
