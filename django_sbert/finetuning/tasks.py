"""Celery tasks of fine-tuning: training runs and promotions, on ``SBERT["TRAINING"]["QUEUE"]``.

``train_encoder``
    Run a queued ``TrainingRun`` (``execute_run``).
``promote_version``
    Stage every row's vectors with a candidate version, then switch (``promotion.run_promotion``).

Both run on ``SBERT["TRAINING"]["QUEUE"]`` ("sbert-train"), so indexing never waits behind them.

``runs.create_run`` and ``promotion.start_promotion`` queue them through ``enqueue_training``
and ``enqueue_promotion`` here: the one import loop the layout allows (a wing's enqueue calling
its own tasks module), taken inside those functions. Both give up on an unreachable broker
after about a second and raise ``BrokerUnavailable``; the callers then undo what they recorded
(the run fails, the version stops promoting), so nothing waits for a message never sent.

After every sweep (``indexing.tasks.sweep``, on Celery's ``task_postrun``) ``recover_stalled``
re-sends queued runs and promotions that made no progress for
``SBERT["TRAINING"]["STALLED_SECONDS"]`` (their message was lost: a broker restarted without
persistence) and fails running runs whose worker died (``recovery.py`` finds them).
"""

from __future__ import annotations

import logging
from typing import Any

from celery import shared_task
from celery.signals import task_postrun

from ..celery import PROMOTE_TASK, SWEEP_TASK, TRAIN_TASK
from ..conf import sbert_settings
from ..exceptions import BrokerUnavailable
from ..indexing.tasks import PUBLISH_RETRY_POLICY, TRANSIENT_ERRORS
from ..serving import worker as _worker_hooks  # noqa: F401  (connects the worker hooks)
from . import promotion, recovery
from .execution import execute_run

logger = logging.getLogger(__name__)


@shared_task(bind=True, name=TRAIN_TASK, acks_late=True, reject_on_worker_lost=True)
def train_encoder(self: Any, run_id: int) -> str:
    """Run training run ``run_id`` (queued by ``runs.create_run``); returns its status.

    Only a queued run starts, so a redelivered message never trains twice: a worker lost
    before it claimed the run leaves the message for another worker (``acks_late`` +
    ``reject_on_worker_lost``); one lost after finds the run running, does nothing, and the
    run is failed once it is found stalled.
    """
    return execute_run(run_id)


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
    """Send ``train_encoder`` for a run on ``SBERT["TRAINING"]["QUEUE"]``.

    Raises ``BrokerUnavailable`` when the broker cannot be reached (about 1 s of retries).
    """
    _publish(train_encoder, run_id, f"training run {run_id}")


def enqueue_promotion(version_id: int) -> None:
    """Send ``promote_version`` on the training queue; ``BrokerUnavailable`` as above."""
    _publish(promote_version, version_id, f"the promotion of version {version_id}")


def _publish(task: Any, object_id: int, what: str) -> None:
    try:
        task.apply_async(
            args=(object_id,),
            queue=sbert_settings.TRAINING["QUEUE"],
            retry=True,
            retry_policy=PUBLISH_RETRY_POLICY,
        )
    except Exception as exc:  # kombu, redis and amqp raise many types for one outage
        raise BrokerUnavailable(
            f"Could not reach the Celery broker to queue {what} "
            f"({type(exc).__name__}: {exc}); try again when the broker is back."
        ) from exc


def recover_stalled() -> dict[str, int]:
    """Fail runs whose worker died; re-send queued runs and promotions whose message was lost.

    Returns how many of each. Called after every sweep; safe to call any time.
    """
    failed = recovery.fail_dead_runs()
    resent_runs = resent_promotions = 0
    for run_id in recovery.lost_runs():
        enqueue_training(run_id)
        resent_runs += 1
    for version_id in recovery.lost_promotions():
        enqueue_promotion(version_id)
        resent_promotions += 1
    return {
        "failed_runs": failed,
        "resent_runs": resent_runs,
        "resent_promotions": resent_promotions,
    }


@task_postrun.connect(weak=False, dispatch_uid="django_sbert.finetuning.tasks.after_sweep")
def recover_after_sweep(sender: Any = None, state: str | None = None, **kwargs: Any) -> None:
    """Each finished sweep also recovers stuck fine-tuning work (``recover_stalled``)."""
    if getattr(sender, "name", None) != SWEEP_TASK or state != "SUCCESS":
        return
    try:
        recovered = recover_stalled()
    except Exception:  # the sweep's own work is done; log, and the next sweep tries again
        logger.exception("django-sbert: recovering stalled training runs or promotions failed.")
        return
    if any(recovered.values()):
        logger.warning("django-sbert: recovered stalled fine-tuning work: %s", recovered)
