"""A broker outage never leaves a training run queued or a version promoting for ever.

The broker is really unreachable in these tests: the current Celery app is switched to one
whose broker is a closed port. A request that needs to queue fine-tuning work gets a clear 503
(the API) or message (the admin, the command) and nothing stays recorded as waiting. Work whose
message was lost after it was queued (a broker restarted without persistence: here the queue is
purged) is re-sent by the next sweep and done by a real worker.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from celery import Celery
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError
from rest_framework.test import APIClient

from django_sbert import serving
from django_sbert.finetuning import promotion, runs
from django_sbert.finetuning.options import Hyperparameters
from django_sbert.indexing import tasks as indexing_tasks
from django_sbert.models import EncoderVersion, RunStatus, TrainingPair, TrainingRun, VersionStatus
from tests.celery_app import app
from tests.worker_process import Worker

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.urls("tests.api.urls")]

API = "/api/sbert"
QUEUE = f"sbert-train-outage-{uuid.uuid4().hex[:8]}"
WORDS = ["bank rates", "football cup", "phone camera", "storm schools", "mars water"]


@pytest.fixture
def model_dir(settings, tmp_path) -> Iterator[Path]:
    directory = tmp_path / "models"
    settings.SBERT = {
        **settings.SBERT,
        "MODEL_DIR": str(directory),
        "TRAINING": {"QUEUE": QUEUE},
        "VERSION_CACHE_SECONDS": 0.1,
    }
    serving.forget_serving()
    yield directory
    serving.forget_serving()
    with app.connection_for_write() as conn:
        conn.default_channel.queue_purge(QUEUE)


@pytest.fixture
def broker_down() -> Iterator[Celery]:
    """The current Celery app's broker is a closed port (nothing listens on port 1)."""
    down = Celery("broker-down", broker="redis://127.0.0.1:1/15", set_as_current=False)
    down.conf.broker_connection_retry = False
    down.set_current()
    try:
        yield down
    finally:
        app.set_current()


@pytest.fixture
def superuser_client(db) -> APIClient:
    client = APIClient()
    client.force_authenticate(User.objects.create_superuser("root", email=None, password=None))
    return client


def pair_ids(copies: int = 3) -> list[int]:
    pairs = [
        TrainingPair(text_a=f"{w} {n}", text_b=f"news about {w} number {n}", split="train")
        for n in range(copies)
        for w in WORDS
    ]
    pairs += [TrainingPair(text_a=w, text_b=f"news about {w}", split="eval") for w in WORDS]
    return [p.pk for p in TrainingPair.objects.bulk_create(pairs)]


def candidate_version(model_dir: Path) -> EncoderVersion:
    """A saved version of the encoder, ready to promote (the tiny model's own weights)."""
    directory, version = serving.save_encoder(serving.get_encoder("default"), "default", "tiny")
    return EncoderVersion.objects.create(
        encoder_name="default", version=version, directory=directory
    )


def queued_messages() -> int:
    with app.connection_for_write() as conn:
        return conn.default_channel.client.llen(QUEUE)


def wait_for(condition: Callable[[], bool], timeout: float, what: str, worker: Worker) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting until {what}:\n{worker.output()[-3000:]}")
        time.sleep(0.1)


def test_a_run_requested_while_the_broker_is_down_answers_503_and_holds_no_slot(
    model_dir, broker_down, superuser_client
):
    ids = pair_ids()
    started = time.monotonic()
    response = superuser_client.post(f"{API}/training-runs/", {"pairs": ids}, format="json")
    assert response.status_code == 503, response.content
    assert "broker" in response.json()["detail"]
    assert response["Retry-After"]
    assert time.monotonic() - started < 10, "the request must not hang on the broker"
    run = TrainingRun.objects.get()
    assert run.status == RunStatus.FAILED and "Not started" in run.error

    # The slot is free: with the broker back, the next request is queued.
    app.set_current()
    response = superuser_client.post(f"{API}/training-runs/", {"pairs": ids}, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["status"] == RunStatus.QUEUED
    assert queued_messages() == 1


def test_a_promotion_requested_while_the_broker_is_down_answers_503_and_stops_promoting(
    model_dir, broker_down, superuser_client
):
    target = candidate_version(model_dir)
    response = superuser_client.post(
        f"{API}/encoder-versions/{target.pk}/promote/", {"force": True}, format="json"
    )
    assert response.status_code == 503, response.content
    assert "broker" in response.json()["detail"]
    target.refresh_from_db()
    assert target.status == VersionStatus.CANDIDATE
    assert "Not started" in target.promotion_error
    assert not EncoderVersion.objects.filter(status=VersionStatus.PROMOTING).exists()


@pytest.mark.urls("tests.admin.urls")
def test_the_admin_and_the_command_say_the_broker_is_down(model_dir, broker_down, client):
    ids = pair_ids()
    with pytest.raises(CommandError, match="broker"):
        call_command("sbert_train", "--encoder", "default")
    assert not TrainingRun.objects.filter(status=RunStatus.QUEUED).exists()

    target = candidate_version(model_dir)
    client.force_login(User.objects.create_superuser("admin", email=None, password=None))
    response = client.post(
        "/admin/django_sbert/encoderversion/",
        {"action": "promote_even_if_worse", "_selected_action": [target.pk]},
        follow=True,
    )
    assert response.status_code == 200
    assert any("broker" in str(m) for m in response.context["messages"])
    target.refresh_from_db()
    assert target.status == VersionStatus.CANDIDATE
    assert ids  # pairs exist, so the command failed on the broker, not on missing data


@pytest.mark.heavy
def test_lost_messages_are_re_sent_by_the_sweep_and_done_by_a_worker(model_dir, settings, tmp_path):
    settings.SBERT = {
        **settings.SBERT,
        "TRAINING": {**settings.SBERT.get("TRAINING", {}), "STALLED_SECONDS": 0.5},
    }
    run = runs.create_run("default", pair_ids(), hyperparameters=Hyperparameters(batch_size=5))
    target = candidate_version(model_dir)
    promotion.start_promotion(target, gate=False)
    assert queued_messages() == 2
    with app.connection_for_write() as conn:  # the broker restarts and forgets them
        conn.default_channel.queue_purge(QUEUE)
    assert TrainingRun.objects.get(pk=run.pk).status == RunStatus.QUEUED
    time.sleep(0.6)

    indexing_tasks.sweep.apply()  # what beat runs; recovery follows every sweep
    assert queued_messages() == 2
    indexing_tasks.sweep.apply()  # just re-sent: not again within TRAINING_STALLED_SECONDS
    assert queued_messages() == 2

    env = {"SBERT_TEST_MODEL_STORE": str(model_dir), "SBERT_TEST_TRAINING_QUEUE": QUEUE}
    worker = Worker(
        tmp_path / "worker.log", QUEUE, settings_module="tests.worker_settings", env=env
    )
    try:
        wait_for(
            lambda: TrainingRun.objects.get(pk=run.pk).status == RunStatus.SUCCEEDED,
            120,
            "the re-sent run was trained",
            worker,
        )
        wait_for(
            lambda: EncoderVersion.objects.get(pk=target.pk).status == VersionStatus.ACTIVE,
            120,
            "the re-sent promotion switched",
            worker,
        )
    finally:
        worker.stop()
    assert EncoderVersion.objects.get(pk=target.pk).promotion_error == ""
