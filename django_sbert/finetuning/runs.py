"""Training runs: create one, queue it, cancel it.

::

    run = create_run("default", pair_ids, hyperparameters=Hyperparameters(loss="mnrl"))
    cancel_run(run)         # a queued or running run stops within a step
    execute_run(run.pk)     # what the Celery task does, on SBERT["TRAINING"]["QUEUE"]

``create_run`` checks everything that can be checked before a worker is involved (the
options, the encoder, the examples the loss needs), records the run and queues it once its row
is committed; ``RunConflict`` when a run of the same encoder is queued or running. The rest of
a run's life lives in the modules beside it (``django_sbert.finetuning`` names each).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from ..conf import encoder_config
from ..exceptions import BrokerUnavailable, RunConflict
from ..fields import encoder_dimensions
from ..models import ACTIVE_RUN_STATUSES, RunStatus, TrainingRun
from . import recovery
from .examples import (
    content_texts,
    examples_for,
    pseudo_query_pairs,
    split_pairs,
)
from .options import (
    ADAPT_LOSSES,
    Hyperparameters,
)

__all__ = ["cancel_run", "create_run"]

# --- creating runs -----------------------------------------------------------------------------


def create_run(
    encoder_name: str,
    pair_ids: Sequence[int] = (),
    *,
    hyperparameters: Hyperparameters,
    content: str | None = None,
    user: Any = None,
    enqueue: bool = True,
) -> TrainingRun:
    """Validate everything that can be checked now, record the run and queue it on commit.

    ``content`` (``"app_label.Model.field"``) trains on that field's text instead of pairs
    ("adapt to our content"): ``margin_mse`` or ``mnrl`` on pseudo-queries cut from it, or
    ``simcse``; the eval split (the selected eval pairs, else all) measures it like any run. Raises
    ``ValidationError`` (bad settings or data) or ``RunConflict`` (a run of this encoder is
    queued or running).
    """
    # torch: the loss and data checks import it, and only this call needs them.
    from ..encoder.data import validate_examples
    from ..encoder.losses import build_loss

    encoder_config(encoder_name)  # ImproperlyConfigured names the configured encoders
    hyperparameters.validate()
    loss = hyperparameters.loss
    if content:
        if loss not in ADAPT_LOSSES:
            raise ValidationError(
                "Adapting to content trains with 'margin_mse' or 'mnrl' (pseudo-queries cut "
                f"from the text) or 'simcse', not {loss!r}."
            )
        texts = content_texts(content)
        options: dict[str, Any] = {}
        data: dict[str, Any] = {"content": content}
        if loss == "simcse":
            examples: list[Any] = texts
        else:
            examples = pseudo_query_pairs(texts, hyperparameters.seed)
            if not examples:
                raise ValidationError(
                    f"None of the {len(texts)} texts of {content} has two sentences to cut a "
                    "pseudo-query from; adapt with 'simcse' instead."
                )
            data["eval"] = [p.pk for p in split_pairs(pair_ids)[1]]
    else:
        train, evaluation = split_pairs(pair_ids)
        if not train:
            raise ValidationError(
                "None of the selected pairs is in the 'train' split; select train pairs."
            )
        examples, options = examples_for(loss, train)
        data = {"train": [p.pk for p in train], "eval": [p.pk for p in evaluation]}
    try:
        objective = build_loss(loss, encoder_dimensions(encoder_name), **dict(options))
        if loss != "margin_mse":  # its examples (the teacher's margins) are the worker's work
            validate_examples(examples, objective)
    except ValueError as exc:
        raise ValidationError(str(exc)) from exc
    if len(examples) < 2:
        raise ValidationError(f"{len(examples)} training example: at least 2 are needed.")
    recovery.fail_dead_runs(encoder_name)  # frees the slot a dead worker's run still holds
    try:
        with transaction.atomic():
            run = TrainingRun.objects.create(
                encoder_name=encoder_name,
                loss=loss,
                hyperparameters={**hyperparameters.as_dict(), "loss_options": options},
                data=data,
                created_by=user if getattr(user, "pk", None) else None,
            )
    except IntegrityError as exc:
        raise RunConflict(
            f"A training run of encoder {encoder_name!r} is already queued or running; wait "
            "for it to finish or cancel it."
        ) from exc
    if enqueue:
        _queue_on_commit(run)
    return run


def _queue_on_commit(run: TrainingRun) -> None:
    """Publish the run's task once its row is committed; if the broker is unreachable, fail
    the run (so it holds no slot) and raise ``BrokerUnavailable``.

    Outside a transaction this happens now and the caller gets the error (the API answers
    503). Inside one (``ATOMIC_REQUESTS``) it happens at COMMIT, where an error can no longer
    reach the caller: it is logged, and the run is failed all the same.
    """
    from .tasks import enqueue_training  # the allowed loop: this wing's tasks import us

    def publish() -> None:
        try:
            enqueue_training(run.pk)
        except BrokerUnavailable as exc:
            TrainingRun.objects.filter(pk=run.pk, status=RunStatus.QUEUED).update(
                status=RunStatus.FAILED,
                error=f"Not started: {exc}",
                finished_at=timezone.now(),
                updated_at=timezone.now(),
            )
            run.refresh_from_db()
            raise

    in_transaction = transaction.get_connection().in_atomic_block
    transaction.on_commit(publish, robust=in_transaction)


def cancel_run(run: TrainingRun) -> bool:
    """Ask a queued or running run to stop; the worker notices within a step."""
    return bool(
        TrainingRun.objects.filter(pk=run.pk, status__in=ACTIVE_RUN_STATUSES).update(
            status=RunStatus.CANCELLED, finished_at=timezone.now()
        )
    )
