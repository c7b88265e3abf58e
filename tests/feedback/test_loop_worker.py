"""The loop through a real Celery worker on the training queue: a turn of the loop (the
periodic task) starts a run from behaviour, the worker trains it, and as the run ends the
worker decides on its candidate by the gate. From informative clicks (each visitor clicks the
article that answers the query) the candidate beats the serving version on the most recent
days and, with AUTO_PROMOTE, the same worker promotes it through the normal promotion path;
from random clicks it does not, and nothing is promoted; without AUTO_PROMOTE it waits for
staff. Each run is measured on the guard set no visitor writes, by the same worker."""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable, Iterator

import pytest

from django_sbert import serving
from django_sbert.feedback import loop
from django_sbert.feedback.learning_tasks import feedback_loop
from django_sbert.finetuning.gate import stored_verdict
from django_sbert.models import (
    EncoderVersion,
    PromotionRecord,
    RunStatus,
    TrainingRun,
    VersionStatus,
)
from tests.celery_app import app
from tests.feedback.behaviour import at, search
from tests.finetuning.topics import NEWS
from tests.testapp.models import Article
from tests.worker_process import Worker

pytestmark = pytest.mark.django_db(transaction=True)

QUEUE = f"sbert-loop-test-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def start_worker(settings, tmp_path) -> Iterator[Callable[[bool], Worker]]:
    model_dir = tmp_path / "models"
    # The click model off (MIN_RELEVANCE 0): it would keep random clicks out of the pairs, and
    # the gate is what this test shows refusing them.
    feedback = {"MIN_CLIENTS": 1, "MIN_RELEVANCE": 0, "LOOP_MIN_PAIRS": 2, "LOOP_DAYS": None}
    workers: list[Worker] = []

    def start(auto_promote: bool) -> Worker:
        settings.SBERT = {
            **settings.SBERT,
            "TRAINING": {"QUEUE": QUEUE},
            "MODEL_DIR": str(model_dir),
            "FEEDBACK": {**feedback, "AUTO_PROMOTE": auto_promote},
        }
        serving.forget_serving()
        env = {
            "SBERT_TEST_MODEL_STORE": str(model_dir),
            "SBERT_TEST_TRAINING_QUEUE": QUEUE,
            "SBERT_TEST_AUTO_PROMOTE": "1" if auto_promote else "0",
        }
        log = tmp_path / f"worker-{len(workers)}.log"
        settings_module = "tests.feedback.worker_settings"
        workers.append(Worker(log, QUEUE, settings_module=settings_module, env=env))
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
        time.sleep(0.2)


def clicks(informative: bool) -> None:
    """Ten days of visitors clicking the article that answers their query (``informative``),
    or any article at random (seeded)."""
    articles = [Article.objects.create(title=q, body=doc) for q, doc in NEWS]
    shown = [a.pk for a in reversed(articles)]
    rng = random.Random(0)
    for day in range(1, 11):
        for (query, _), article in zip(NEWS, articles, strict=True):
            clicked = article if informative else rng.choice(articles)
            search(
                query,
                shown,
                clicks=[clicked.pk],
                client=f"{day}{query}",
                when=at(f"2026-01-{day:02d}"),
            )


def decided(run: TrainingRun) -> bool:
    run.refresh_from_db()
    return "decision" in run.data.get("loop", {})


@pytest.mark.heavy
@pytest.mark.parametrize(
    ("informative", "auto_promote", "promoted"),
    [(True, True, True), (False, True, False), (True, False, False)],
    ids=["informative-clicks", "random-clicks", "without-auto-promote"],
)
def test_a_run_of_the_loop_is_trained_by_the_worker_and_decided_by_the_gate(
    start_worker, informative, auto_promote, promoted
):
    worker = start_worker(auto_promote)
    clicks(informative)
    served = serving.serving_record("default", max_age=0).version
    result = feedback_loop()  # the periodic task, run here: it queues the run
    run = TrainingRun.objects.get()
    assert result["started"] == {"default": run.pk}
    wait_for(lambda: decided(run), 240, "the worker trained the run and decided on it")
    assert run.status == RunStatus.SUCCEEDED, run.error
    assert "Task django_sbert.train_encoder" in worker.output()
    candidate = EncoderVersion.objects.get(run=run)
    verdict = stored_verdict(candidate)
    assert verdict is not None and verdict.metric == "ndcg@10"
    # The worker measured the run from behaviour on the guard set too (queries cut from rows).
    assert run.data["guard"]["source"] == "content" and verdict.guard is not None
    better = verdict.passed and verdict.candidate["ndcg@10"] > verdict.active["ndcg@10"]
    decision = run.data["loop"]["decision"]
    # Even the tiny model learns from informative clicks what later visitors click; random
    # clicks teach nothing that holds on later days (the best step kept is the first).
    assert better == informative
    if not auto_promote:
        assert decision.startswith("waiting for staff")
    elif promoted:
        assert decision.startswith("promoting")
        wait_for(
            lambda: EncoderVersion.objects.get(pk=candidate.pk).status == VersionStatus.ACTIVE,
            240,
            "the worker promoted the candidate",
        )
        record = PromotionRecord.objects.get(to_version=candidate.version)
        assert record.reason == loop.PROMOTE_REASON and not record.forced
        assert record.from_version == served
        return
    else:
        assert decision.startswith(("refused by the gate", "not promoted: no better"))
    time.sleep(1)
    candidate.refresh_from_db()
    assert candidate.status == VersionStatus.CANDIDATE
    assert not PromotionRecord.objects.exists()
    assert serving.serving_record("default", max_age=0).version == served
