"""Deployment checks (``manage.py check --deploy``): connections kept for searches (W030), and
no queue holding messages that no live worker consumes (W031, and ``sbert_status``).

W031 is shown with a real Celery worker (a subprocess on Redis) that consumes only the
indexing queue while a training run's message waits in the training queue, the quick-start
mistake of running ``-Q sbert`` alone. Queue names are unique to this module, so another
test's workers never answer for them.
"""

from __future__ import annotations

import time
import uuid
from io import StringIO

import pytest
from django.core.management import call_command

from django_sbert.checks import check_connections, check_workers
from django_sbert.finetuning import queues
from django_sbert.finetuning.tasks import enqueue_training
from django_sbert.models import TrainingRun
from tests.celery_app import app
from tests.worker_process import Worker

INDEX_QUEUE = f"sbert-roles-{uuid.uuid4().hex[:8]}"
TRAINING_QUEUE = f"sbert-train-roles-{uuid.uuid4().hex[:8]}"


def with_default(settings, **changes) -> None:
    default = {**settings.DATABASES["default"], **changes}
    settings.DATABASES = {**settings.DATABASES, "default": default}


def test_a_database_that_connects_per_request_is_warned_about(settings):
    with_default(settings, CONN_MAX_AGE=0)
    warnings = check_connections()
    assert [w.id for w in warnings] == ["django_sbert.W030"]
    assert "'default'" in warnings[0].msg and "CONN_MAX_AGE" in warnings[0].hint
    out = StringIO()
    call_command("check", deploy=True, stdout=out, stderr=out)
    assert "django_sbert.W030" in out.getvalue()


@pytest.mark.parametrize(
    "changes",
    [{"CONN_MAX_AGE": 600}, {"CONN_MAX_AGE": None}, {"CONN_MAX_AGE": 0, "OPTIONS": {"pool": True}}],
    ids=["persistent", "unlimited", "pool"],
)
def test_persistent_or_pooled_connections_pass(settings, changes):
    with_default(settings, **changes)
    assert check_connections() == []


@pytest.fixture
def unique_queues(settings):
    settings.SBERT = {**settings.SBERT, "QUEUE": INDEX_QUEUE, "TRAINING": {"QUEUE": TRAINING_QUEUE}}
    # The checks ask Celery's current app: the one whose broker the test worker uses (an
    # earlier test, the demo's, may have made its own app current).
    app.set_current()
    queues.forget_consumed_queues()
    yield
    queues.forget_consumed_queues()


def wait_until_answering(queue: str, timeout: float = 60.0) -> None:
    """Wait until a worker names ``queue`` in its reply: a worker that has logged "ready" can
    still miss the first one-second remote-control question on a loaded machine."""
    deadline = time.monotonic() + timeout
    while queue not in (queues.ask_workers() or ()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"no worker answered for {queue!r} within {timeout:.0f} s")
    queues.forget_consumed_queues()


@pytest.mark.heavy
@pytest.mark.django_db
def test_a_training_run_waiting_with_only_an_indexing_worker_is_reported(unique_queues, tmp_path):
    worker = Worker(tmp_path / "indexing-only.log", INDEX_QUEUE)
    try:
        wait_until_answering(INDEX_QUEUE)
        assert check_workers() == []  # nothing waits anywhere yet
        run = TrainingRun.objects.create(loss="mnrl")
        enqueue_training(run.pk)  # the message create_run sends

        assert queues.queue_lengths([INDEX_QUEUE, TRAINING_QUEUE]) == {
            INDEX_QUEUE: 0,
            TRAINING_QUEUE: 1,
        }
        warnings = check_workers()
        assert [w.id for w in warnings] == ["django_sbert.W031"]
        assert f"training queue {TRAINING_QUEUE!r} holds 1 message(s)" in warnings[0].msg
        assert f"-Q {TRAINING_QUEUE}" in warnings[0].hint
        out = StringIO()
        call_command("sbert_status", "--no-progress", stdout=out, stderr=StringIO())
        expected = (
            f"No worker is consuming the training queue {TRAINING_QUEUE!r} (1 message waiting)"
        )
        assert expected in out.getvalue()
        assert f"indexing queue {INDEX_QUEUE!r}" not in out.getvalue()
    finally:
        worker.stop()

    # With no worker at all, an empty queue is still named by sbert_status, but only a queue
    # with messages is a deployment warning.
    queues.forget_consumed_queues()
    try:
        assert [w.id for w in check_workers()] == ["django_sbert.W031"]
        out = StringIO()
        call_command("sbert_status", "--no-progress", stdout=out, stderr=StringIO())
        assert f"indexing queue {INDEX_QUEUE!r} (0 messages waiting)" in out.getvalue()
    finally:
        with app.connection_for_write() as connection:
            connection.default_channel.queue_purge(TRAINING_QUEUE)


def test_nobody_to_ask_is_not_a_warning(unique_queues, monkeypatch):
    # Celery reads CELERY_BROKER_URL from the environment before its configuration.
    monkeypatch.setenv("CELERY_BROKER_URL", "redis://127.0.0.1:1/0")
    assert queues.ask_workers() is None
    assert queues.queue_lengths([TRAINING_QUEUE]) is None
    assert check_workers() == []
