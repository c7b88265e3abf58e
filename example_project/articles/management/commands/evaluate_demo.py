"""``manage.py evaluate_demo``: measure the demo's judgment list once (``articles.judgments``).

``demo.py`` runs it when every article has its vectors; it prints each mode's nDCG@10 and
Recall@10, or nothing when the list was measured before.
"""

from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand

from articles import judgments


class Command(BaseCommand):
    help = "Measure the judgment list 'Held-out pairs' once, with the serving version."

    def handle(self, *args: Any, **options: Any) -> None:
        started = time.monotonic()
        measured = judgments.evaluate_once()
        if not measured:
            return
        figures = ", ".join(
            f"{e.mode} {e.metrics['ndcg@10']:.3f} / {e.metrics['recall@10']:.3f}" for e in measured
        )
        self.stdout.write(
            f"{judgments.NAME} ({measured[0].metrics['queries']} queries), nDCG@10 / "
            f"Recall@10: {figures} ({time.monotonic() - started:.1f} s; the admin's judgment "
            "lists chart it over time)."
        )
