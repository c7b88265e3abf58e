"""``manage.py sbert_feedback``: the search log's export, a person's deletion, retention.

::

    sbert_feedback export --queries ubi_queries.jsonl --events ubi_events.jsonl [--days 7]
    sbert_feedback export --queries -                 # to stdout
    sbert_feedback forget --user 42                   # or --session <key>, --client <key>
    sbert_feedback purge [--days 90]                  # default SBERT["FEEDBACK"]["RETENTION_DAYS"]

``export`` writes OpenSearch User Behavior Insights JSON lines (``feedback.export``), oldest
first. ``forget`` deletes one client's searches and events (a request to be forgotten).
``purge`` deletes what is older than the retention, as the beat task does.
"""

from __future__ import annotations

import contextlib
from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from django_sbert.feedback import (
    client_key_for_session,
    client_key_for_user,
    forget_client,
    purge_expired,
)
from django_sbert.feedback.export import event_documents, query_documents, write_lines
from django_sbert.feedback.retention import Deleted
from django_sbert.models import SearchEvent, SearchLog


class Command(BaseCommand):
    help = "Export the search log as UBI JSON lines, forget one client, or purge old entries."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "action",
            choices=["export", "forget", "purge"],
            help="export: UBI JSON lines; forget: one client's searches, events and the pairs "
            "from behaviour (and judged queries) of its queries; purge: what is past retention, "
            "pairs and judged queries that rested on it included.",
        )
        parser.add_argument(
            "--queries", metavar="FILE", help="export: searches to FILE ('-': stdout)."
        )
        parser.add_argument(
            "--events", metavar="FILE", help="export: events to FILE ('-': stdout)."
        )
        parser.add_argument(
            "--days",
            type=int,
            help="export: only the last DAYS days; purge: older than DAYS (default "
            "RETENTION_DAYS).",
        )
        parser.add_argument("--user", help="forget: a user's primary key.")
        parser.add_argument("--session", help="forget: an anonymous visitor's session key.")
        parser.add_argument("--client", help="forget: a client key as the log stores it.")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["days"] is not None and options["days"] < 1:
            raise CommandError("--days must be 1 or more.")
        getattr(self, f"handle_{options['action']}")(options)

    def handle_export(self, options: dict[str, Any]) -> None:
        if not options["queries"] and not options["events"]:
            raise CommandError("Pass --queries FILE and/or --events FILE ('-' for stdout).")
        searches = SearchLog.objects.order_by("created_at")
        events = SearchEvent.objects.order_by("created_at")
        if options["days"] is not None:
            since = timezone.now() - timedelta(days=options["days"])
            searches = searches.filter(created_at__gte=since)
            events = events.filter(created_at__gte=since)
        for path, documents, what in (
            (options["queries"], query_documents(searches), "searches"),
            (options["events"], event_documents(events), "events"),
        ):
            if path:
                with self._open(path) as out:
                    count = write_lines(documents, out)
                if path != "-":
                    self.stderr.write(f"{count} {what} written to {path}")

    def handle_forget(self, options: dict[str, Any]) -> None:
        given = [name for name in ("user", "session", "client") if options[name] is not None]
        if len(given) != 1:
            raise CommandError("forget needs one of --user, --session or --client.")
        if options["user"] is not None:
            key = client_key_for_user(options["user"])
        elif options["session"] is not None:
            key = client_key_for_session(options["session"])
        else:
            key = options["client"]
        deleted = forget_client(key)
        self.stdout.write(f"Deleted {_described(deleted)} of client {key}.")

    def handle_purge(self, options: dict[str, Any]) -> None:
        deleted = purge_expired(options["days"])
        self.stdout.write(f"Deleted {_described(deleted)} past retention.")

    @contextlib.contextmanager
    def _open(self, path: str) -> Any:
        if path == "-":
            yield self.stdout  # writes each line as given (it ends in a newline already)
            return
        try:
            with open(path, "w", encoding="utf-8") as out:
                yield out
        except OSError as exc:
            raise CommandError(f"Cannot write {path}: {exc.strerror}.") from exc


def _described(deleted: Deleted) -> str:
    return (
        f"{deleted.searches} searches and {deleted.events} events, {deleted.pairs} pairs from "
        f"behaviour and {deleted.judged_queries} judged queries"
    )
