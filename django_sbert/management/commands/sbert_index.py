"""``manage.py sbert_index``: build (or rebuild) the vector indexes of EmbeddingFields, with a
progress bar, the memory and parallel workers its flags give, and the size it made.

::

    manage.py sbert_index                              # every EmbeddingField's vector indexes
    manage.py sbert_index blog.Article.embedding       # one field
    manage.py sbert_index blog.Article --concurrently  # without blocking writes (slower)
    manage.py sbert_index --maintenance-work-mem 4GB --parallel-workers 3

The indexes are those the model declares (``Meta.indexes``: the field's ``HnswIndex``, the
binary-quantized one, the passage table's): each is dropped and created again; the bar follows
``pg_stat_progress_create_index`` from a second connection (docs/scale.md).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connections, models
from pgvector.django import HnswIndex
from tqdm import tqdm

from django_sbert import indexing
from django_sbert.indexes import BinaryQuantizedIndex
from django_sbert.indexing.sizing import hnsw_indexes, memory_budget, pretty

POLL_SECONDS = 0.5


def vector_indexes(ref: indexing.FieldRef) -> list[tuple[type[models.Model], HnswIndex]]:
    """The HNSW indexes the models declare for ``ref``'s field: (model, index) pairs."""
    found = [
        (ref.model, index)
        for index in ref.model._meta.indexes
        if isinstance(index, HnswIndex)
        and (
            list(index.fields) == [ref.name]
            or (isinstance(index, BinaryQuantizedIndex) and index.field_name == ref.field.attname)
        )
    ]
    passage_model = ref.field.passage_model
    if passage_model is not None:
        found += [
            (passage_model, i) for i in passage_model._meta.indexes if isinstance(i, HnswIndex)
        ]
    return found


class Command(BaseCommand):
    help = (
        "Build or rebuild the HNSW indexes of EmbeddingFields, with a progress bar, the "
        "maintenance_work_mem and parallel workers its flags give."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "targets",
            nargs="*",
            metavar="app_label.Model[.field]",
            help="Fields whose indexes to build; default: every EmbeddingField.",
        )
        parser.add_argument(
            "--concurrently",
            action="store_true",
            help="DROP / CREATE INDEX CONCURRENTLY: writes go on during the build (slower).",
        )
        parser.add_argument("--no-progress", action="store_true", help="No progress bar.")
        parser.add_argument(
            "--maintenance-work-mem",
            default="1GB",
            help='maintenance_work_mem of the build (default 1GB; "server": the server\'s); '
            "docs/scale.md#sizing-maintenance_work_mem.",
        )
        parser.add_argument(
            "--parallel-workers",
            type=int,
            help="max_parallel_maintenance_workers of the build (default: the server's).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            refs = indexing.resolve_targets(options["targets"])
        except LookupError as exc:
            raise CommandError(str(exc)) from exc
        workers = options["parallel_workers"]
        if workers is not None and workers < 0:
            raise CommandError(f"--parallel-workers must be 0 or more, got {workers}.")
        memory = options["maintenance_work_mem"]
        self.session = (None if memory == "server" else memory, workers)
        built = 0
        for ref in refs:
            pairs = vector_indexes(ref)
            if not pairs:
                self.stdout.write(
                    f"{ref}: no HNSW index is declared; add one to the model's Meta.indexes "
                    "(docs/search.md) or binary_index=True, then makemigrations and migrate."
                )
                continue
            for model, index in pairs:
                self._build(ref, model, index, options["concurrently"], not options["no_progress"])
                built += 1
        if built:
            self._report_memory(refs[0].db_alias)

    def _build(
        self,
        ref: indexing.FieldRef,
        model: type[models.Model],
        index: HnswIndex,
        concurrently: bool,
        progress: bool,
    ) -> None:
        alias = ref.db_alias
        connection = connections[alias]
        table = model._meta.db_table
        with connection.cursor() as cursor:
            settings = _session_settings(cursor, *self.session)
        self.stdout.write(
            f"Building {index.name} on {table} ({settings['maintenance_work_mem']} "
            f"maintenance_work_mem, up to {settings['max_parallel_maintenance_workers']} "
            "parallel workers)..."
        )
        watcher = _ProgressWatcher(alias, table, self.stderr, enabled=progress)
        started = time.perf_counter()
        watcher.start()
        try:
            with connection.schema_editor(atomic=not concurrently) as editor:
                editor.execute(index.remove_sql(model, editor, concurrently=concurrently))
                editor.execute(index.create_sql(model, editor, concurrently=concurrently))
        finally:
            watcher.stop()
            with connection.cursor() as cursor:
                cursor.execute("RESET maintenance_work_mem")
                cursor.execute("RESET max_parallel_maintenance_workers")
        seconds = time.perf_counter() - started
        with connection.cursor() as cursor:
            size = next(i.bytes for i in hnsw_indexes(cursor, table) if i.name == index.name)
        self.stdout.write(
            self.style.SUCCESS(f"Built {index.name} in {seconds:.1f} s: {pretty(size)} on disk.")
        )

    def _report_memory(self, alias: str) -> None:
        with connections[alias].cursor() as cursor:
            total = sum(i.bytes for i in hnsw_indexes(cursor))
            budget = memory_budget(cursor)
        line = (
            f"All HNSW indexes of database {alias!r}: {pretty(total)}; memory for them "
            f"(docs/scale.md): {pretty(budget)}."
        )
        if total > budget:
            self.stdout.write(self.style.WARNING(line + " They do not fit: see check W022."))
        else:
            self.stdout.write(line)


def _session_settings(cursor: Any, memory: str | None, workers: int | None) -> dict[str, str]:
    """Apply the build's memory and workers to the session (SET, reset after the build); return
    what holds (None: the server's)."""
    if memory is not None:
        cursor.execute("SELECT set_config('maintenance_work_mem', %s, false)", [str(memory)])
    if workers is not None:
        cursor.execute(
            "SELECT set_config('max_parallel_maintenance_workers', %s, false)", [str(workers)]
        )
    cursor.execute(
        "SELECT current_setting('maintenance_work_mem'), "
        "current_setting('max_parallel_maintenance_workers')"
    )
    memory_now, workers_now = cursor.fetchone()
    return {"maintenance_work_mem": memory_now, "max_parallel_maintenance_workers": workers_now}


def build_progress(cursor: Any, table: str) -> tuple[str, float] | None:
    """(phase, percent done) of an index build on ``table`` now, or None when none runs."""
    cursor.execute(
        "SELECT phase, blocks_done, blocks_total, tuples_done, tuples_total "
        "FROM pg_stat_progress_create_index WHERE relid = to_regclass(%s)",
        ['"' + table.replace('"', '""') + '"'],
    )
    row = cursor.fetchone()
    if row is None:
        return None
    phase, blocks_done, blocks_total, tuples_done, tuples_total = row
    if blocks_total:
        return phase, 100.0 * blocks_done / blocks_total
    if tuples_total:
        return phase, 100.0 * tuples_done / tuples_total
    return phase, 0.0


class _ProgressWatcher:
    """A thread that polls ``build_progress`` on a connection of its own and moves a bar."""

    def __init__(self, alias: str, table: str, stream: Any, enabled: bool) -> None:
        self.alias = alias
        self.table = table
        self.stream = getattr(stream, "_out", stream)  # tqdm writes \r itself: the raw stream
        self.enabled = enabled
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        if self.enabled:
            self._thread.start()

    def stop(self) -> None:
        self._done.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        bar = tqdm(total=100, unit="%", file=self.stream, bar_format="{desc}: {bar} {n:.0f}%")
        try:
            while not self._done.wait(POLL_SECONDS):
                with connections[self.alias].cursor() as cursor:  # this thread's connection
                    state = build_progress(cursor, self.table)
                if state is not None:
                    phase, percent = state
                    bar.set_description_str(phase)
                    bar.n = round(percent, 1)
                    bar.refresh()
            bar.n = 100
            bar.set_description_str("done")
            bar.refresh()
        finally:
            bar.close()
            connections[self.alias].close()
