"""Celery tasks of fine-tuning: training runs and promotions, on ``SBERT["TRAINING_QUEUE"]``.

``train_encoder``
    Run a queued ``TrainingRun`` (``runs.execute_run``).
``promote_version``
    Stage every row's vectors with a candidate version, then switch (``promotion.run_promotion``).

Both run on ``SBERT["TRAINING_QUEUE"]`` ("sbert-train"), so indexing never waits behind them::

    celery -A proj worker -Q sbert-train -P solo

``runs.create_run`` and ``promotion.start_promotion`` queue them through ``enqueue_training``
and ``enqueue_promotion`` here: the one import loop the layout allows (a wing's enqueue calling
its own tasks module), taken inside those functions.
"""

from __future__ import annotations

from typing import Any

from celery import shared_task

from ..celery import PROMOTE_TASK, TRAIN_TASK
from ..conf import sbert_settings
from ..indexing.tasks import TRANSIENT_ERRORS
from ..serving import worker as _worker_hooks  # noqa: F401  (connects the worker hooks)
from . import promotion, runs


@shared_task(bind=True, name=TRAIN_TASK, acks_late=True)
def train_encoder(self: Any, run_id: int) -> str:
    """Run training run ``run_id`` (queued by ``runs.create_run``); returns its status.

    Only a queued run starts, so a redelivered message never trains twice.
    """
    return runs.execute_run(run_id)


@shared_task(
    bind=True,
    name=PROMOTE_TASK,
    acks_late=True,
    reject_on_worker_lost=True,
    autoretry_for=TRANSIENT_ERRORS,
    retry_backoff=5,
    max_retries=5,
)
def promote_version(self: Any, version_id: int) -> dict[str, int] | None:
    """Stage version ``version_id``'s vectors for every row, then switch (resumable)."""
    return promotion.run_promotion(version_id)


def enqueue_training(run_id: int) -> None:
    """Send ``train_encoder`` for a run on ``SBERT["TRAINING_QUEUE"]``."""
    train_encoder.apply_async(args=(run_id,), queue=sbert_settings.TRAINING_QUEUE)


def enqueue_promotion(version_id: int) -> None:
    """Send ``promote_version`` on ``SBERT["TRAINING_QUEUE"]``."""
    promote_version.apply_async(args=(version_id,), queue=sbert_settings.TRAINING_QUEUE)
