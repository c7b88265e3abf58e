"""Delivery through a real Redis broker to a real Celery worker subprocess.

The worker imports ``tests.settings`` like the test process, and reaches the test database
because ``DATABASE_URL`` is handed to it with the test database's name. Each test module run
uses its own queue name, so tests running at the same time on the same Redis never share tasks.

What is shown: saved rows get embedded by the worker; a worker child SIGKILLed mid-batch has
its task redelivered (``acks_late`` + ``reject_on_worker_lost``); a whole worker SIGKILLed
mid-batch, or a broker that was unreachable at save time, leaves rows that the sweep finds
and a worker embeds.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Callable, Iterator

import numpy as np
import pytest
from celery import Celery
from django.db import transaction

from django_sbert import indexing
from django_sbert.encoder.matryoshka import truncate
from django_sbert.fields import text_hash
from django_sbert.indexing import tasks
from django_sbert.serving import encode_texts
from tests.celery_app import app
from tests.scaleapp.models import MatryoshkaArticle
from tests.testapp.models import Article
from tests.worker_process import Worker

pytestmark = pytest.mark.django_db(transaction=True)

QUEUE = f"sbert-test-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def start_worker(settings, tmp_path) -> Iterator[Callable[[], Worker]]:
    """Start workers on this module's queue; stopped (and the queue emptied) afterwards."""
    settings.SBERT = {**settings.SBERT, "QUEUE": QUEUE}
    workers: list[Worker] = []

    def start() -> Worker:
        workers.append(Worker(tmp_path / f"worker-{len(workers)}.log", QUEUE))
        return workers[-1]

    yield start
    for worker in workers:
        worker.stop()
    with app.connection_for_write() as conn:
        conn.default_channel.queue_purge(QUEUE)


def count_embedded() -> int:
    return Article.objects.filter(embedding__isnull=False).count()


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting until {what}")
        time.sleep(0.05)


def all_current() -> bool:
    return all(
        a.embedding is not None and a.embedding_hash == text_hash(f"{a.title}\n{a.body}")
        for a in Article.objects.all()
    )


def make_rows(n: int) -> list[int]:
    body = " ".join(["central banks raise interest rates as prices rise"] * 6)
    rows = Article.objects.bulk_create(Article(title=f"row {i}", body=body) for i in range(n))
    return [row.pk for row in rows]


@pytest.mark.heavy
def test_saved_rows_are_embedded_by_the_worker(start_worker):
    worker = start_worker()
    with transaction.atomic():
        for i in range(20):
            Article.objects.create(title=f"economy story {i}", body="markets fell")
    wait_until(lambda: count_embedded() == 20, 60, "the worker embedded 20 rows")
    assert all_current()
    assert worker.output().count(f"Task {tasks.EMBED_TASK}") >= 1


@pytest.mark.heavy
def test_the_worker_stores_a_matryoshka_fields_cut_vectors(start_worker):
    """A field with dimensions=16 on the 32-dimensional encoder: the worker's rows hold the
    encoder's vectors cut to 16 dimensions and re-normalized."""
    start_worker()
    titles = [f"economy story {i}" for i in range(5)]
    with transaction.atomic():
        for title in titles:
            MatryoshkaArticle.objects.create(title=title)
    embedded = MatryoshkaArticle.objects.filter(embedding__isnull=False)
    wait_until(lambda: embedded.count() == 5, 60, "the worker embedded 5 rows")
    stored = np.stack(
        [
            np.asarray(v, dtype=np.float32)
            for v in embedded.order_by("pk").values_list("embedding", flat=True)
        ]
    )
    full = encode_texts(titles, "default", role="document")
    np.testing.assert_allclose(stored, truncate(full, 16), atol=1e-6)


@pytest.mark.heavy
def test_worker_killed_mid_batch_loses_nothing(start_worker):
    """SIGKILL the pool child while it encodes: the task is redelivered and finishes. Then
    SIGKILL the whole worker while it encodes: the sweep finds what is left."""
    ref = indexing.get_ref("testapp.Article", "embedding")
    worker = start_worker()
    pks = make_rows(4000)
    tasks.enqueue_embed(ref, pks, chunk_size=len(pks))
    wait_until(lambda: count_embedded() > 0, 60, "the worker started writing")
    (child,) = worker.child_pids()
    os.kill(child, signal.SIGKILL)
    assert count_embedded() < len(pks), "the task finished before the kill; use more rows"
    worker.wait_for("WorkerLostError", timeout=30)
    wait_until(lambda: count_embedded() == len(pks), 120, "the redelivered task finished")

    more = make_rows(4000)
    tasks.enqueue_embed(ref, more, chunk_size=len(more))
    wait_until(lambda: count_embedded() > len(pks), 60, "the worker started the second batch")
    worker.kill_all()
    left = indexing.count_stale(ref)
    assert left > 0, "the task finished before the kill; use more rows"

    start_worker()
    sent = tasks.sweep.apply().get()  # what beat would run; its tasks go to the new worker
    assert sent == {"testapp.Article.embedding": left}
    wait_until(lambda: indexing.count_stale(ref) == 0, 120, "the sweep's tasks finished")
    assert all_current()


@pytest.mark.heavy
def test_rows_saved_while_the_broker_is_away_are_embedded_after_the_sweep(start_worker):
    start_worker()
    down = Celery("broker-away", broker="redis://127.0.0.1:1/15", set_as_current=False)
    down.set_current()
    try:
        started = time.monotonic()
        with transaction.atomic():
            for i in range(10):
                Article.objects.create(title=f"saved with no broker {i}")
        assert time.monotonic() - started < 5
    finally:
        app.set_current()
    time.sleep(1)
    assert count_embedded() == 0

    tasks.sweep.apply().get()
    wait_until(lambda: count_embedded() == 10, 60, "the sweep's tasks finished")
    assert all_current()


@pytest.mark.heavy
def test_a_message_that_names_the_task_runs_whatever_module_holds_it(start_worker):
    """Task names are the wire format: a message queued by an older release (which knew only
    ``django_sbert.embed_rows``, sent from ``django_sbert/tasks.py``) still runs."""
    start_worker()
    pks = make_rows(3)
    app.send_task(
        "django_sbert.embed_rows", args=("testapp.Article", "embedding", pks), queue=QUEUE
    )
    wait_until(lambda: count_embedded() == 3, 60, "the worker ran the message sent by name")
    assert all_current()
