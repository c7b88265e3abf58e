"""``manage.py sbert_status``: per EmbeddingField, how many rows have a current vector.

::

    field                      encoder  rows  embedded  stale  missing  version
    blog.Article.embedding     default  5767      5760      9        7  all-MiniLM-L6-v2:1a2b3c...

``stale`` counts rows that need a vector: missing ones, and those whose text or encoder
changed since they were encoded. Fields with a callable source are scanned in Python.

Around the table: each encoder's inference path on this host and why (``serving.path_report``,
the same decision web processes and workers here make), rows that indexing skipped after an
error of their own (the newest few with their error), a serving version this host cannot fetch
or verify, a django-sbert queue that no Celery worker consumes (the workers are asked for about
a second), and, with searches logged, the age of the oldest search in the log, so a purge that
never runs shows (check ``django_sbert.W032``).
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone
from tqdm import tqdm

from django_sbert import indexing, serving
from django_sbert.conf import sbert_settings
from django_sbert.finetuning import queues
from django_sbert.models import SearchLog

COLUMNS = ("field", "encoder", "rows", "embedded", "stale", "missing", "version")
SHOW_SKIPPED = 5  # skipped rows listed per field, newest first


class Command(BaseCommand):
    help = "Show, per EmbeddingField, rows, embedded, stale and missing vectors, encoder version."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "targets",
            nargs="*",
            metavar="app_label.Model[.field]",
            help="Fields to report; default: every EmbeddingField.",
        )
        parser.add_argument(
            "--no-progress", action="store_true", help="Do not draw a progress bar."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            refs = indexing.resolve_targets(options["targets"])
        except LookupError as exc:
            raise CommandError(str(exc)) from exc
        if not refs:
            self.stdout.write("No EmbeddingField in any installed model.")
            return
        rows: list[tuple[str, ...]] = []
        notes: list[str] = []
        bar = tqdm(
            refs,
            desc="counting",
            unit="field",
            file=self.stderr._out,
            disable=True if options["no_progress"] else None,
            leave=False,
        )
        for ref in bar:
            status = indexing.field_status(ref)
            rows.append(
                (
                    str(ref),
                    ref.encoder_name,
                    str(status.rows),
                    str(status.embedded),
                    str(status.stale),
                    str(status.missing),
                    status.version,
                )
            )
            others = {v: n for v, n in status.versions.items() if v != status.version}
            for version, count in sorted(others.items()):
                notes.append(f"{ref}: {count} row(s) encoded by {version} (stale)")
            if status.skipped:
                notes.extend(self._skipped(ref, status.skipped))
        names = sorted({ref.encoder_name for ref in refs})
        for name in names:
            notes.extend(self._files(name))
        consumed = queues.ask_workers()  # fresh, not the cached answer
        lengths = queues.queue_lengths([sbert_settings.QUEUE, sbert_settings.TRAINING["QUEUE"]])
        notes.extend(queues.missing_workers(consumed, lengths))
        notes.extend(self._search_log())
        # The host's inference paths first: the table and the notes about rows end the output.
        for line in self._paths(names):
            self.stdout.write(line)
        self._table(rows)
        for note in notes:
            self.stdout.write(note)

    def _skipped(self, ref: indexing.FieldRef, count: int) -> list[str]:
        """The count of rows skipped after errors of their own, and the newest few."""
        lines = [f"{ref}: {count} row(s) skipped after errors of their own (newest first):"]
        for row in indexing.skipped_rows(ref)[:SHOW_SKIPPED]:
            message = (row.message.splitlines() or [""])[0][:200]
            times = "once" if row.failures == 1 else f"{row.failures} times"
            lines.append(
                f"  pk={row.object_pk}  {row.stage}  {row.error}: {message}  "
                f"({times}, last {row.last_seen:%Y-%m-%d %H:%M:%S %Z})"
            )
        if count > SHOW_SKIPPED:
            lines.append(f"  ... and {count - SHOW_SKIPPED} more")
        return lines

    def _search_log(self) -> list[str]:
        """The age of the oldest logged search (one indexed read), and whether it is past
        ``RETENTION_DAYS``: nothing when searches are not logged and none are left."""
        oldest = SearchLog.objects.order_by("created_at").values_list("created_at", flat=True)
        first = oldest.first()
        feedback = sbert_settings.FEEDBACK
        if first is None:
            return ["Search log: empty."] if feedback["LOG"] is not False else []
        days = (timezone.now() - first).days
        line = f"Search log: the oldest search is {days} days old ({first:%Y-%m-%d %H:%M %Z})"
        retention = feedback["RETENTION_DAYS"]
        if retention is not None and days > int(retention):
            line += (
                f", past RETENTION_DAYS ({retention}): is the purge task scheduled? "
                "(feedback_purge_schedule(), check django_sbert.W032)"
            )
        return [line + "."]

    def _files(self, name: str) -> list[str]:
        """A line when this host cannot fetch or verify the version the database says serves."""
        current = serving.serving_record(name, max_age=0)
        if current.is_base or current.directory is None:
            return []
        problem = serving.unavailable_reason(name, current.version, current.directory)
        return [] if problem is None else [f"{problem} (check django_sbert.E012)"]

    def _paths(self, names: list[str]) -> list[str]:
        """Which inference path each encoder takes on this host, and why (serving.paths)."""
        reports = [serving.path_report(name) for name in names]
        lines = [f"encoder {r['encoder']!r}: {r['path']} ({r['reason']})" for r in reports]
        if reports:
            lines.append(f"  chosen for this host's CPU: {reports[0]['cpu']}")
        return lines

    def _table(self, rows: list[tuple[str, ...]]) -> None:
        widths = [max(len(r[i]) for r in [COLUMNS, *rows]) for i in range(len(COLUMNS))]
        numeric = {2, 3, 4, 5}

        def line(cells: tuple[str, ...]) -> str:
            return "  ".join(
                cell.rjust(w) if i in numeric else cell.ljust(w)
                for i, (cell, w) in enumerate(zip(cells, widths, strict=True))
            ).rstrip()

        self.stdout.write(line(COLUMNS))
        for row in rows:
            self.stdout.write(line(row))
