"""Tasks and signal handlers with Celery in eager mode: the task logic, not delivery.

Delivery through a real broker and worker is in test_worker.py. Here tasks run inline when
they are sent (``task_always_eager``); ``task_prerun`` records every task that ran.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator

import pytest
from celery import Celery
from celery.signals import task_prerun
from django.db import InterfaceError, OperationalError, transaction

from django_sbert import indexing
from django_sbert.celery import SWEEP_SCHEDULE, sweep_schedule
from django_sbert.fields import text_hash
from django_sbert.indexing import signals, tasks
from django_sbert.serving.worker import available_cpus, prepare_worker_process, torch_threads
from tests.celery_app import app
from tests.testapp.models import Article, Note

pytestmark = pytest.mark.django_db


@pytest.fixture
def eager() -> Iterator[list[tuple[str, tuple]]]:
    """Run tasks inline; yield the list of (task name, args) of every task that ran."""
    ran: list[tuple[str, tuple]] = []

    def record(sender=None, args=None, **kwargs):
        ran.append((sender.name, tuple(args or ())))

    task_prerun.connect(record, weak=False)
    saved = app.conf.task_always_eager, app.conf.task_eager_propagates
    app.conf.task_always_eager = app.conf.task_eager_propagates = True
    try:
        yield ran
    finally:
        app.conf.task_always_eager, app.conf.task_eager_propagates = saved
        task_prerun.disconnect(record)


@pytest.fixture
def broker_down() -> Iterator[Celery]:
    """Make the current Celery app one whose broker is a closed port (nothing listens on 1)."""
    down = Celery("broker-down", broker="redis://127.0.0.1:1/15", set_as_current=False)
    down.conf.broker_connection_retry = False
    down.set_current()
    try:
        yield down
    finally:
        app.set_current()


def embedded(article: Article) -> bool:
    article.refresh_from_db()
    return article.embedding is not None and article.embedding_hash == text_hash(
        f"{article.title}\n{article.body}"
    )


def embed_calls(ran: list[tuple[str, tuple]]) -> list[tuple]:
    return [args for name, args in ran if name == tasks.EMBED_TASK]


def test_many_saves_in_one_transaction_send_one_task(eager, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
        articles = [Article.objects.create(title=f"rates {i}", body="banks") for i in range(5)]
        articles[0].body = "edited twice in the same transaction"
        articles[0].save()

    calls = embed_calls(eager)
    assert calls == [("testapp.Article", "embedding", [a.pk for a in articles])]
    assert all(embedded(a) for a in articles)


def test_each_field_and_model_gets_its_own_task(eager, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
        article = Article.objects.create(title="t", body="b")
        note = Note.objects.create(text="n")
    assert sorted(embed_calls(eager)) == [
        ("testapp.Article", "embedding", [article.pk]),
        ("testapp.Note", "embedding", [note.pk]),
    ]


def test_rolled_back_saves_send_nothing(eager, django_capture_on_commit_callbacks):
    with (
        django_capture_on_commit_callbacks(execute=True) as callbacks,
        pytest.raises(RuntimeError),
        transaction.atomic(),
    ):
        Article.objects.create(title="never committed")
        raise RuntimeError
    assert callbacks == []
    assert embed_calls(eager) == []


def test_saves_after_a_rolled_back_savepoint_are_still_sent(
    eager, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
        with pytest.raises(RuntimeError), transaction.atomic():
            Article.objects.create(title="rolled back")
            raise RuntimeError
        kept = Article.objects.create(title="kept")
    (call,) = embed_calls(eager)
    assert kept.pk in call[2]
    assert embedded(kept)


def test_deleted_in_the_same_transaction_is_not_sent(eager, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
        gone = Article.objects.create(title="gone")
        kept = Article.objects.create(title="kept")
        gone.delete()
    assert embed_calls(eager) == [("testapp.Article", "embedding", [kept.pk])]


def test_saves_that_cannot_change_the_text_send_nothing(eager, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        article = Article.objects.create(title="interest rates", body="rise")
    article.refresh_from_db()
    assert embedded(article)
    eager.clear()

    with django_capture_on_commit_callbacks(execute=True):
        article.category = "economy"
        article.save()  # full save, same text, vector current
        article.save(update_fields=["published"])
    assert embed_calls(eager) == []

    with django_capture_on_commit_callbacks(execute=True):
        article.title = "interest rates fall"
        article.save(update_fields=["title"])
    assert len(embed_calls(eager)) == 1
    assert embedded(article)


def test_auto_embed_off_sends_nothing(eager, settings, django_capture_on_commit_callbacks):
    settings.SBERT = {**settings.SBERT, "AUTO_EMBED": False}
    with django_capture_on_commit_callbacks(execute=True):
        article = Article.objects.create(title="left for the sweep")
    assert embed_calls(eager) == []
    assert not embedded(article)


def test_save_succeeds_fast_when_the_broker_is_down_and_the_sweep_embeds_it(
    broker_down, caplog, django_capture_on_commit_callbacks
):
    caplog.set_level(logging.WARNING, logger="django_sbert")
    start = time.monotonic()
    with django_capture_on_commit_callbacks(execute=True):
        article = Article.objects.create(title="saved while the broker was down")
    assert time.monotonic() - start < 5
    assert "left for the sweep" in caplog.text
    assert not embedded(article)

    app.set_current()  # the broker is back
    app.conf.task_always_eager = True
    try:
        sent = tasks.sweep.delay().get()
    finally:
        app.conf.task_always_eager = False
    assert sent == {"testapp.Article.embedding": 1}
    assert embedded(article)


def test_sweep_embeds_rows_made_without_signals(eager):
    Article.objects.bulk_create(Article(title=f"bulk {i}") for i in range(5))
    first = Article.objects.create(title="will be edited")  # autocommit is off in this test
    indexing.embed_pks(indexing.get_ref("testapp.Article", "embedding"), [first.pk])
    Article.objects.filter(pk=first.pk).update(body="edited by queryset.update()")
    Note.objects.bulk_create([Note(text="a note")])

    sent = tasks.sweep.delay().get()
    assert sent == {"testapp.Article.embedding": 6, "testapp.Note.embedding": 1}
    assert all(embedded(a) for a in Article.objects.all())
    assert tasks.sweep.delay().get() == {}


def test_embed_rows_task_returns_counts(eager):
    a, b = Article.objects.bulk_create([Article(title="a"), Article(title="b")])
    result = tasks.embed_rows.delay("testapp.Article", "embedding", [a.pk, b.pk, 10**9]).get()
    assert result == {
        "examined": 2,
        "up_to_date": 0,
        "embedded": 2,
        "changed": 0,
        "missing": 1,
        "skipped": 0,
    }
    with pytest.raises(LookupError, match="not an EmbeddingField"):
        tasks.embed_rows.delay("testapp.Article", "title", [a.pk]).get()


def test_task_delivery_options():
    task = tasks.embed_rows
    assert task.acks_late and task.reject_on_worker_lost
    assert set(task.autoretry_for) == {OperationalError, InterfaceError}
    assert task.retry_backoff and task.retry_jitter and task.max_retries >= 5


def test_big_batches_are_split_into_bounded_tasks(eager):
    rows = Article.objects.bulk_create(Article(title=f"r{i}") for i in range(5))
    ref = indexing.get_ref("testapp.Article", "embedding")
    assert tasks.enqueue_embed(ref, [r.pk for r in rows], chunk_size=2) == 3
    assert [len(args[2]) for args in embed_calls(eager)] == [2, 2, 1]
    assert signals.send_embed_task("testapp.Article", "embedding", [rows[0].pk])


def test_sweep_schedule_entry():
    assert SWEEP_SCHEDULE["task"] == tasks.SWEEP_TASK
    assert SWEEP_SCHEDULE["options"]["queue"] == "sbert"
    entry = sweep_schedule(every=60)
    assert entry["schedule"] == 60.0 and entry["options"]["expires"] == 60.0
    assert tasks.SWEEP_TASK in app.tasks


def test_worker_threads_come_from_settings_or_cpus_per_process(settings):
    assert torch_threads("default") == 1  # tests.settings: THREADS=1
    encoders = settings.SBERT["ENCODERS"]
    settings.SBERT = {
        **settings.SBERT,
        "ENCODERS": {"default": {**encoders["default"], "THREADS": None}},
    }
    assert torch_threads("default", concurrency=1) == available_cpus()
    assert torch_threads("default", concurrency=available_cpus() * 2) == 1


def test_a_solo_worker_gives_torch_every_cpu_and_prefork_divides_them(monkeypatch, request):
    """``--pool solo`` is one process whatever concurrency Celery sets (the CPU count);
    ``-P prefork -c N`` is N. Real worker controllers, built (not started) by the test app."""
    from celery.app import trace
    from celery.concurrency.prefork import TaskPool as PreforkPool

    from django_sbert.serving import worker
    from tests.celery_app import app as celery_app

    monkeypatch.setattr(worker, "_worker", worker._worker)  # worker_init sets them
    monkeypatch.setattr(worker, "_worker_app", worker._worker_app)
    # Building a worker sets Celery's process-wide worker optimizations (result.get() then
    # refuses to block): put them back, or later tests in this process could not wait.
    request.addfinalizer(lambda: trace.reset_worker_optimizations(celery_app))
    solo = celery_app.WorkController(pool_cls="solo", concurrency=None, queues=["sbert"])
    assert solo.concurrency == max(1, os.cpu_count() or 1)  # what Celery itself sets
    assert worker.worker_processes(solo) == 1
    prefork = celery_app.WorkController(pool_cls=PreforkPool, concurrency=3, queues=["sbert"])
    assert worker.worker_processes(prefork) == 3
    # A solo pool runs worker_process_init as it is built: let that warm-up end here.
    for thread in threading.enumerate():
        if thread.name == "django-sbert-warm-up":
            thread.join(timeout=60)


def test_worker_process_init_sets_threads_and_loads_the_encoder(monkeypatch):
    """What each worker process runs after the fork (here: in the test process)."""
    import torch

    from django_sbert import serving

    for variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.delenv(variable, raising=False)  # restored after the test
    prepare_worker_process()
    (loader,) = [t for t in threading.enumerate() if t.name == "django-sbert-warm-up"]
    loader.join(timeout=60)
    assert torch.get_num_threads() == 1
    assert os.environ["OMP_NUM_THREADS"] == "1"
    assert "default" in serving.cache._encoders


def test_a_training_only_worker_loads_no_serving_encoder_at_start(monkeypatch):
    """``-Q sbert-train`` alone: runs and promotions load their own models, nothing to warm."""
    from django_sbert.serving import worker

    def queues(*names: str) -> set[str] | None:
        training = Celery("queues", set_as_current=False)
        if names:
            training.amqp.queues.select(list(names))
        return worker.own_queues(training)

    assert queues("sbert-train") == {"sbert-train"}
    assert not worker.serves_encoders(queues("sbert-train"))
    assert worker.serves_encoders(queues("sbert"))
    assert worker.serves_encoders(queues("sbert", "sbert-train"))
    assert worker.serves_encoders(queues())  # no -Q: Celery's default queue
    assert worker.serves_encoders(None)  # not in a worker

    training = Celery("training", set_as_current=False)
    training.amqp.queues.select(["sbert-train"])
    monkeypatch.setattr(worker, "_worker_app", training)
    for variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.delenv(variable, raising=False)  # restored after the test
    before = set(threading.enumerate())
    prepare_worker_process()
    assert not [t for t in set(threading.enumerate()) - before if t.name == "django-sbert-warm-up"]
    assert os.environ["OMP_NUM_THREADS"] == "1"  # threads are still set
