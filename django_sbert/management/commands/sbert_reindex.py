"""``manage.py sbert_reindex``: embed missing or stale rows (or all rows), now or via Celery.

::

    manage.py sbert_reindex                          # every EmbeddingField, stale rows, as tasks
    manage.py sbert_reindex blog.Article --sync      # encode in this process, with a progress bar
    manage.py sbert_reindex blog.Article.embedding --all --batch-size 64 --sync

Stale rows are those whose vector is missing, whose text changed since it was encoded, or
whose encoder version is not the current one (see docs/indexing.md).
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from tqdm import tqdm

from django_sbert import indexing
from django_sbert.conf import sbert_settings
from django_sbert.indexing.rows import pages_by_pk
from django_sbert.indexing.tasks import SWEEP_BATCH_SIZE, enqueue_embed


class Command(BaseCommand):
    help = (
        "Embed rows whose vector is missing or stale (default) or all rows (--all), in this "
        "process (--sync) or by sending Celery tasks to the SBERT queue."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "targets",
            nargs="*",
            metavar="app_label.Model[.field]",
            help="Fields to index; default: every EmbeddingField of every installed model.",
        )
        which = parser.add_mutually_exclusive_group()
        which.add_argument(
            "--stale",
            action="store_true",
            help="Only rows with a missing or stale vector (the default).",
        )
        which.add_argument(
            "--all",
            action="store_true",
            help="Every row, even up-to-date ones (e.g. after changing how text is built).",
        )
        parser.add_argument(
            "--batch-size",
            type=int,
            default=None,
            help="With --sync: texts per forward pass (default: the encoder's BATCH_SIZE). "
            "Without: rows per Celery task (default: 500).",
        )
        parser.add_argument(
            "--sync",
            action="store_true",
            help="Encode in this process instead of sending Celery tasks.",
        )
        parser.add_argument("--no-progress", action="store_true", help="Do not draw progress bars.")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            refs = indexing.resolve_targets(options["targets"])
        except LookupError as exc:
            raise CommandError(str(exc)) from exc
        if not refs:
            self.stdout.write("No EmbeddingField in any installed model: nothing to do.")
            return
        batch_size = options["batch_size"]
        if batch_size is not None and batch_size < 1:
            raise CommandError("--batch-size must be at least 1.")
        for ref in refs:
            indexing.check_configured(ref)
            if options["sync"]:
                self._embed_here(ref, options["all"], batch_size, options)
            else:
                self._send_tasks(ref, options["all"], batch_size, options)

    def _bar(self, ref: indexing.FieldRef, total: int | None, options: dict[str, Any]) -> tqdm:
        return tqdm(
            total=total,
            desc=str(ref),
            unit="row",
            file=self.stderr._out,
            disable=True if options["no_progress"] else None,  # None: only on a terminal
        )

    def _select(self, ref: indexing.FieldRef, everything: bool, chunk: int):
        """(total rows or None when unknown without a scan, iterator of pk chunks)."""
        if everything:
            return ref.manager.count(), pages_by_pk(ref.manager.all(), chunk)
        total = indexing.count_stale(ref) if indexing.has_exact_sql_staleness(ref) else None
        return total, indexing.iter_stale_pks(ref, chunk_rows=chunk)

    def _embed_here(
        self,
        ref: indexing.FieldRef,
        everything: bool,
        batch_size: int | None,
        options: dict[str, Any],
    ) -> None:
        total, chunks = self._select(ref, everything, indexing.DEFAULT_CHUNK_ROWS)
        stats = indexing.EmbedStats()
        with self._bar(ref, total, options) as bar:
            for pks in chunks:
                stats += indexing.embed_pks(
                    ref, pks, force=everything, batch_size=batch_size, progress=bar.update
                )
        self.stdout.write(
            f"{ref}: {stats.embedded} embedded, {stats.up_to_date} already up to date, "
            f"{stats.changed} changed while encoding (left for their own task)."
        )

    def _send_tasks(
        self,
        ref: indexing.FieldRef,
        everything: bool,
        batch_size: int | None,
        options: dict[str, Any],
    ) -> None:
        chunk = batch_size or SWEEP_BATCH_SIZE
        total, chunks = self._select(ref, everything, chunk)
        rows = sent = 0
        with self._bar(ref, total, options) as bar:
            for pks in chunks:
                try:
                    sent += enqueue_embed(ref, pks, force=everything, chunk_size=chunk)
                except Exception as exc:  # kombu / redis / amqp errors
                    raise CommandError(
                        f"Could not send tasks to the Celery broker ({exc.__class__.__name__}: "
                        f"{exc}). Start the broker, or run with --sync to encode in this process."
                    ) from exc
                rows += len(pks)
                bar.update(len(pks))
        self.stdout.write(
            f"{ref}: sent {rows} rows in {sent} task(s) to queue {sbert_settings.QUEUE!r}."
        )
