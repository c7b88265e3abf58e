"""Celery task of the evaluation wing: judgment lists measured over time.

``evaluate_lists``
    Evaluate judgment lists (default: every list) with the serving version in every mode the
    field can do, storing an ``Evaluation`` per mode (``run.evaluate``).

It runs on ``SBERT["TRAINING"]["QUEUE"]`` (its encoding must not hold up indexing): after a
promotion (``SBERT["EVALUATION"]["AFTER_PROMOTION"]``; ``after_promotion``, connected in
``apps.py``, queues it once the switch has committed, trigger ``"promotion"``) and on a schedule
(``django_sbert.celery.evaluation_schedule()``, trigger ``"schedule"``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from celery import shared_task
from django.db import transaction
from django.utils import timezone

from ..celery import EVALUATE_TASK
from ..conf import sbert_settings
from ..indexing import field_refs
from ..models import EncoderVersion, JudgmentList, VersionStatus
from .run import TRIGGERS, evaluate

logger = logging.getLogger(__name__)

# A version saved active this soon after its activated_at was saved by the switch.
SWITCH_WINDOW = timedelta(minutes=5)


@shared_task(name=EVALUATE_TASK)
def evaluate_lists(list_ids: Sequence[int] | None = None, trigger: str = "schedule") -> list[int]:
    """Evaluate the lists ``list_ids`` (None: every list); returns the stored evaluations' ids.

    A list that cannot be measured (its field is gone, nothing graded relevant) is logged and
    skipped, so one list never stops the others.
    """
    if trigger not in TRIGGERS:
        raise ValueError(f"trigger must be one of {', '.join(TRIGGERS)}, not {trigger!r}.")
    lists = JudgmentList.objects.all()
    if list_ids is not None:
        lists = lists.filter(pk__in=list(list_ids))
    stored: list[int] = []
    for judgment_list in lists:
        try:
            stored += [e.pk for e in evaluate(judgment_list, trigger=trigger)]
        except Exception:
            logger.exception("django-sbert: evaluating judgment list %s failed.", judgment_list)
    return stored


def lists_of_encoder(name: str) -> list[int]:
    """Ids of the judgment lists over fields that encoder ``name`` encodes."""
    # Imported here: contenttypes' models load after the app registry.
    from django.contrib.contenttypes.models import ContentType

    ids: list[int] = []
    for ref in field_refs():
        if ref.encoder_name != name:
            continue
        content_type = ContentType.objects.get_for_model(ref.model, for_concrete_model=False)
        concrete = ContentType.objects.get_for_model(ref.model)
        ids += JudgmentList.objects.filter(
            content_type__in={content_type, concrete}, field=ref.name
        ).values_list("pk", flat=True)
    return sorted(set(ids))


def enqueue_evaluation(list_ids: Sequence[int], trigger: str) -> None:
    """Send ``evaluate_lists`` for ``list_ids`` on the training queue."""
    evaluate_lists.apply_async(
        args=(list(list_ids), trigger), queue=sbert_settings.TRAINING["QUEUE"]
    )


def after_promotion(sender: Any, instance: EncoderVersion, created: bool, **kwargs: Any) -> None:
    """``post_save`` of ``EncoderVersion``: when the switch saved a version active
    (``finetuning.promotion.switch``), queue the evaluation of its encoder's lists once the
    switch commits (``SBERT["EVALUATION"]["AFTER_PROMOTION"]``)."""
    if created or instance.status != VersionStatus.ACTIVE or instance.activated_at is None:
        return
    if timezone.now() - instance.activated_at > SWITCH_WINDOW:
        return  # an active version saved again later (an edit), not a switch
    if not sbert_settings.EVALUATION["AFTER_PROMOTION"]:
        return
    name = instance.encoder_name

    def send() -> None:
        list_ids = lists_of_encoder(name)
        if not list_ids:
            return
        try:
            enqueue_evaluation(list_ids, "promotion")
        except Exception:  # the promotion succeeded; a lost evaluation is only logged
            logger.exception("django-sbert: could not queue the evaluation after a promotion.")

    transaction.on_commit(send, using=kwargs.get("using"))
