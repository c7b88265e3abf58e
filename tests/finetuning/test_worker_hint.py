"""A queued run says when no worker consumes the training queue; ``sbert_status`` says it too.

The workers are asked for real, through Redis (Celery's ``inspect().active_queues()``): the
test's queues have unique names, so a worker of another test never answers for them. First no
worker consumes them: the run page and ``sbert_status`` say so. Then a real worker starts on
the training queue: once the cached answer expires, the page stops saying it, and
``sbert_status`` names only the indexing queue, which still has no worker.
"""

from __future__ import annotations

import html
import time
import uuid
from io import StringIO

import pytest
from django.core.management import call_command
from django.urls import reverse

from django_sbert.finetuning import queues
from django_sbert.models import RunStatus, TrainingRun
from tests.worker_process import Worker

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.admin.urls")]

TRAINING_QUEUE = f"sbert-train-hint-{uuid.uuid4().hex[:8]}"
INDEX_QUEUE = f"sbert-hint-{uuid.uuid4().hex[:8]}"
HINT = f"No worker is consuming the training queue {TRAINING_QUEUE!r}"
INDEX_HINT = f"No worker is consuming the indexing queue {INDEX_QUEUE!r}"


@pytest.fixture
def unique_queues(settings):
    settings.SBERT = {**settings.SBERT, "QUEUE": INDEX_QUEUE, "TRAINING": {"QUEUE": TRAINING_QUEUE}}
    queues.forget_consumed_queues()
    yield
    queues.forget_consumed_queues()


def run_page(client, run: TrainingRun) -> str:
    response = client.get(reverse("admin:django_sbert_trainingrun_change", args=[run.pk]))
    assert response.status_code == 200
    return html.unescape(response.content.decode())


def status_output() -> str:
    out = StringIO()
    call_command("sbert_status", "--no-progress", stdout=out, stderr=StringIO())
    return out.getvalue()


@pytest.mark.heavy
def test_the_hint_follows_the_workers_on_the_training_queue(admin_client, unique_queues, tmp_path):
    run = TrainingRun.objects.create(loss="mnrl")  # queued; no message is sent for it

    assert HINT in run_page(admin_client, run)
    started = time.monotonic()
    assert HINT in run_page(admin_client, run)  # answered from the cache: no second wait
    assert time.monotonic() - started < queues.REPLY_SECONDS
    output = status_output()
    assert HINT in output and INDEX_HINT in output

    # A running run shows that a worker has the queue (perhaps too busy to answer): no hint.
    other = TrainingRun.objects.create(loss="mnrl", encoder_name="other", status=RunStatus.RUNNING)
    assert HINT not in run_page(admin_client, run)
    other.delete()

    worker = Worker(tmp_path / "worker.log", TRAINING_QUEUE)
    try:
        assert HINT in run_page(admin_client, run)  # the cached answer, until it expires
        queues.forget_consumed_queues()  # as CACHE_SECONDS passing would
        page = run_page(admin_client, run)
        assert "No worker is consuming" not in page
        output = status_output()
        assert HINT not in output and INDEX_HINT in output
    finally:
        worker.stop()

    run.status = RunStatus.SUCCEEDED  # a finished run never shows the hint
    run.save()
    queues.forget_consumed_queues()
    assert "No worker is consuming" not in run_page(admin_client, run)


@pytest.mark.parametrize(
    "conf",
    [{"task_always_eager": True}, {"broker_url": "redis://127.0.0.1:1/0"}],
    ids=["eager", "broker-down"],
)
def test_nobody_to_ask_is_not_reported_as_no_worker(admin_client, unique_queues, conf):
    """Tasks run in the caller (no worker needed), or the broker is away: no claim is made."""
    from celery import current_app

    saved = {key: current_app.conf[key] for key in conf}
    current_app.conf.update(conf)
    try:
        started = time.monotonic()
        assert queues.ask_workers() is None
        assert time.monotonic() - started < 2 * queues.REPLY_SECONDS
        run = TrainingRun.objects.create(loss="mnrl")
        assert "No worker is consuming" not in run_page(admin_client, run)
        assert "No worker is consuming" not in status_output()
    finally:
        current_app.conf.update(saved)
