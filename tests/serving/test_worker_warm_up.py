"""A task that reaches a worker process while its encoders are still warming up waits for the
warm-up (``serving.worker``): two threads compiling one graph at once failed inside Dynamo.

A real Celery worker subprocess on Redis, with the tiny model compiled (its warm-up takes a
few seconds) and the rows' task already waiting in the queue when the worker starts, so the
task arrives during the warm-up.
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from celery.signals import task_prerun

from django_sbert import indexing
from django_sbert.encoder.paths import compiler_available
from django_sbert.indexing.tasks import enqueue_stale
from django_sbert.serving import worker
from tests.celery_app import app
from tests.testapp.models import Article
from tests.worker_process import Worker

QUEUE = f"sbert-warm-{uuid.uuid4().hex[:8]}"
WAITS = "task waits for this worker process's encoders to warm up"
WARMED = "loaded encoders ['default']"


@pytest.mark.heavy
@pytest.mark.skipif(not compiler_available(), reason="no C++ compiler: nothing to compile")
@pytest.mark.django_db(transaction=True)
def test_a_task_waiting_at_start_runs_after_the_warm_up(settings, tmp_path):
    settings.SBERT = {**settings.SBERT, "QUEUE": QUEUE}
    app.set_current()
    rows = Article.objects.bulk_create(
        Article(title=f"row {i}", body="central banks raise interest rates") for i in range(8)
    )
    enqueue_stale(indexing.get_ref("testapp.Article", "embedding"))
    started = Worker(
        tmp_path / "worker.log",
        QUEUE,
        settings_module="tests.warm_worker_settings",
        env={"SBERT_TEST_QUEUE": QUEUE},
    )
    try:
        deadline = time.monotonic() + 180
        # The rows are stored before the worker logs the task as succeeded: wait for both.
        while Article.objects.filter(embedding__isnull=True).exists() or (
            "succeeded" not in started.output()
        ):
            assert time.monotonic() < deadline, started.output()[-3000:]
            time.sleep(0.2)
        log = started.output()
    finally:
        started.stop()
        with app.connection_for_write() as connection:
            connection.default_channel.queue_purge(QUEUE)
    assert WAITS in log and WARMED in log, log[-3000:]
    assert log.index(WAITS) < log.index(WARMED) < log.index("succeeded"), log[-3000:]
    assert "raised unexpected" not in log and "BackendCompilerFailed" not in log
    assert Article.objects.filter(pk__in=[r.pk for r in rows], embedding__isnull=False).count() == 8


def test_without_a_warm_up_tasks_run_at_once():
    assert worker._warm.is_set()
    done = threading.Event()

    def task() -> None:
        task_prerun.send(sender=None, task_id="t", task=None, args=(), kwargs={})
        done.set()

    threading.Thread(target=task).start()
    assert done.wait(5)


@pytest.mark.heavy
@pytest.mark.skipif(not compiler_available(), reason="no C++ compiler: nothing to compile")
def test_a_solo_worker_says_ready_once_warm(tmp_path):
    """A one-process pool warms up before it consumes: "ready" means the encoders are loaded
    and compiled, so the first rows saved after it are embedded at once."""
    queue = f"sbert-warm-solo-{uuid.uuid4().hex[:8]}"
    started = Worker(
        tmp_path / "worker.log",
        queue,
        settings_module="tests.warm_worker_settings",
        env={"SBERT_TEST_QUEUE": queue},
        pool=("--pool", "solo"),
    )
    try:
        log = started.output()
    finally:
        started.stop()
    assert WARMED in log, log[-3000:]
    assert log.index(WARMED) < log.index("ready."), log[-3000:]
