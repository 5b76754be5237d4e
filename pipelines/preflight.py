"""Checks of a run that need its pipeline options, made before the lease and the first stage.

``load_config`` checks what the config alone decides; these two need the options of the
command line too, and each ends the run with a ``ConfigError`` (exit 2) instead of a
failure later:

* the runner's name (``--runner``, the config's ``beam_args``): Beam resolves it only
  when a pipeline starts, so ``--runner=SparkRunnr`` passed while every stage resumed
  and failed at the first one that ran;
* a write probe of the output: a small, uniquely named object written under it and
  deleted, through Beam's filesystems as every stage writes (local folders, ``s3://``
  with the job's S3 options, ...). An output this user cannot write (a read-only mount,
  no permission, a bucket that refuses) failed with a traceback from the lease.
"""

from __future__ import annotations

import logging
import uuid

from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

from pipelines.config_errors import ConfigError
from storage.redact import redact_url

_LOGGER = logging.getLogger(__name__)

PROBE_PREFIX = "_write_probe."  # <output>/_write_probe.<uuid>, deleted at once


def check_runner(options: PipelineOptions) -> None:
    """The runner named in ``options`` is one Beam can create; ``ConfigError`` naming it
    and the known names otherwise (a Dataflow runner without ``apache_beam[gcp]`` too)."""
    from apache_beam.runners.runner import PipelineRunner, create_runner

    name = options.view_as(StandardOptions).runner
    if name is None or not isinstance(name, str):
        return  # Beam's default, or a runner object given by a library caller
    try:
        runner = create_runner(name)
    except Exception as exc:  # ValueError: unknown; ImportError: extras missing; a dotted name of anything
        known = ", ".join(StandardOptions.KNOWN_RUNNER_NAMES)
        raise ConfigError(f"--runner={name}: not a runner Beam can start ({type(exc).__name__}: "
                          f"{str(exc).split('. Valid values')[0]}); the known names are {known}, or "
                          "use --engine (python -m pipelines.run --help lists the engines)") from None
    if not isinstance(runner, PipelineRunner):
        raise ConfigError(f"--runner={name}: {type(runner).__name__} is not a Beam PipelineRunner")


class _BeamRootLogQuiet(logging.Filter):
    """While open, drops what Beam's modules log on the root logger (its S3 filesystem
    logs a refused write as an ERROR with a traceback before raising it); the probe's
    error says it in one line. Kept at ``DEBUG``."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "apache_beam" not in record.pathname or logging.getLogger().isEnabledFor(logging.DEBUG)

    def __enter__(self) -> "_BeamRootLogQuiet":
        logging.getLogger().addFilter(self)
        return self

    def __exit__(self, *exc: object) -> None:
        logging.getLogger().removeFilter(self)


def probe_output(output: str) -> None:
    """Writes a small object under ``output`` and deletes it; ``ConfigError`` naming the
    output and the store's answer when either fails. Beam's filesystems must have the
    job's options (``pipelines.config.configure_filesystems``)."""
    from apache_beam.io.filesystems import FileSystems

    probe = FileSystems.join(output, PROBE_PREFIX + uuid.uuid4().hex)
    step = "write to"
    try:
        with _BeamRootLogQuiet(), FileSystems.create(probe, compression_type="uncompressed") as fh:
            fh.write(b"tokenfactory write probe: deleted at once\n")
        step = "delete from"
        with _BeamRootLogQuiet():
            FileSystems.delete([probe])
    except Exception as exc:  # PermissionError, a read-only filesystem, S3 AccessDenied, ...
        _LOGGER.debug("write probe of %s failed", redact_url(output), exc_info=True)
        reason = " ".join(str(exc).split())[:500] or type(exc).__name__
        raise ConfigError(f"output: cannot {step} {output!r} ({type(exc).__name__}: {reason}); the job "
                          "writes and deletes files there: give an output this user can write "
                          "(--output or output: in the config), or fix its permissions") from None
