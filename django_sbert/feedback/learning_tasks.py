"""The loop's Celery task, on ``SBERT["TRAINING"]["QUEUE"]`` (it starts fine-tunes).

``feedback_loop``
    One turn of the loop (``loop.tick``): pairs from the latest clicks, decisions on finished
    runs, a new run when enough pairs are new. Scheduled by ``celery.feedback_loop_schedule``.

When a training run ends in the worker (Celery's ``task_postrun`` of ``train_encoder``), the
loop decides at once what becomes of its candidate if it was a run of the loop
(``loop.decide_finished``), instead of waiting for the next turn.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import shared_task
from celery.signals import task_postrun

from ..celery import FEEDBACK_LOOP_TASK, TRAIN_TASK
from . import loop

logger = logging.getLogger(__name__)


@shared_task(name=FEEDBACK_LOOP_TASK)
def feedback_loop() -> dict[str, Any]:
    """One turn of the loop; returns what it did (``loop.TickReport.as_dict``)."""
    return loop.tick().as_dict()


@task_postrun.connect(weak=False, dispatch_uid="django_sbert.feedback.learning_tasks.after_run")
def decide_after_training(sender: Any = None, state: str | None = None, **kwargs: Any) -> None:
    """A finished training run of the loop: promote its candidate or leave it for staff."""
    if getattr(sender, "name", None) != TRAIN_TASK:
        return
    try:
        loop.decide_finished()
    except Exception:  # the run itself is recorded; the next turn of the loop decides
        logger.exception("django-sbert: deciding on a run of the feedback loop failed.")
