"""``manage.py prepare_demo``: what ``demo.py`` runs before starting the worker and server.

Migrates, collects the static files (served by WhiteNoise, as in production), loads the corpus
on the first run, makes the demo's training pairs once (headline -> lead paragraph, with a
held-out eval split: ``articles.pairs``) and the judgment list "Held-out pairs" from that split
(``articles.judgments``; ``demo.py`` measures it once the articles have vectors), makes sure
the demo superuser exists (its random password is printed once, when it is created), and
queues every article that still has no current vector (a worker stopped mid-way loses the task
it was running; this resends it).
"""

from __future__ import annotations

import secrets
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandParser
from django.db import connection

from articles import corpus, judgments, pairs
from articles.models import Article
from django_sbert import indexing

DEMO_USER = "admin"


class Command(BaseCommand):
    help = (
        "Migrate, collect static files, load the demo corpus, its training pairs and its "
        "judgment list, create the demo superuser, queue stale rows."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--limit", type=int, default=None, help="Load only the N newest.")
        parser.add_argument(
            "--pair-articles",
            type=int,
            default=pairs.ARTICLES,
            help=f"Articles to make training pairs from (default {pairs.ARTICLES}).",
        )

    def handle(self, *args: Any, limit: int | None, pair_articles: int, **options: Any) -> None:
        call_command("migrate", interactive=False, verbosity=0)
        # Copies only what changed since the last run: a second start stays fast.
        call_command("collectstatic", interactive=False, verbosity=0)
        if not Article.objects.exists():
            added = corpus.load(limit=limit)
            self.stdout.write(f"Loaded {added} Wikinews articles.")
            # Word statistics for keyword search now rather than at autovacuum's first pass a
            # minute or so later: hybrid and keyword searches rank alike from the first query.
            with connection.cursor() as cursor:
                cursor.execute(f"ANALYZE {connection.ops.quote_name(Article._meta.db_table)}")
        train, held_out = pairs.make_demo_pairs(pair_articles)
        if train or held_out:
            self.stdout.write(
                f"Made {train + held_out} training pairs (headline -> lead paragraph), "
                f"{held_out} of them held out for evaluation."
            )
        report = judgments.make_held_out_list("articles.Article", "embedding", pairs.SOURCE)
        if report is not None:
            self.stdout.write(
                f"Made the judgment list {judgments.NAME!r}: {report.queries} queries from the "
                "held-out pairs, each headline's article graded."
            )
        self.ensure_superuser()
        stale = indexing.count_stale(indexing.get_ref("articles.Article", "embedding"))
        if stale:
            # 64 rows per task: the progress bar moves often, and a stopped worker loses little.
            call_command(
                "sbert_reindex", "articles.Article", "--stale", "--no-progress",
                "--batch-size", "64", stdout=self.stdout,
            )  # fmt: skip

    def ensure_superuser(self) -> None:
        User = get_user_model()
        if User.objects.filter(username=DEMO_USER).exists():
            self.stdout.write(
                f"Admin login: {DEMO_USER} (password printed on the first run; to set a new "
                f"one: .venv/bin/python example_project/manage.py changepassword {DEMO_USER})"
            )
            return
        password = secrets.token_urlsafe(12)
        User.objects.create_superuser(DEMO_USER, "admin@example.com", password)
        self.stdout.write(
            f"Admin login: {DEMO_USER} / {password}  (shown once; keep it, or reset it "
            f"later with manage.py changepassword {DEMO_USER})"
        )
