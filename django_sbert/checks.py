"""System checks with stable ids; ``manage.py check`` runs them, ``migrate`` adds the database ones.

docs/settings.md ("System checks") lists every id and what it means; a field's own checks
live on the field (``fields/checks.py``), the sizing ones in ``indexing/sizing.py``.

Checks read only configuration and JSON files: no model weights are loaded and no torch
import. Only W031, a deployment check (``manage.py check --deploy``), asks the broker and the
workers (about a second at most).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import Any

from celery import current_app
from django.apps import apps
from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError, connections, router
from django.db.migrations.recorder import MigrationRecorder
from django.urls import URLPattern, URLResolver, get_resolver

from .celery import FEEDBACK_PURGE_TASK
from .conf import deprecated_settings, encoder_config, sbert_settings, settings_problems
from .fields import EmbeddingField, all_embedding_fields
from .finetuning import queues
from .indexing.sizing import check_scale
from .models import EncoderVersion, SearchEvent, VersionStatus
from .serving.health import serving_databases
from .serving.identity import base_unavailable_reason
from .serving.model_cache import unavailable_reason
from .serving.paths import onnxruntime_problem
from .views.search import SearchView

TAG = "django_sbert"
ITERATIVE_SCAN_VERSION = (0, 8, 0)
# W001: a table this large (PostgreSQL's estimate) without an HNSW index is scanned row by row
# slowly enough to notice; below it a scan costs little.
LARGE_TABLE_ROWS = 10000


def register() -> None:
    """Called from ``SbertConfig.ready()``. A field's own checks (E002, E003, E006, E010,
    E011) live on the field and run with the model checks (``EmbeddingField.check()``); a
    search page's (E015) live on ``SearchView`` and run here for each of its routes."""
    checks.register(check_settings, TAG)
    checks.register(check_broker, TAG)
    checks.register(check_database, TAG, checks.Tags.database)
    checks.register(check_local_files, TAG, checks.Tags.database)
    checks.register(check_connections, TAG, deploy=True)
    checks.register(check_workers, TAG, deploy=True)
    checks.register(check_conversions, TAG)
    checks.register(check_query_runtime, TAG)
    checks.register(check_search_views, TAG, checks.Tags.urls)
    checks.register(check_retention, TAG, deploy=True)
    checks.register(check_scale, TAG, checks.Tags.database)  # W021, W022 (indexing/sizing.py)


def _fields(app_configs: Sequence[Any] | None) -> list[tuple[type, EmbeddingField]]:
    pairs = all_embedding_fields()
    if app_configs is None:
        return pairs
    labels = {config.label for config in app_configs}
    return [(model, field) for model, field in pairs if model._meta.app_label in labels]


def check_settings(app_configs: Sequence[Any] | None = None, **kwargs: Any) -> list[Any]:
    """E005: the SBERT dict follows its declaration in conf/declaration.py (unknown keys name
    the closest known one); W003: a key is spelt as in an earlier release."""
    errors: list[checks.CheckMessage] = []

    def error(message: str, hint: str | None = None) -> None:
        errors.append(
            checks.Error(message, hint=hint, obj="settings.SBERT", id="django_sbert.E005")
        )

    try:
        problems = settings_problems()
    except ImproperlyConfigured as exc:
        error(str(exc))
        return errors
    for message, hint in problems:
        error(message, hint)
    storage = sbert_settings.user_settings.get("MODEL_STORAGE")
    if isinstance(storage, str) and storage not in settings.STORAGES:
        error(
            f"SBERT['MODEL_STORAGE'] is {storage!r}, which is not a key of settings.STORAGES.",
            hint=f"Add STORAGES[{storage!r}] = {{'BACKEND': ...}} (docs/deployment.md), or set "
            "MODEL_STORAGE to None (files under SBERT['MODEL_DIR']).",
        )
    for note in deprecated_settings():
        errors.append(
            checks.Warning(
                note,
                hint="The earlier spelling still works in this release (docs/settings.md).",
                obj="settings.SBERT",
                id="django_sbert.W003",
            )
        )
    return errors


def broker_url() -> str | None:
    """The Celery broker the project configures, without connecting to it."""
    for name in ("CELERY_BROKER_URL", "BROKER_URL"):
        value = getattr(settings, name, None) or os.environ.get(name)
        if value:
            return str(value)
    app = current_app._get_current_object()
    if app.main == "default":  # Celery's fallback app: the project has not configured one
        return None
    return app.conf.broker_url or None


def check_broker(app_configs: Sequence[Any] | None = None, **kwargs: Any) -> list[Any]:
    """E004: with AUTO_EMBED on, saves send tasks, so a broker must be configured."""
    if not sbert_settings.AUTO_EMBED or not _fields(app_configs):
        return []
    if getattr(settings, "CELERY_TASK_ALWAYS_EAGER", False) or broker_url():
        return []
    return [
        checks.Error(
            "SBERT['AUTO_EMBED'] is on but no Celery broker is configured, so saved rows would "
            "never be embedded.",
            hint="Set CELERY_BROKER_URL (e.g. 'redis://localhost:6379/0'), or set "
            "SBERT = {'AUTO_EMBED': False} and embed with manage.py sbert_reindex --stale.",
            obj="settings.SBERT",
            id="django_sbert.E004",
        )
    ]


def _pgvector_version(cursor: Any) -> tuple[int, ...] | None:
    cursor.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
    row = cursor.fetchone()
    if row is None:
        return None
    return tuple(int(part) for part in row[0].split(".") if part.isdigit())


def check_database(
    app_configs: Sequence[Any] | None = None,
    databases: Iterable[str] | None = None,
    **kwargs: Any,
) -> list[Any]:
    """E001, E002 (column), W001, W002: what the database actually holds."""
    errors: list[checks.CheckMessage] = []
    fields = _fields(app_configs)
    for alias in databases or ():
        connection = connections[alias]
        used = [(m, f) for m, f in fields if router.allow_migrate_model(alias, m)]
        if not used:
            continue
        if connection.vendor != "postgresql":
            errors.append(
                checks.Error(
                    f"Database {alias!r} is {connection.vendor}; EmbeddingField needs PostgreSQL "
                    "with the pgvector extension.",
                    hint="Point this database at PostgreSQL, or route these models elsewhere.",
                    id="django_sbert.E001",
                )
            )
            continue
        try:
            with connection.cursor() as cursor:
                version = _pgvector_version(cursor)
                if version is None:
                    # Before the first migrate this is expected, and migrate (which runs these
                    # checks first) is what creates the extension: stay silent then.
                    if _extension_migration_applied(connection):
                        errors.append(_missing_extension(alias))
                    continue
                if version < ITERATIVE_SCAN_VERSION:
                    errors.append(_old_pgvector(alias, version))
                for model, field in used:
                    errors.extend(_check_table(cursor, model, field))
        except DatabaseError as exc:
            errors.append(
                checks.Warning(
                    f"Could not inspect database {alias!r} for django-sbert ({exc}).",
                    id="django_sbert.W001",
                )
            )
    return errors


def _extension_migration_applied(connection: Any) -> bool:
    applied = MigrationRecorder(connection).applied_migrations()
    return ("django_sbert", "0001_vector_extension") in applied


def _missing_extension(alias: str) -> checks.Error:
    return checks.Error(
        f"The pgvector extension is not installed in database {alias!r}.",
        hint="Run manage.py migrate (django_sbert's first migration creates it), or as a "
        "superuser: CREATE EXTENSION vector; (install pgvector on the server first: "
        "https://github.com/pgvector/pgvector#installation).",
        id="django_sbert.E001",
    )


def _old_pgvector(alias: str, version: tuple[int, ...]) -> checks.Warning:
    shown = ".".join(map(str, version))
    return checks.Warning(
        f"Database {alias!r} has pgvector {shown}; iterative index scans need 0.8, so a "
        "filtered similar_to() may return fewer than k rows.",
        hint="ALTER EXTENSION vector UPDATE; after upgrading pgvector on the server.",
        id="django_sbert.W002",
    )


def _check_table(cursor: Any, model: type, field: EmbeddingField) -> list[checks.CheckMessage]:
    table = model._meta.db_table
    column = field.column
    cursor.execute("SELECT to_regclass(%s)", [connection_quote(table)])
    if cursor.fetchone()[0] is None:
        return []  # not migrated yet
    messages: list[checks.CheckMessage] = []
    label = f"{model._meta.label}.{field.name}"
    cursor.execute(
        "SELECT atttypmod FROM pg_attribute WHERE attrelid = %s::regclass AND attname = %s",
        [connection_quote(table), column],
    )
    row = cursor.fetchone()
    try:
        expected = field.get_dimensions()
    except ImproperlyConfigured:
        expected = None  # reported by E003
    if row is not None and row[0] > 0 and expected is not None and row[0] != expected:
        messages.append(
            checks.Error(
                f"Column {table}.{column} holds {field.vector_type}({row[0]}) but {label} "
                f"(encoder {field.encoder!r}) stores {expected} dimensions.",
                hint=f"Configure the encoder the column was built for, or change the column in a "
                f"migration: RunSQL('ALTER TABLE {table} ALTER COLUMN {column} TYPE "
                f"{field.vector_type}({expected}) USING NULL'), then manage.py sbert_reindex "
                "--all.",
                obj=field,
                id="django_sbert.E002",
            )
        )
    opclass = f"{field.vector_type}_cosine_ops"
    binary_name = field.binary_index_name if field.binary_index else ""
    cursor.execute(
        """
        SELECT count(*) FILTER (WHERE opc.opcname = %s OR ic.relname = %s), count(*)
        FROM pg_index i
        JOIN pg_class ic ON ic.oid = i.indexrelid
        JOIN pg_am am ON am.oid = ic.relam AND am.amname = 'hnsw'
        LEFT JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
        JOIN pg_opclass opc ON opc.oid = i.indclass[0]
        WHERE i.indrelid = %s::regclass AND (a.attname = %s OR ic.relname = %s)
        """,
        # The operator class of the column's type (vector / halfvec), or the binary-quantized
        # index of binary_index=True (an index on an expression: found by its name).
        [opclass, binary_name, connection_quote(table), column, binary_name],
    )
    cosine_indexes, hnsw_indexes = cursor.fetchone()
    cursor.execute(
        "SELECT reltuples FROM pg_class WHERE oid = %s::regclass", [connection_quote(table)]
    )
    rows = max(0, int(cursor.fetchone()[0] or 0))
    if not cosine_indexes and rows >= LARGE_TABLE_ROWS:
        wrong = " (its HNSW index uses another operator class)" if hnsw_indexes else ""
        messages.append(
            checks.Warning(
                f"{table} has about {rows} rows but no HNSW index with {opclass} on "
                f"{column}{wrong}: similar_to() scans every row.",
                hint="Add to the model's Meta: indexes = [HnswIndex(name='...', "
                f"fields=['{field.name}'], m=16, ef_construction=64, "
                f"opclasses=['{opclass}'])] (from pgvector.django), then makemigrations "
                "and migrate.",
                obj=model,
                id="django_sbert.W001",
            )
        )
    return messages


def connection_quote(table: str) -> str:
    """A table name as ``regclass`` input: quoted, so mixed case and dots survive."""
    return '"' + table.replace('"', '""') + '"'


def check_local_files(
    app_configs: Sequence[Any] | None = None,
    databases: Iterable[str] | None = None,
    **kwargs: Any,
) -> list[Any]:
    """E012: every version the database says serves is usable on this host: an active
    fine-tuned version fetched from the model storage into this host's cache and verified
    (once per host), the settings' model the same files as the database recorded when it first
    served (``identity.base_version``).

    Run at deployment with ``manage.py check --database default`` (``migrate`` runs it too): a
    host that would answer every search with ``VersionUnavailable`` is caught before traffic.
    Whatever the model storage raises is reported here, never a traceback.
    """
    alias = router.db_for_read(EncoderVersion)
    if alias not in set(databases or ()):
        return []
    try:
        active = list(
            EncoderVersion.objects.using(alias)
            .filter(status=VersionStatus.ACTIVE)
            .values_list("encoder_name", "version", "directory", "is_base", "manifest_sha256")
        )
    except DatabaseError:
        return []  # not migrated yet: no version can be active
    problems: list[str] = []
    tuned = set()
    for name, version, directory, is_base, digest in active:
        if is_base:
            continue
        tuned.add(name)
        problem = unavailable_reason(name, version, directory, digest)  # fetches once
        if problem is not None:
            problems.append(problem)
    for name in sorted({field.encoder for _, field in all_embedding_fields()} - tuned):
        try:
            problem = base_unavailable_reason(name)
        except Exception:  # noqa: BLE001 - a model that does not load: E003 says why
            continue
        if problem is not None:
            problems.append(problem)
    return [
        checks.Error(
            f"{problem} This host cannot encode documents or queries.",
            hint="Give this host the model storage the training worker saves to "
            "(SBERT['MODEL_STORAGE'], docs/deployment.md), a writable SBERT['MODEL_CACHE'] "
            "and the same SBERT MODEL files as every other host; manage.py check --database "
            "default retries.",
            id="django_sbert.E012",
        )
        for problem in problems
    ]


def check_connections(app_configs: Sequence[Any] | None = None, **kwargs: Any) -> list[Any]:
    """W030: every database searches read keeps its connections (``CONN_MAX_AGE``) or pools
    them (``OPTIONS["pool"]``): a search costs milliseconds, a new connection as much again."""
    warnings: list[checks.CheckMessage] = []
    for alias in serving_databases():
        config = settings.DATABASES.get(alias, {})
        max_age = config.get("CONN_MAX_AGE", 0)
        if (config.get("OPTIONS") or {}).get("pool") or max_age is None or max_age > 0:
            continue
        warnings.append(
            checks.Warning(
                f"Database {alias!r} serves searches but opens a new connection for every "
                "request (CONN_MAX_AGE=0, no pool): connecting costs as much as the search.",
                hint=f"Set DATABASES[{alias!r}]['CONN_MAX_AGE'] = 600 (persistent connections, "
                "with CONN_HEALTH_CHECKS = True), or on Django 5.1+ with psycopg[pool] "
                f"DATABASES[{alias!r}]['OPTIONS'] = {{'pool': True}} (docs/deployment.md).",
                id="django_sbert.W030",
            )
        )
    return warnings


def check_workers(app_configs: Sequence[Any] | None = None, **kwargs: Any) -> list[Any]:
    """W031: a django-sbert queue holds messages but no live worker consumes it (asked of the
    workers and the broker for about a second; silent when they cannot be asked)."""
    return [
        checks.Warning(
            f"The {kind} queue {queue!r} holds {count} message(s) but no live Celery worker "
            "consumes it: they wait until one starts.",
            hint=f"Start one: celery -A <project> worker -Q {queue} (docs/deployment.md).",
            id="django_sbert.W031",
        )
        for queue, kind, count in queues.waiting_without_worker()
    ]


def check_query_runtime(app_configs: Sequence[Any] | None = None, **kwargs: Any) -> list[Any]:
    """E016: an encoder asks for ONNX Runtime (``QUERY_RUNTIME="onnxruntime"`` or
    ``"onnxruntime-int8"``) where it cannot be
    imported (the ``onnx`` extra). ``"auto"`` falls back to torch there, with its reason in
    ``sbert_status``; an explicit choice would otherwise be set aside just as silently."""
    missing = onnxruntime_problem()
    if missing is None:
        return []
    errors = []
    for name in sbert_settings.ENCODERS or {}:
        try:
            runtime = encoder_config(name)["QUERY_RUNTIME"]
        except ImproperlyConfigured:
            continue  # E005 says what is wrong with the settings
        if runtime in ("onnxruntime", "onnxruntime-int8"):
            errors.append(
                checks.Error(
                    f"SBERT['ENCODERS'][{name!r}]['QUERY_RUNTIME'] is {runtime!r}, but {missing}.",
                    hint='pip install "django-sbert[onnx]" (ONNX Runtime, onnx and onnxscript), '
                    'or set QUERY_RUNTIME to "auto" (ONNX Runtime where it is installed, torch '
                    'elsewhere) or "torch".',
                    obj="settings.SBERT",
                    id="django_sbert.E016",
                )
            )
    return errors


def check_conversions(app_configs: Sequence[Any] | None = None, **kwargs: Any) -> list[Any]:
    """E014: each kind of ``SBERT["FEEDBACK"]["CONVERSIONS"]`` fits the events' ``kind``
    column (40 characters): a longer one would fail its every event with a database error."""
    try:
        kinds = sbert_settings.FEEDBACK["CONVERSIONS"]
    except ImproperlyConfigured:
        return []  # E005 says what is wrong with the settings
    if not isinstance(kinds, list | tuple):
        return []  # a value E005 reports
    limit = SearchEvent._meta.get_field("kind").max_length
    bad = [kind for kind in kinds if isinstance(kind, str) and not 1 <= len(kind) <= limit]
    if not bad:
        return []
    return [
        checks.Error(
            f"SBERT['FEEDBACK']['CONVERSIONS'] holds {len(bad)} kind(s) that do not fit the "
            f"events' kind column of {limit} characters: "
            + ", ".join(repr(kind[:60] + ("…" if len(kind) > 60 else "")) for kind in bad)
            + ". Each such event would fail with a database error.",
            hint=f'Use kinds of 1 to {limit} characters, such as "purchase" or "add_to_cart".',
            obj="settings.SBERT",
            id="django_sbert.E014",
        )
    ]


def purge_scheduled() -> bool | None:
    """Whether a Celery beat entry runs ``django_sbert.feedback_purge``: in the Celery app's
    ``beat_schedule`` (``CELERY_BEAT_SCHEDULE`` with the usual namespace), or an enabled
    django-celery-beat task; None when that table cannot be read now."""
    schedules = [
        current_app.conf.beat_schedule or {},
        getattr(settings, "CELERY_BEAT_SCHEDULE", {}),
    ]
    for schedule in schedules:
        if isinstance(schedule, dict) and any(
            isinstance(entry, dict) and entry.get("task") == FEEDBACK_PURGE_TASK
            for entry in schedule.values()
        ):
            return True
    if apps.is_installed("django_celery_beat"):
        periodic = apps.get_model("django_celery_beat", "PeriodicTask")
        try:
            return periodic.objects.filter(task=FEEDBACK_PURGE_TASK, enabled=True).exists()
        except DatabaseError:
            return None
    return False


def check_retention(app_configs: Sequence[Any] | None = None, **kwargs: Any) -> list[Any]:
    """W032: searches are logged with a retention, but no beat entry runs the purge, so
    nothing is ever deleted. A cron job calling ``sbert_feedback purge`` cannot be seen from
    here: silence the check then."""
    feedback = sbert_settings.FEEDBACK
    if (
        feedback["LOG"] is False
        or feedback["RETENTION_DAYS"] is None
        or purge_scheduled() is not False
    ):
        return []
    return [
        checks.Warning(
            f"Searches are logged (SBERT['FEEDBACK']['LOG']) and kept "
            f"{feedback['RETENTION_DAYS']} days (RETENTION_DAYS), but no Celery beat entry runs "
            f"the purge task {FEEDBACK_PURGE_TASK!r}: nothing is ever deleted.",
            hint="Add app.conf.beat_schedule['sbert-feedback-purge'] = "
            "feedback_purge_schedule() (from django_sbert.celery) to your Celery app. If a cron "
            "job runs `manage.py sbert_feedback purge` instead, add 'django_sbert.W032' to "
            "SILENCED_SYSTEM_CHECKS.",
            id="django_sbert.W032",
        )
    ]


def routed_views(
    patterns: Iterable[URLPattern | URLResolver], prefix: str = ""
) -> Iterable[tuple[str, Any]]:
    """(route, view function) of every class-based view the URL patterns route, included
    URLconfs walked."""
    for pattern in patterns:
        route = prefix + str(pattern.pattern)
        if isinstance(pattern, URLResolver):
            yield from routed_views(pattern.url_patterns, route)
        elif getattr(pattern.callback, "view_class", None) is not None:
            yield route, pattern.callback


def check_search_views(app_configs: Sequence[Any] | None = None, **kwargs: Any) -> list[Any]:
    """E015: every ``SearchView`` the URLconf routes can answer in each of its modes, with the
    ``as_view()`` arguments of its route. Found only at the first search otherwise, as a 500
    (a hybrid or keyword mode on a field without ``keyword_search=True``: the default modes).
    Like Django's URL checks, it reads the whole URLconf whatever apps are named."""
    if not getattr(settings, "ROOT_URLCONF", None):
        return []
    errors: list[checks.CheckMessage] = []
    for route, view in routed_views(get_resolver().url_patterns):
        view_class = view.view_class
        if not issubclass(view_class, SearchView):
            continue
        for problem in view_class.configuration_problems(**view.view_initkwargs):
            errors.append(
                checks.Error(
                    problem,
                    hint=f"The page routed at '{route}' would answer its first search with "
                    "a server error (500).",
                    obj=f"{view_class.__module__}.{view_class.__qualname__}",
                    id="django_sbert.E015",
                )
            )
    return errors
