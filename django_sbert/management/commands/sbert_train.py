"""``manage.py sbert_train``: what the admin's "Fine-tune encoder" action does.

::

    manage.py sbert_train --loss mnrl --epochs 1 --source faq      # queue on the training queue
    manage.py sbert_train --sync                                    # run here, now
    manage.py sbert_train --content blog.Article.embedding         # adapt to content

Trains on the train pairs (all, or those of ``--source``), measures on the eval pairs, and
records a candidate version; promote it from the admin or with ``--promote``.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_sbert.exceptions import BrokerUnavailable
from django_sbert.finetuning import promotion, runs
from django_sbert.finetuning.options import OPTIONS
from django_sbert.models import EncoderVersion, RunStatus, TrainingPair, TrainingRun

from ...exceptions import RunConflict
from ...finetuning.examples import default_loss
from ...finetuning.execution import execute_run
from ...finetuning.options import OPTION_NAMES, Hyperparameters, adapt_hyperparameters


class Command(BaseCommand):
    help = "Fine-tune an encoder on the training pairs (queued, or --sync in this process)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--encoder", default="default", help="The encoder to fine-tune, by its SBERT name."
        )
        parser.add_argument("--source", help="Only pairs with this source.")
        parser.add_argument(
            "--content",
            metavar="app_label.Model.field",
            help="Adapt to that field's text (no pairs): by default margin_mse ("
            "pseudo-queries scored by a teacher fusing the model with BM25), else --loss mnrl "
            "(pseudo-queries as pairs) or simcse.",
        )
        for option in OPTIONS:
            option.add_argument(parser)
        parser.add_argument("--sync", action="store_true", help="Run in this process and wait.")
        parser.add_argument(
            "--promote", action="store_true", help="With --sync: promote if the gate passes."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        pairs = TrainingPair.objects.all()
        if options["source"]:
            pairs = pairs.filter(source=options["source"])
        if options["content"]:
            given = {name: options[name] for name in OPTION_NAMES}
            hyper = adapt_hyperparameters(options["loss"], **given)
        else:
            hyper = Hyperparameters.from_options(options["loss"] or default_loss(pairs), options)
        loss = hyper.loss
        try:
            run = runs.create_run(
                options["encoder"],
                list(pairs.values_list("pk", flat=True)),
                hyperparameters=hyper,
                content=options["content"],
                enqueue=not options["sync"],
            )
        except ValidationError as exc:
            raise CommandError(" ".join(exc.messages)) from exc
        except (RunConflict, BrokerUnavailable) as exc:
            raise CommandError(str(exc)) from exc
        if not options["sync"]:
            self.stdout.write(f"Queued training run {run.pk} ({loss}).")
            return
        self.stdout.write(f"Training run {run.pk} ({loss}) ...")
        status = execute_run(run.pk)
        run = TrainingRun.objects.get(pk=run.pk)
        if status != RunStatus.SUCCEEDED:
            raise CommandError(f"Run {run.pk} {status}: {run.error}")
        candidate = EncoderVersion.objects.get(run=run)
        self.stdout.write(f"Candidate {candidate.version}")
        self.stdout.write(f"  before: {run.metrics_before}\n  after:  {run.metrics_after}")
        if options["promote"]:
            try:
                promotion.start_promotion(candidate, run_now=True)
            except promotion.PromotionRefused as exc:
                raise CommandError(str(exc)) from exc
            self.stdout.write(f"Promoted {candidate.version}.")
