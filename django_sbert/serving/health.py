"""Is this process ready for traffic? The database, the warmed encoders and (workers) the broker.

::

    report = check()                  # a web process: databases and warmed query encoders
    report = check(broker=True, warmed=False)   # a worker host's probe (sbert_health --broker)
    report.ok, report.as_dict()       # {"status": "ok", "checks": {...}, "versions": {...}, ...}

The query server being away does not make a light web process unready: its searches answer
from the keyword side meanwhile, marked, and ``encoding`` counts them (``degraded_searches``)
and says whether the server answered at the last ask.

An encoder is ready when the version the database says serves is the one ``warm()`` loaded
and ran in this process, without error (``serving.warmup.warm_state()``): a process that has
not warmed, that warmed another version (a switch it has not caught up with yet), or that
cannot fetch or verify the serving version (``VersionUnavailable``) is not ready. Served by
``django_sbert.views.health`` (``GET sbert/health/``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import connections, router

from ..conf import sbert_settings
from ..fields import all_embedding_fields
from ..models import EncoderVersion
from .model_cache import fetch_failures, unavailable_reason
from .query_client import encoding_report
from .versions import serving_record
from .warmup import warm_state
from .web import served_encoders

OK = "ok"
BROKER_SECONDS = 1.0  # how long the broker may take to answer


@dataclass
class HealthReport:
    """Each check's outcome: ``"ok"``, or the reason it failed."""

    checks: dict[str, str] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)  # encoder -> the version warmed here
    # encoder -> {"path": "compiled bfloat16", "reason": why}: what this process runs
    paths: dict[str, dict[str, str]] = field(default_factory=dict)
    # versions this process failed to fetch and will not try again before retry_in seconds
    fetch_failures: list[dict[str, Any]] = field(default_factory=list)
    # how this process encodes search texts: in-process, or the host's query server (is it
    # away, and how many searches answered from the keyword side): query_client
    encoding: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(value == OK for value in self.checks.values())

    def as_dict(self) -> dict[str, Any]:
        return {
            "status": "ok" if self.ok else "unavailable",
            "checks": dict(self.checks),
            "versions": dict(self.versions),
            "paths": {name: dict(path) for name, path in self.paths.items()},
            "fetch_failures": [dict(failure) for failure in self.fetch_failures],
            "encoding": dict(self.encoding),
        }


def check(
    names: Sequence[str] | None = None, *, broker: bool = False, warmed: bool = True
) -> HealthReport:
    """Run every check of this process (``names``: encoders; default: those fields use).

    ``warmed=False`` asks instead whether this host can serve each encoder's serving version
    (fetched into its cache and verified; nothing loaded): what a probe run in a process of
    its own (``manage.py sbert_health``) can know about the workers of its host.
    """
    report = HealthReport()
    for alias in serving_databases():
        report.checks[f"database:{alias}"] = _database(alias)
    database_ok = report.ok
    for name in names if names is not None else served_encoders():
        if not database_ok:  # which version serves is read from the database
            report.checks[f"encoder:{name}"] = "unknown: the database did not answer"
            continue
        if not warmed:
            report.checks[f"encoder:{name}"] = _available(name)
            continue
        report.checks[f"encoder:{name}"] = _encoder(name)
        state = warm_state().get(name)
        if state is not None and state.path:
            report.paths[name] = {"path": state.path, "reason": state.reason}
        if report.checks[f"encoder:{name}"] == OK and state is not None:
            report.versions[name] = state.version
    if broker:
        report.checks["broker"] = _broker()
    report.fetch_failures = fetch_failures()
    report.encoding = encoding_report()
    return report


def serving_databases() -> list[str]:
    """Aliases of the databases searches and version lookups read from, sorted: the router's
    read databases and ``SBERT["SEARCH"]["DATABASE"]`` (query/replicas.py)."""
    aliases = {router.db_for_read(EncoderVersion)}
    if sbert_settings.SEARCH["DATABASE"]:
        aliases.add(sbert_settings.SEARCH["DATABASE"])
    aliases.update(router.db_for_read(model) for model, _ in all_embedding_fields())
    return sorted(aliases)


def _database(alias: str) -> str:
    try:
        with connections[alias].cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except Exception as exc:  # any driver error: the database does not answer
        return f"the database {alias!r} did not answer: {type(exc).__name__}: {exc}".strip()
    return OK


def _encoder(name: str) -> str:
    try:
        current = serving_record(name)
    except Exception as exc:
        return f"could not read the serving version: {type(exc).__name__}: {exc}"
    state = warm_state().get(name)
    if state is None:
        return (
            f"serves {current.version}, not warmed in this process yet (web processes warm at "
            "start: django_sbert.contrib.gunicorn, docs/deployment.md)"
        )
    if state.version != current.version:
        return f"serves {current.version}; this process warmed {state.version or 'nothing'}"
    if state.error:
        return f"serves {current.version}, which failed to warm here: {state.error}"
    return OK


def _available(name: str) -> str:
    try:
        current = serving_record(name)
    except Exception as exc:
        return f"could not read the serving version: {type(exc).__name__}: {exc}"
    if current.directory is None:
        return OK  # the settings' model: E003 and loading report a missing one
    return unavailable_reason(name, current.version, current.directory) or OK


def _broker() -> str:
    from celery import current_app  # the project's app, configured once Django has loaded

    try:
        with current_app.connection_for_write() as connection:
            connection.ensure_connection(max_retries=0, timeout=BROKER_SECONDS)
    except Exception as exc:  # kombu, redis and amqp raise many types for one outage
        return f"the broker did not answer: {type(exc).__name__}: {exc}"
    return OK
