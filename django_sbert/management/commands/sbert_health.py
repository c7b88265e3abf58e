"""``manage.py sbert_health``: a readiness probe for hosts without a web process (workers).

::

    manage.py sbert_health --broker     # exit 0 and {"status": "ok", ...}, or exit 1 and why

Checks, in a process of its own, the databases, the broker (``--broker``) and that this host
can serve each encoder's serving version; web processes answer the same about themselves, plus
"warmed in this process", at ``GET sbert/health/`` (``django_sbert.views.health``).
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_sbert.serving import health


class Command(BaseCommand):
    help = "Exit 0 when this host can serve: databases, broker (--broker), the serving versions."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--broker", action="store_true", help="Check the broker too.")

    def handle(self, *args: Any, **options: Any) -> None:
        report = health.check(broker=options["broker"], warmed=False)
        body = json.dumps(report.as_dict(), indent=1)
        if not report.ok:
            raise CommandError(body)
        self.stdout.write(body)
