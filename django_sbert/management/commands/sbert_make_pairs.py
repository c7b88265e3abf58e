"""``manage.py sbert_make_pairs app_label.Model FIELD_A FIELD_B``: positive pairs from content.

::

    manage.py sbert_make_pairs blog.Article title body --eval-share 0.1

Each row whose two fields are non-empty gives a (FIELD_A, FIELD_B) pair; a seeded share goes to
the eval split.
"""

from __future__ import annotations

from typing import Any

from django.apps import apps
from django.core.exceptions import FieldDoesNotExist
from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_sbert.finetuning import pairs


class Command(BaseCommand):
    help = "Build positive training pairs (e.g. title <-> body) from a model's rows."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "model", metavar="app_label.Model", help="The model whose rows to pair."
        )
        parser.add_argument("field_a", help="The field of each pair's first text (a title).")
        parser.add_argument("field_b", help="The field of its positive (a body).")
        parser.add_argument(
            "--eval-share",
            type=float,
            default=0.1,
            help="Share of the pairs kept for the eval split, from 0 up to 1.",
        )
        parser.add_argument("--seed", type=int, default=0, help="Seed of the eval split's draw.")
        parser.add_argument(
            "--source", default=None, help="The pairs' source; default: app_label.Model:A->B."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            model = apps.get_model(options["model"])
        except (LookupError, ValueError) as exc:
            raise CommandError(f"No installed model {options['model']!r}.") from exc
        for name in (options["field_a"], options["field_b"]):
            try:
                model._meta.get_field(name)
            except FieldDoesNotExist as exc:
                raise CommandError(f"{model._meta.label} has no field {name!r}.") from exc
        if not 0 <= options["eval_share"] < 1:
            raise CommandError("--eval-share must be in [0, 1).")
        created = pairs.content_pairs(
            model,
            options["field_a"],
            options["field_b"],
            eval_share=options["eval_share"],
            seed=options["seed"],
            source=options["source"],
        )
        self.stdout.write(f"Created {created} pairs from {model._meta.label}.")
