"""A training run delivered through Redis to a real Celery worker on the training queue.

The worker is a subprocess (``celery -A tests.celery_app worker -Q <training queue>``) with
``tests.django.worker_settings``: the test database, this test's model directory and queue.
Shown: a queued run is trained by the worker and leaves a candidate; a worker SIGKILLed in
the middle of a run leaves the active version serving, no model, and the run is failed once
it is found stalled, which frees the encoder for the next run.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from django_sbert import training_jobs, versions
from django_sbert.models import EncoderVersion, RunStatus, TrainingPair, TrainingRun
from tests.celery_app import app
from tests.django.test_worker import test_database_url

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]
QUEUE = f"sbert-train-test-{uuid.uuid4().hex[:8]}"


class TrainingWorker:
    def __init__(self, log_path: Path, model_dir: Path) -> None:
        self.log_path = log_path
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.django.worker_settings",
            "DATABASE_URL": test_database_url(),
            "SBERT_TEST_MODEL_STORE": str(model_dir),
            "SBERT_TEST_TRAINING_QUEUE": QUEUE,
        }
        command = [
            sys.executable, "-m", "celery", "-A", "tests.celery_app", "worker",
            "-Q", QUEUE, "-P", "prefork", "-c", "1", "-l", "INFO",
            "-n", f"{QUEUE}-{uuid.uuid4().hex[:4]}@%h",
            "--without-gossip", "--without-mingle", "--without-heartbeat",
        ]  # fmt: skip
        self.log = log_path.open("ab")
        self.process = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + 90
        while "ready." not in self.output():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"worker did not start:\n{self.output()[-3000:]}")
            time.sleep(0.1)

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def kill_all(self) -> None:
        children = psutil.Process(self.process.pid).children(recursive=True)
        for pid in [*(c.pid for c in children), self.process.pid]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill_all()
        self.log.close()


@pytest.fixture
def start_worker(settings, tmp_path) -> Iterator[Callable[[], TrainingWorker]]:
    model_dir = tmp_path / "models"
    settings.SBERT = {**settings.SBERT, "TRAINING_QUEUE": QUEUE, "MODEL_DIR": str(model_dir)}
    versions.forget_serving()
    workers: list[TrainingWorker] = []

    def start() -> TrainingWorker:
        workers.append(TrainingWorker(tmp_path / f"worker-{len(workers)}.log", model_dir))
        return workers[-1]

    yield start
    for worker in workers:
        worker.stop()
    with app.connection_for_write() as conn:
        conn.default_channel.queue_purge(QUEUE)
    versions.forget_serving()


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


def test_worker_trains_a_queued_run_and_a_killed_one_keeps_the_active_version(
    start_worker, settings
):
    worker = start_worker()
    base = versions.serving("default", max_age=0).version
    ids = pair_ids(4)
    run = training_jobs.create_run(  # queued when the (auto)commit happens: at once
        "default", ids, hyperparameters=training_jobs.Hyperparameters(batch_size=5)
    )
    wait_for(lambda: status(run) == RunStatus.SUCCEEDED, 120, "the worker finished the run")
    assert f"Task {'django_sbert.train_encoder'}" in worker.output()
    candidate = EncoderVersion.objects.get(run=run)
    assert candidate.metrics and (versions.resolve_directory(candidate.directory)).is_dir()

    # a long run, killed with the whole worker part-way through
    long_run = training_jobs.create_run(
        "default",
        pair_ids(40),
        hyperparameters=training_jobs.Hyperparameters(batch_size=5, epochs=100),
    )
    wait_for(lambda: TrainingRun.objects.get(pk=long_run.pk).step > 0, 120, "the long run started")
    worker.kill_all()
    long_run.refresh_from_db()
    assert long_run.status == RunStatus.RUNNING and long_run.step < long_run.total_steps
    assert not EncoderVersion.objects.filter(run=long_run).exists()
    assert versions.serving("default", max_age=0).version == base
    store = versions.model_root() / "default"
    assert [p.name for p in store.iterdir()] == [Path(candidate.directory).name]

    # the encoder's slot is freed once the silent run is found stalled
    with pytest.raises(training_jobs.RunConflict):
        training_jobs.create_run(
            "default", ids, hyperparameters=training_jobs.Hyperparameters(), enqueue=False
        )
    settings.SBERT = {**settings.SBERT, "TRAINING_STALLED_SECONDS": 0}
    training_jobs.create_run(
        "default", ids, hyperparameters=training_jobs.Hyperparameters(), enqueue=False
    )
    long_run.refresh_from_db()
    assert long_run.status == RunStatus.FAILED and "stopped reporting" in long_run.error
