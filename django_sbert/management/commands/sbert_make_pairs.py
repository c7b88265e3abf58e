"""``manage.py sbert_make_pairs``: training pairs from content, or from visitors' clicks.

::

    manage.py sbert_make_pairs blog.Article title body --eval-share 0.1
    manage.py sbert_make_pairs --from-events [blog.Article] [--since 2026-01-01] [--until ...]

From content, each row whose two fields are non-empty gives a (FIELD_A, FIELD_B) pair; a seeded
share goes to the eval split. ``--from-events`` makes (query, clicked row) pairs from the search
log (``django_sbert.feedback.pairs``; docs/learning.md); running it again makes only the pairs
not made before.
"""

from __future__ import annotations

from datetime import date, timedelta
from typing import Any

from django.apps import apps
from django.core.exceptions import FieldDoesNotExist
from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_sbert.conf.declaration import PAIR_OPTION
from django_sbert.feedback.analytics import Window
from django_sbert.feedback.pairs import behaviour_pairs
from django_sbert.finetuning import pairs


class Command(BaseCommand):
    help = (
        "Build positive training pairs (e.g. title <-> body) from a model's rows, or with "
        "--from-events from the queries and clicks of the search log."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "model",
            metavar="app_label.Model",
            nargs="?",
            help="The model whose rows to pair (with --from-events: whose searches, if named).",
        )
        parser.add_argument(
            "field_a", nargs="?", help="The field of each pair's first text (a title)."
        )
        parser.add_argument("field_b", nargs="?", help="The field of its positive (a body).")
        share = PAIR_OPTION["eval_share"]
        share.add_argument(
            parser,
            help=f"Share of the pairs kept for the eval split, {share.bounds_text} (default "
            f"{share.default}; with --from-events, the most recent share of the days: "
            'SBERT["FEEDBACK"]["EVAL_SHARE"]).',
        )
        parser.add_argument("--seed", type=int, default=0, help="Seed of the eval split's draw.")
        parser.add_argument(
            "--source", default=None, help="The pairs' source; default: app_label.Model:A->B."
        )
        events = parser.add_argument_group("from the search log")
        events.add_argument(
            "--from-events",
            action="store_true",
            help="(query, clicked row) pairs from logged searches (of the model, if named).",
        )
        events.add_argument("--since", type=date.fromisoformat, help="First day (YYYY-MM-DD).")
        events.add_argument("--until", type=date.fromisoformat, help="Last day, included.")
        for name in ("min_clients", "min_relevance", "negatives"):
            option = PAIR_OPTION[name]
            setting = f'SBERT["FEEDBACK"]["{name.upper()}"]'
            option.add_argument(events, help=f"{option.help} Default: {setting}.")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["from_events"]:
            self.from_events(options)
            return
        if not (options["model"] and options["field_a"] and options["field_b"]):
            raise CommandError("Name app_label.Model FIELD_A FIELD_B, or use --from-events.")
        try:
            model = apps.get_model(options["model"])
        except (LookupError, ValueError) as exc:
            raise CommandError(f"No installed model {options['model']!r}.") from exc
        for name in (options["field_a"], options["field_b"]):
            try:
                model._meta.get_field(name)
            except FieldDoesNotExist as exc:
                raise CommandError(f"{model._meta.label} has no field {name!r}.") from exc
        share = options["eval_share"] or PAIR_OPTION["eval_share"].default
        created = pairs.content_pairs(
            model,
            options["field_a"],
            options["field_b"],
            eval_share=share,
            seed=options["seed"],
            source=options["source"],
        )
        self.stdout.write(f"Created {created} pairs from {model._meta.label}.")

    def from_events(self, options: dict[str, Any]) -> None:
        label = ""
        if options["model"]:
            try:
                label = apps.get_model(options["model"])._meta.label
            except (LookupError, ValueError) as exc:
                raise CommandError(f"No installed model {options['model']!r}.") from exc
        if options["field_a"] or options["source"]:
            raise CommandError("--from-events takes a model at most, and no --source.")
        share = options["eval_share"]
        since, until = options["since"], options["until"]
        if since and until and since > until:
            raise CommandError("--since comes after --until.")
        window = Window.between(since or date(1970, 1, 1), until or date.today() + timedelta(1))
        report = behaviour_pairs(
            window.since if since else None,
            window.until if until else None,
            model_label=label or None,
            min_clients=options["min_clients"],
            min_relevance=options["min_relevance"],
            negatives=options["negatives"],
            eval_share=share,
        )
        self.stdout.write(f"Training pairs from clicks: {report.describe()}.")
        for source in report.sources:
            self.stdout.write(f"  source: {source}")
