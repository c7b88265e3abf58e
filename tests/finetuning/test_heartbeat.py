"""A healthy run is never declared stalled, whatever phase is slow; a dead one is.

The run executes in a thread of this process, exactly as the Celery task runs it, while the
main thread does what ``create_run`` and every sweep do: fail runs that wrote nothing for
``TRAINING_STALLED_SECONDS``. The stall limit is set below the time the evaluations before and
after training take (a large eval split), phases in which no training step reports progress.
"""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connections

from django_sbert.finetuning import recovery, runs
from django_sbert.finetuning.execution import execute_run
from django_sbert.finetuning.options import Hyperparameters
from django_sbert.models import RunStatus, TrainingPair, TrainingRun

pytestmark = pytest.mark.django_db(transaction=True)

WORDS = ["bank", "rates", "football", "cup", "phone", "camera", "storm", "school", "mars", "water"]


def make_pairs(train: int, evaluation: int) -> list[int]:
    def text(n: int) -> str:
        return " ".join(WORDS[(n * 7 + i) % len(WORDS)] for i in range(6)) + f" {n}"

    pairs = [TrainingPair(text_a=text(n), text_b=text(n + 1), split="train") for n in range(train)]
    pairs += [
        TrainingPair(text_a=f"query {text(n)}", text_b=text(n + 3), split="eval")
        for n in range(evaluation)
    ]
    return [p.pk for p in TrainingPair.objects.bulk_create(pairs)]


@pytest.mark.heavy
def test_a_run_with_slow_evaluations_is_never_declared_stalled(model_dir, settings):
    ids = make_pairs(train=16, evaluation=4000)
    run = runs.create_run(
        "default", ids, hyperparameters=Hyperparameters(batch_size=8), enqueue=False
    )
    settings.SBERT = {
        **settings.SBERT,
        # Far below the evaluations' time (each takes tens of seconds here), above a pause of
        # the heartbeat thread on a busy 2-core machine running the whole suite (0.6, 1.0 and
        # 1.5 s proved too tight there).
        "TRAINING": {**settings.SBERT.get("TRAINING", {}), "STALLED_SECONDS": 5.0},
    }
    outcome: list[str] = []

    def work() -> None:
        try:
            outcome.append(execute_run(run.pk))
        finally:
            connections.close_all()

    thread = threading.Thread(target=work)
    started = time.monotonic()
    thread.start()
    failed = 0
    while thread.is_alive():
        failed += recovery.fail_dead_runs("default")
        time.sleep(0.05)
    thread.join()
    took = time.monotonic() - started
    run.refresh_from_db()
    assert took > 2 * 5.0, f"the run took {took:.1f} s: too short to show anything"
    assert failed == 0 and run.status == RunStatus.SUCCEEDED, (outcome, run.error)
    assert run.metrics_before and run.metrics_after


def test_a_run_whose_worker_died_is_failed(model_dir, settings):
    ids = make_pairs(train=16, evaluation=4)
    run = runs.create_run(
        "default", ids, hyperparameters=Hyperparameters(batch_size=8), enqueue=False
    )
    # Claimed by a worker that died at once: running, and no heartbeat ever after.
    TrainingRun.objects.filter(pk=run.pk).update(status=RunStatus.RUNNING)
    TrainingRun.objects.filter(pk=run.pk).update(updated_at=run.created_at)
    settings.SBERT = {
        **settings.SBERT,
        "TRAINING": {**settings.SBERT.get("TRAINING", {}), "STALLED_SECONDS": 0.2},
    }
    time.sleep(0.3)
    assert recovery.fail_dead_runs("default") == 1
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED and "stopped reporting" in run.error
