"""``manage.py sbert_keyword_stats``: the statistics BM25 keyword search ranks with.

::

    $ python manage.py sbert_keyword_stats
    blog_article.embedding_tsv  rows 5183  words 24301  average length title 9.1, body 121.4
    $ python manage.py sbert_keyword_stats --rebuild
    counted again: blog_article.embedding_tsv

Triggers keep the counts exact as rows are written (``keyword/statistics.py``). ``--rebuild``
reinstalls them and counts every keyword column again, holding writers back meanwhile: after a
restore that skipped triggers, say (docs/hybrid.md, "The statistics and their upkeep").
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DEFAULT_DB_ALIAS, connections

from django_sbert.keyword import statistics


class Command(BaseCommand):
    help = "Show, check or rebuild the word statistics of BM25 keyword search."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--rebuild", action="store_true", help="Count every keyword column from scratch."
        )
        parser.add_argument(
            "--check",
            action="store_true",
            help="Count from the rows without writing; fail if the stored counts differ.",
        )
        parser.add_argument(
            "--database", default=DEFAULT_DB_ALIAS, help="The database alias whose tables to count."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        using = options["database"]
        if options["rebuild"]:
            counted = statistics.rebuild(using)
            self.stdout.write("counted again: " + (", ".join(counted) or "no keyword column"))
            return
        connection = connections[using]
        drifted = []
        for table, column, letters in statistics.keyword_columns():
            totals, dfs = statistics.stored(connection, table, column)
            rows = totals.get("*")
            if rows is None:
                self.stdout.write(f"{table}.{column}  no statistics: run --rebuild")
                drifted.append(f"{table}.{column}")
                continue
            lengths = ", ".join(
                f"{letter} {totals.get(letter, 0) / rows:.1f}" if rows else f"{letter} -"
                for letter in dict.fromkeys(letters)
            )
            self.stdout.write(
                f"{table}.{column}  rows {rows}  words {len(dfs)}  average length {lengths}"
            )
            if options["check"]:
                expected = statistics.recount(connection, table, column, letters)
                if (totals, dfs) != expected:
                    drifted.append(f"{table}.{column}")
        if options["check"] and drifted:
            raise CommandError(
                "The keyword statistics differ from a recount for "
                f"{', '.join(drifted)}; run manage.py sbert_keyword_stats --rebuild."
            )
