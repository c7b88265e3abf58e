"""A training run delivered through Redis to a real Celery worker on the training queue.

The worker is a subprocess (``celery -A tests.celery_app worker -Q <training queue>``) with
``tests.worker_settings``: the test database, this test's model directory and queue.
Shown: a queued run is trained by the worker and leaves a candidate; a worker SIGKILLed in
the middle of a run leaves the active version serving, no model, and the run is failed once
it is found stalled, which frees the encoder for the next run.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from django_sbert import serving
from django_sbert.exceptions import RunConflict
from django_sbert.finetuning import runs
from django_sbert.finetuning.options import Hyperparameters
from django_sbert.models import EncoderVersion, RunStatus, TrainingPair, TrainingRun
from tests.celery_app import app
from tests.worker_process import Worker

pytestmark = pytest.mark.django_db(transaction=True)

QUEUE = f"sbert-train-test-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def start_worker(settings, tmp_path) -> Iterator[Callable[[], Worker]]:
    model_dir = tmp_path / "models"
    settings.SBERT = {**settings.SBERT, "TRAINING": {"QUEUE": QUEUE}, "MODEL_DIR": str(model_dir)}
    serving.forget_serving()
    workers: list[Worker] = []

    def start() -> Worker:
        env = {"SBERT_TEST_MODEL_STORE": str(model_dir), "SBERT_TEST_TRAINING_QUEUE": QUEUE}
        log = tmp_path / f"worker-{len(workers)}.log"
        workers.append(Worker(log, QUEUE, settings_module="tests.worker_settings", env=env))
        return workers[-1]

    yield start
    for worker in workers:
        worker.stop()
    with app.connection_for_write() as conn:
        conn.default_channel.queue_purge(QUEUE)
    serving.forget_serving()


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting until {what}")
        time.sleep(0.1)


def pair_ids(copies: int) -> list[int]:
    words = ["bank rates", "football cup", "phone camera", "storm schools", "mars water"]
    pairs = [
        TrainingPair(text_a=f"{w} {n}", text_b=f"news about {w} number {n}", split="train")
        for n in range(copies)
        for w in words
    ]
    pairs += [TrainingPair(text_a=w, text_b=f"news about {w}", split="eval") for w in words]
    return [p.pk for p in TrainingPair.objects.bulk_create(pairs)]


def status(run: TrainingRun) -> str:
    return TrainingRun.objects.values_list("status", flat=True).get(pk=run.pk)


@pytest.mark.heavy
def test_worker_trains_a_queued_run_and_a_killed_one_keeps_the_active_version(
    start_worker, settings
):
    worker = start_worker()
    base = serving.serving_record("default", max_age=0).version
    ids = pair_ids(4)
    run = runs.create_run(  # queued when the (auto)commit happens: at once
        "default", ids, hyperparameters=Hyperparameters(batch_size=5)
    )
    wait_for(lambda: status(run) == RunStatus.SUCCEEDED, 120, "the worker finished the run")
    assert f"Task {'django_sbert.train_encoder'}" in worker.output()
    candidate = EncoderVersion.objects.get(run=run)
    assert candidate.metrics and (serving.resolve_directory(candidate.directory)).is_dir()

    # a long run, killed with the whole worker part-way through
    long_run = runs.create_run(
        "default",
        pair_ids(40),
        hyperparameters=Hyperparameters(batch_size=5, epochs=100),
    )
    wait_for(lambda: TrainingRun.objects.get(pk=long_run.pk).step > 0, 120, "the long run started")
    worker.kill_all()
    long_run.refresh_from_db()
    assert long_run.status == RunStatus.RUNNING and long_run.step < long_run.total_steps
    assert not EncoderVersion.objects.filter(run=long_run).exists()
    assert serving.serving_record("default", max_age=0).version == base
    store = serving.model_root() / "default"
    assert [p.name for p in store.iterdir()] == [Path(candidate.directory).name]

    # the encoder's slot is freed once the silent run is found stalled
    with pytest.raises(RunConflict):
        runs.create_run("default", ids, hyperparameters=Hyperparameters(), enqueue=False)
    settings.SBERT = {
        **settings.SBERT,
        "TRAINING": {**settings.SBERT.get("TRAINING", {}), "STALLED_SECONDS": 0},
    }
    runs.create_run("default", ids, hyperparameters=Hyperparameters(), enqueue=False)
    long_run.refresh_from_db()
    assert long_run.status == RunStatus.FAILED and "stopped reporting" in long_run.error
