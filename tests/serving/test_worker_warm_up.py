"""A task that reaches a worker process while its encoders are still warming up waits for them
to load, not for the compiles after (``serving.worker``): it runs eager beside the warm-up
thread's compile, and never starts the same compile itself (two threads compiling one graph at
once failed inside Dynamo).

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
WAITS = "task waits for this worker process's encoders to load"
LOADED = "loaded encoders ['default']"
WARMED = "warmed encoders ['default']"


@pytest.mark.heavy
@pytest.mark.skipif(not compiler_available(), reason="no C++ compiler: nothing to compile")
@pytest.mark.django_db(transaction=True)
def test_a_task_waiting_at_start_runs_once_loaded_not_after_the_compile(settings, tmp_path):
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
        embedded = started.output()
        while WARMED not in started.output():  # the compile goes on after the task
            assert time.monotonic() < deadline, started.output()[-3000:]
            time.sleep(0.2)
        log = started.output()
    finally:
        started.stop()
        with app.connection_for_write() as connection:
            connection.default_channel.queue_purge(QUEUE)
    assert WAITS in log and LOADED in log, log[-3000:]
    assert log.index(WAITS) < log.index(LOADED) < log.index("succeeded"), log[-3000:]
    # The task did not wait for the compiled graphs: it ran before the warm-up ended.
    assert WARMED not in embedded, embedded[-3000:]
    assert "compiled" in log[log.index(WARMED) :].splitlines()[0], log[-3000:]
    assert "raised unexpected" not in log and "BackendCompilerFailed" not in log
    assert Article.objects.filter(pk__in=[r.pk for r in rows], embedding__isnull=False).count() == 8


def test_without_a_warm_up_tasks_run_at_once():
    assert worker._loaded.is_set()
    done = threading.Event()

    def task() -> None:
        task_prerun.send(sender=None, task_id="t", task=None, args=(), kwargs={})
        done.set()

    threading.Thread(target=task).start()
    assert done.wait(5)
