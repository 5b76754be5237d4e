"""Where a job reads and writes: path normalisation and the overlap checks of the config.

A stage that runs again first deletes its old outputs (``pipelines.manifest.clear_stage``:
``docs/<stage>/``, ``rejected/<stage>/``, ``failed/<stage>/``, ``crawl/``, and the drivers'
``work/`` folders), so an input that lies in those folders is deleted before it is read:
the documents are lost and the job still ends well. ``check_job_paths`` refuses:

* an input pattern (or the seeds file) that can match a file in one of ``OUTPUT_AREAS``
  of the output: the top-level folders the job writes (and partly deletes) on some run.
  Other folders under the output are the user's (e.g. ``<output>/raw/``), and so are
  model files and the dedup index, which live under the output legitimately;
* a matched input file whose real path (symlinks resolved) lies in those folders;
* an output inside the read-only shared data folder (``../shared`` beside the
  repository, or ``$TOKENFACTORY_SHARED_DATA``), an output that is an existing file or
  lies below one, and a ``file://`` output (Beam's filesystems know only plain paths);
* an output that is a folder of the system (``/``, ``/etc``, ``/usr``, ... ``SYSTEM_FOLDERS``)
  or a home folder itself (``~``, ``/root``, ``/home/<user>``, every home in the password
  database), or lies anywhere below ``/proc`` or ``/sys``: a job writes ``docs/``,
  ``manifests/``, ``report/``... there (a red team's ``output: /etc`` wrote 11 files into
  ``/etc``). Folders below them (``/home/u/out``, ``/var/data/job``) are fine.

Paths are compared after normalisation: local paths are made absolute with symlinks and
``..`` resolved (``os.path.realpath``), ``file://`` URLs become paths, ``~`` is expanded
for inputs (fsspec does so; Beam does not for the output), trailing and doubled slashes
go; object-store URLs compare by scheme (``s3a``/``s3n`` are ``s3``, ``gcs`` is ``gs``),
bucket and key components. Glob components (``*``, ``?``, ``[...]``) are matched against
the folder names with ``fnmatch``; a ``**`` component can match anything below it.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import logging
import os
import posixpath
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Iterable, Optional
from urllib.parse import unquote

from pipelines.config_errors import ConfigError, quote
from storage.redact import has_userinfo

if TYPE_CHECKING:
    from pipelines.config import JobConfig
    from transforms.readers.files import FileRef

_LOGGER = logging.getLogger(__name__)

# Top-level folders the job writes under its output (DESIGN.md's output layout, plus the
# drivers' work/ folder and the trained tokenizer/).
OUTPUT_AREAS = ("crawl", "docs", "failed", "manifests", "rejected", "report", "review",
                "tokenizer", "tokens", "work")

# String keys that are not storage locations: crawl targets and patterns may hold an '@'.
NOT_LOCATIONS = frozenset({"crawl.seeds", "crawl.allow_patterns", "crawl.deny_patterns",
                           "crawl.user_agent"})

# Folders of the operating system that are never a job's output themselves (their
# sub-folders may be, e.g. /var/tmp/job or /usr/local/data/job), and the pseudo
# filesystems nothing below which is storage.
SYSTEM_FOLDERS = ("/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32",
                  "/opt", "/proc", "/run", "/sbin", "/srv", "/sys", "/tmp", "/usr", "/usr/bin",
                  "/usr/lib", "/usr/local", "/usr/sbin", "/usr/share", "/var", "/var/lib", "/var/log")
PSEUDO_FILESYSTEMS = ("/proc", "/sys")

_SCHEME_ALIASES = {"s3a": "s3", "s3n": "s3", "gcs": "gs"}
_GLOB_CHARS = set("*?[")


@dataclass(frozen=True)
class Location:
    """A normalised path: ``root`` is ``""`` for local files, else ``scheme://netloc``."""

    root: str
    parts: tuple[str, ...]

    def text(self) -> str:
        return (self.root + "/" if self.root else "/") + "/".join(self.parts)


def _split(path: str) -> tuple[str, ...]:
    return tuple(p for p in path.split("/") if p not in ("", "."))


def _local(path: str, expand_user: bool) -> Location:
    if expand_user:
        path = os.path.expanduser(path)
    return Location("", _split(os.path.realpath(path).replace(os.sep, "/")))


def location(url: str, expand_user: bool = True) -> Location:
    """The normalised form of a local path, ``file://`` URL or object-store URL."""
    if "://" not in url:
        return _local(url, expand_user)
    scheme, _, rest = url.partition("://")
    netloc, _, path = rest.partition("/")  # "?" and "#" belong to object keys (globs)
    scheme = _SCHEME_ALIASES.get(scheme.lower(), scheme.lower())
    host = netloc.rpartition("@")[2].lower()  # userinfo never identifies a place
    if scheme == "file" and host in ("", "localhost"):
        return _local(unquote("/" + path), expand_user)
    normal = posixpath.normpath("/" + path)
    return Location(f"{scheme}://{host}", _split(normal))


def is_within(inner: Location, outer: Location) -> bool:
    """Whether ``inner`` is ``outer`` or lies below it."""
    return inner.root == outer.root and inner.parts[:len(outer.parts)] == outer.parts


def may_match_within(pattern: Location, folder: Location) -> bool:
    """Whether the glob ``pattern`` can match a file at or below ``folder``."""
    if pattern.root != folder.root:
        return False
    for i, part in enumerate(pattern.parts):
        if "**" in part:
            return True  # any depth from here on
        if i >= len(folder.parts):
            return True  # every folder component matched: the pattern goes below it
        if folder.parts[i] != part and not fnmatch.fnmatchcase(folder.parts[i], part):
            return False
    return len(pattern.parts) >= len(folder.parts)


def read_only_folders() -> list[Location]:
    """The shared data folder beside the repository, and ``$TOKENFACTORY_SHARED_DATA``."""
    repository = Path(__file__).resolve().parent.parent
    folders = [location(str(repository.parent / "shared"))]
    extra = os.environ.get("TOKENFACTORY_SHARED_DATA")
    if extra:
        folders.append(location(extra))
    return folders


def expand_output(output: str) -> str:
    """A local output with ``~`` expanded as a shell would: Beam's filesystems and the
    lease take the path as it is, so ``~/out`` became a folder named ``~`` in the
    working directory. URLs are returned unchanged."""
    return os.path.expanduser(output) if output.startswith("~") else output


def home_folders() -> set[Location]:
    """This user's home (``~``), ``/root`` and the home of every account in the password
    database (``/home/<user>`` ones among them)."""
    import pwd

    homes = {os.path.expanduser("~"), "/root"}
    try:
        homes.update(entry.pw_dir for entry in pwd.getpwall() if entry.pw_dir)
    except OSError:  # no password database (some containers): the two above remain
        pass
    return {location(home) for home in homes}


def system_folder_problem(output: str, out: Location) -> Optional[str]:
    """Why the local output ``out`` is a system or home folder, or None."""
    advice = "give the job a folder of its own, e.g. out/<job> or /data/<job>"
    if any(is_within(out, location(folder)) for folder in PSEUDO_FILESYSTEMS):
        return f"{output!r} lies in {out.parts[0] if out.parts else '/'}, a pseudo filesystem; {advice}"
    system = {location(folder) for folder in SYSTEM_FOLDERS} | {Location("", _split(f)) for f in SYSTEM_FOLDERS}
    if out in system:
        return (f"{output!r} is the system folder {out.text()}: a job writes docs/, manifests/, "
                f"report/... into its output and deletes a stage's old files there; {advice}")
    homes = home_folders()
    if out in homes or (len(out.parts) == 2 and out.parts[0] == "home"):
        return (f"{output!r} is a home folder ({out.text()}): a job writes docs/, manifests/, report/... "
                f"into its output and deletes a stage's old files there; use a folder below it, "
                f"e.g. {out.text().rstrip('/')}/tokenfactory-out")
    return None


def output_problem(output: str) -> Optional[str]:
    """Why ``output`` cannot be a job output, or None."""
    if output.lower().startswith("file://"):
        return (f"{output!r}: file:// URLs are not supported by Beam's filesystems; "
                f"give the plain path {location(output).text()!r}")
    out = location(output, expand_user=False)
    for folder in read_only_folders():
        if is_within(out, folder):
            return (f"{output!r} lies in the read-only shared data folder {folder.text()}; "
                    "write job outputs elsewhere (e.g. out/)")
    if out.root:
        return None
    problem = system_folder_problem(output, out)
    if problem:
        return problem
    probe = out.text()
    while not os.path.lexists(probe) and probe != os.path.dirname(probe):
        probe = os.path.dirname(probe)
    if os.path.exists(probe) and not os.path.isdir(probe):
        what = "is an existing file" if probe == out.text() else f"lies below the file {probe!r}"
        return f"{output!r} {what}; the output must be a folder"
    return None


def input_problem(pattern: str, output: str, matched: Iterable[str] = ()) -> Optional[str]:
    """Why the input ``pattern`` (whose matched files are ``matched``) would be written
    or deleted by a job writing ``output``, or None."""
    out = location(output, expand_user=False)
    areas = [Location(out.root, out.parts + (area,)) for area in OUTPUT_AREAS]
    where = location(pattern)
    hits = [area for area in areas if may_match_within(where, area)]
    what = f"{pattern!r} can match files"
    for url in () if hits else matched:
        if "://" in url and not url.lower().startswith("file://"):
            continue  # object stores have no symlinks: the pattern check decided
        real = location(url)
        hits = [area for area in areas if is_within(real, area)]
        if hits:
            what = f"{pattern!r} matches {url!r}, which is really {real.text()!r},"
            break
    if not hits:
        return None
    names = ", ".join(f"{h.parts[-1]}/" for h in hits)
    return (f"{what} in {names} under the output {output!r}: the job writes there and "
            "deletes a stage's old files before it runs again, so the input would be lost; "
            "move the input out of those folders or choose another output")


def _strings(value: Any, key: str) -> Iterator[tuple[str, str]]:
    """(key, string) of every string in a config value, dataclasses and lists walked."""
    if isinstance(value, str):
        yield key, value
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            if f.compare:
                yield from _strings(getattr(value, f.name), f"{key}.{f.name}" if key else f.name)
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _strings(item, f"{key}[{i}]")


def check_no_credentials(config: "JobConfig") -> None:
    """No storage location or option carries credentials in its URL: they would end up
    in logs, manifests and reports (crawl seeds and URL patterns are not locations)."""
    for key, text in _strings(config, ""):
        if key.split("[")[0] not in NOT_LOCATIONS and has_userinfo(text):
            raise ConfigError(
                f"{config.source_file}: {key}: {quote(text)}: credentials in a URL are not "
                "accepted (they would be logged and stored); give them as pipeline options "
                "(--s3_access_key_id, --s3_secret_access_key), in the environment or in the "
                "provider's credentials file")


def check_job_paths(config: "JobConfig") -> dict[str, list["FileRef"]]:
    """The output is a usable folder, every input pattern matches a file, the seeds file
    exists (remote ones too), and no input lies where the job writes or deletes.
    Returns the files each input matched, by ``inputs[i]``."""
    from transforms.readers.files import match_pattern

    where = config.source_file
    problem = output_problem(config.output)
    if problem:
        raise ConfigError(f"{where}: output: {problem}")
    patterns = [(f"inputs[{i}].path", spec.path) for i, spec in enumerate(config.inputs)]
    if config.crawl is not None and config.crawl.seeds_file:
        patterns.append(("crawl.seeds_file", config.crawl.seeds_file))
    matched: dict[str, list[FileRef]] = {}
    for key, pattern in patterns:
        problem = input_problem(pattern, config.output)  # before any (remote) listing
        if problem:
            raise ConfigError(f"{where}: {key}: {problem}")
        try:
            refs = match_pattern(pattern)
        except Exception as exc:  # FileNotFoundError, PermissionError, network errors
            raise ConfigError(f"{where}: {key}: cannot read {quote(pattern)}: {exc}") from None
        if not refs and key != "crawl.seeds_file":
            raise ConfigError(f"{where}: {key}: no file matches {quote(pattern)}")
        problem = input_problem(pattern, config.output, [ref.url for ref in refs])
        if problem:
            raise ConfigError(f"{where}: {key}: {problem}")
        matched[key.rsplit(".", 1)[0]] = refs
    return matched
