"""``manage.py load_demo_corpus``: load the Wikinews articles and queue their embedding.

::

    manage.py load_demo_corpus              # all 5,550; tasks go to the worker (-Q sbert)
    manage.py load_demo_corpus --limit 200  # the 200 newest
    manage.py load_demo_corpus --sync       # encode here, with a progress bar (no worker)

Running it again adds only what is missing.
"""

from __future__ import annotations

from typing import Any

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandParser

from articles import corpus


class Command(BaseCommand):
    help = "Load the Wikinews demo corpus (idempotent) and queue or run its embedding."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--limit", type=int, default=None, help="Load only the N newest.")
        embed = parser.add_mutually_exclusive_group()
        embed.add_argument(
            "--sync", action="store_true", help="Encode in this process instead of the worker."
        )
        embed.add_argument(
            "--no-embed", action="store_true", help="Only load; embed later (sbert_reindex)."
        )

    def handle(self, *args: Any, limit: int | None, sync: bool, no_embed: bool, **options: Any):
        added = corpus.load(limit=limit)
        total = corpus.Article.objects.count()
        self.stdout.write(f"Loaded {added} new article(s); {total} in the database.")
        if no_embed:
            return
        # bulk_create sends no signals: queue (or encode) whatever has no current vector.
        reindex = ["articles.Article", "--stale"] + (["--sync"] if sync else [])
        call_command("sbert_reindex", *reindex, stdout=self.stdout, stderr=self.stderr)
