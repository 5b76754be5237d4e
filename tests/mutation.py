"""Mutation testing of the core decision modules: ``make mutation`` (not part of ``make test``).

``python -m tests.mutation [NAME ...]`` runs mutmut 3.8 over each named entry of ``MODULES``
(all of them by default) against that entry's own fast test files, and prints mutants,
killed, survived and the diff of every survivor (kept in ``.mutation/NAME/report.md``).
``--report-only`` writes the report again from the last run; ``--recheck`` runs the
mutants the last run left against the test files as they are now.

mutmut is not a dependency of the project: the Makefile installs it, with only the
packages .venv lacks (``--no-deps``, pinned), into ``MUTMUT_LIB`` (``--target``), and this
driver puts that folder on ``PYTHONPATH``: it holds nothing .venv has, so nothing of .venv
is shadowed, and the processes some tests start import the mutated modules (which import
mutmut) too.

How a run works (mutmut 3.8.1; 3.3 does not run under pytest 9): in ``.mutation/NAME/``,
symlinks to the repository's top-level folders and a ``pyproject.toml`` (ours plus a
``[tool.mutmut]`` table: ``source_paths`` every package, ``only_mutate`` the entry's
files, ``pytest_add_cli_args_test_selection`` its test files) make a project of its own;
mutmut copies it to ``mutants/``, rewrites every function of the mutated files into
trampolines, runs the test files once to learn which tests reach which function, then
forks one pytest run per mutant with only those tests. Every run starts from an empty
``mutants/`` (mutmut's cache does not notice changed tests). Tests marked ``engines`` or
``slow`` are left out.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / ".mutation"
LIB = Path(os.environ.get("MUTMUT_LIB", "/tmp/tokenfactory-mutmut"))
SELECT = ["-m", "not engines and not slow"]
# a mutant's tests may run this many times their unmutated time before it counts as a
# timeout (mutmut's default, 15, lets one looping mutant hold a slow entry for minutes)
TIMEOUT_MULTIPLIER = 5.0
PACKAGES = ("benchmarks", "models", "pipelines", "storage", "transforms")  # importable code, copied


@dataclass(frozen=True)
class Target:
    """Files mutated together and the test files that must kill their mutants."""

    files: tuple[str, ...]
    tests: tuple[str, ...]
    # tests left out of this entry (pytest -k expression): slow ones whose behaviour is
    # another entry's (the multi-process hot-folder tests are the cache's, not the format's)
    skip: str = ""

    def __post_init__(self) -> None:
        outside = [f for f in self.files if f.split("/", 1)[0] not in PACKAGES]
        if outside:
            raise ValueError(f"only files of {PACKAGES} are mutated, got {outside}")


MODULES: dict[str, Target] = {
    "rules": Target(("transforms/clean/rules.py",), ("tests/transforms/test_rules.py",)),
    "clean": Target(("transforms/clean/clean.py",), ("tests/transforms/test_clean_select.py",
                                                      "tests/transforms/test_clean.py")),
    "robots": Target(("transforms/crawl/robots.py",), ("tests/transforms/test_urls_robots.py",)),
    "dedup": Target(("transforms/dedup/minhash.py", "transforms/dedup/components.py",
                     "transforms/dedup/dedup.py", "transforms/dedup/band_chunks.py"),
                    ("tests/transforms/test_dedup.py",),
                    skip="hot_node_split_bounds or split_hot_nodes_give or star_rounds_in_beam or incremental_dedup "
                         "or thousand_identical or mccormick"),
    "band_chunks": Target(("transforms/dedup/band_chunks.py",), ("tests/transforms/test_dedup.py",),
                          skip="not (chunk or cut)"),
    "shards": Target(("storage/shards.py", "storage/verify.py"), ("tests/storage/test_shards.py",
                                                                  "tests/storage/test_cache.py"),
                     skip="processes_sharing or processes_asking"),
    "cache": Target(("storage/cache.py",), ("tests/storage/test_cache_remote.py", "tests/storage/test_cache.py",
                                            "tests/storage/test_loader.py")),
    "loader": Target(("storage/loader.py",), ("tests/storage/test_loader.py",
                                               "tests/storage/test_loader_repeats.py")),
    # test_run.py's end-to-end jobs (minutes for each surviving mutant) are left out
    "job": Target(("pipelines/job.py", "pipelines/run.py"), ("tests/pipelines/test_job_decisions.py",
                                                             "tests/pipelines/test_job_checks.py")),
    "review": Target(("pipelines/review.py",), ("tests/pipelines/test_review_queue.py",
                                                 "tests/pipelines/test_review.py"),
                     skip="s3_output or other_runners or report_shows_labels or headless_chromium"),
    # the signals across sentences (issue 39, item 3): their limits, windows and shares
    "coherence": Target(("transforms/clean/coherence.py",), ("tests/transforms/test_coherence.py",)),
    # the anomaly review queue's band and tasks, the review head's fit and threshold
    "anomaly_review": Target(("pipelines/anomaly_review.py", "models/review_head.py"),
                             ("tests/pipelines/test_anomaly_review.py", "tests/models/test_anomaly_languages.py"),
                             skip="review_page_shows or learn_makes or two_chinese or records_the_languages"),
}


def _toml_list(items: list[str]) -> str:
    return "[" + ", ".join(json.dumps(i) for i in items) + "]"


def prepare(name: str, target: Target) -> Path:
    """``.mutation/NAME/``: the repository by symlinks, and our pyproject.toml with the
    mutmut table."""
    work = WORK / name
    work.mkdir(parents=True, exist_ok=True)
    tops = sorted(p.name for p in ROOT.iterdir() if p.is_dir() and not p.is_symlink() and not p.name.startswith("."))
    for top in tops:
        link = work / top
        if not link.is_symlink():
            link.symlink_to(ROOT / top)
    select = SELECT if not target.skip else ["-m", SELECT[1], "-k", f"not ({target.skip})"]
    table = (f"\n[tool.mutmut]\nsource_paths = {_toml_list(list(PACKAGES))}\n"
             f"only_mutate = {_toml_list(list(target.files))}\n"
             f"also_copy = {_toml_list([t for t in tops if t not in PACKAGES and t != 'tests'])}\n"
             f"pytest_add_cli_args = {_toml_list(['-p', 'no:cacheprovider'])}\n"
             f"pytest_add_cli_args_test_selection = {_toml_list(select + list(target.tests))}\n"
             f"timeout_multiplier = {TIMEOUT_MULTIPLIER}\n")
    (work / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text() + table)
    return work


def mutmut(work: Path, args: list[str], capture: bool = False) -> subprocess.CompletedProcess[str]:
    """mutmut's command line in ``work``, in this interpreter."""
    code = f"from mutmut.__main__ import cli; cli.main({args!r}, prog_name='mutmut')"
    env = {**os.environ, "PYTHONPATH": str(LIB), "TOKENFACTORY_SHARED_DATA": os.environ.get(
        "TOKENFACTORY_SHARED_DATA", str(ROOT.parent / "shared" / "data"))}
    return subprocess.run([sys.executable, "-c", code], cwd=work, env=env, text=True, check=False,
                          capture_output=capture)


def show_all(work: Path, mutants: list[str]) -> dict[str, str]:
    """Mutant name → its diff (``mutmut show``), all in one process (one process per
    mutant took seconds each for the hundreds of a large entry)."""
    code = ("import sys\nfrom mutmut.__main__ import show\n"
            "for name in sys.argv[1:]:\n    print('\\x00' + name)\n    show.callback(name)\n")
    out = subprocess.run([sys.executable, "-c", code, *mutants], cwd=work, env={**os.environ, "PYTHONPATH": str(LIB)},
                         text=True, check=True, capture_output=True).stdout
    diffs = {}
    for part in out.split("\x00")[1:]:
        name, _, diff = part.partition("\n")
        diffs[name] = "\n".join(line for line in diff.splitlines() if not line.startswith("# ")).strip()
    return diffs


def statuses(work: Path) -> dict[str, str]:
    """Mutant name → mutmut's status (killed, survived, no tests, timeout, ...)."""
    lines = mutmut(work, ["results", "--all", "true"], capture=True).stdout.splitlines()
    return dict(line.strip().rsplit(": ", 1) for line in lines if ": " in line)


_STEP_LABEL = re.compile(r'"[^"]*"(\s*>>)')


def only_a_step_label(diff: str) -> bool:
    """True when a mutant's diff changes nothing but the label of a Beam step
    (``"Name" >> transform``): the pipeline computes the same, so it cannot be killed."""
    lines = diff.splitlines()
    minus = [line[1:] for line in lines if line.startswith("-") and not line.startswith("---")]
    plus = [line[1:] for line in lines if line.startswith("+") and not line.startswith("+++")]
    blank = [_STEP_LABEL.sub(r'""\1', line) for line in minus + plus]
    return bool(minus) and len(minus) == len(plus) and minus != plus and blank[:len(minus)] == blank[len(minus):]


def report(name: str, work: Path, target: Target) -> str:
    """A markdown section: the counts, the score and every mutant not killed, with its diff."""
    status = statuses(work)
    killed = sum(s == "killed" for s in status.values())
    counts = {s: sum(v == s for v in status.values()) for s in sorted(set(status.values()))}
    diffs = show_all(work, sorted(m for m, state in status.items() if state != "killed"))
    labels = sum(only_a_step_label(diff) for diff in diffs.values())
    lines = [f"## {name}: {', '.join(target.files)}", "",
             f"tests: {', '.join(target.tests)}" + (f" (not: {target.skip})" if target.skip else ""), "",
             f"mutants {len(status)}, killed {killed}, score {killed / max(len(status), 1):.1%}; {counts}", "",
             f"not killed that only rename a Beam step (equivalent): {labels}; score without them "
             f"{killed / max(len(status) - labels, 1):.1%}", ""]
    for mutant, diff in diffs.items():
        label = ", a step label" if only_a_step_label(diff) else ""
        lines += [f"### {mutant} ({status[mutant]}{label})", "", "```diff", diff, "```", ""]
    return "\n".join(lines)


_RECHECK = """
import os, signal, sys
import pytest
from mutmut.mutation.trampoline import set_mutant_under_test

timeout, args, mutants = int(sys.argv[1]), sys.argv[2].split("\\x1f"), sys.argv[3:]
pytest.main(["--collect-only", "-q", *args])  # imports once, before the forks
for name in mutants:
    pid = os.fork()
    if pid == 0:
        signal.alarm(timeout)  # a mutant that loops ends here
        set_mutant_under_test(name)
        os._exit(int(pytest.main(["-x", "-q", *args])))
    _, status = os.waitpid(pid, 0)
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else -os.WTERMSIG(status)
    print("\\x00RECHECK", name, "survived" if code == 0 else "no tests" if code == 5 else "killed", flush=True)
"""


def recheck(name: str, work: Path, target: Target, timeout: int = 120,
            only: tuple[str, ...] = ()) -> dict[str, str]:
    """The mutants the last run of ``name`` did not kill, each run again against the test
    files as they are now (copied into ``mutants/``), in a forked child per mutant: how
    the new tests of an entry are measured without a full run. ``only``: some of the
    entry's test files (a kill by any test file counts, so the new ones are enough)."""
    unknown = [t for t in only if t not in target.tests]
    if unknown:
        raise ValueError(f"{unknown} are not test files of {name}: {list(target.tests)}")
    tests = only or target.tests
    for test in tests:
        shutil.copy(ROOT / test, work / "mutants" / test)
    status = statuses(work)
    # "not checked": a stopped run never reached them; a recheck is of what a run left alive
    todo = sorted(m for m, state in status.items() if state not in ("killed", "not checked"))
    select = SELECT if not target.skip else ["-m", SELECT[1], "-k", f"not ({target.skip})"]
    args = ["-p", "no:cacheprovider", *select, *tests]
    env = {**os.environ, "PYTHONPATH": f".{os.pathsep}{LIB}", "TOKENFACTORY_SHARED_DATA": os.environ.get(
        "TOKENFACTORY_SHARED_DATA", str(ROOT.parent / "shared" / "data"))}
    out = subprocess.run([sys.executable, "-c", _RECHECK, str(timeout), "\x1f".join(args), *todo],
                         cwd=work / "mutants", env=env, text=True, check=False, capture_output=True).stdout
    found = dict(part.splitlines()[0].split(" ", 1) for part in out.split("\x00RECHECK ")[1:])
    return {m: found.get(m, "not run") for m in todo}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help=f"entries of MODULES (default all): {', '.join(MODULES)}")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2, help="mutants tested at once")
    parser.add_argument("--report-only", action="store_true",
                        help="no run: write report.md again from each entry's last run")
    parser.add_argument("--recheck", action="store_true",
                        help="no run: the mutants the last run did not kill, against the tests as they are now")
    parser.add_argument("--recheck-tests", action="append", default=[], metavar="FILE",
                        help="with --recheck: only this one of the entry's test files (e.g. a new one); repeatable")
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in MODULES]
    if unknown:
        parser.error(f"unknown modules {unknown}; known: {', '.join(MODULES)}")
    for name in args.names or list(MODULES):
        target = MODULES[name]
        work = prepare(name, target)
        if args.recheck:
            results = recheck(name, work, target, only=tuple(args.recheck_tests))
            for mutant, verdict in results.items():
                print(f"{mutant}: {verdict}")
            killed = sum(v == "killed" for v in results.values())
            print(f"{name}: {killed} of the {len(results)} mutants the last run left are killed now")
            continue
        if not args.report_only:
            shutil.rmtree(work / "mutants", ignore_errors=True)
            run = mutmut(work, ["run", "--max-children", str(args.jobs)])
            if run.returncode != 0:
                print(f"mutmut run failed for {name} (exit {run.returncode})", file=sys.stderr)
                return run.returncode
        elif not (work / "mutants").is_dir():
            print(f"{name}: no run to report on", file=sys.stderr)
            continue
        text = report(name, work, target)
        (work / "report.md").write_text(text + "\n")
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
