"""The loop: it starts a fine-tune only when enough new pairs from behaviour wait, and with
AUTO_PROMOTE promotes a candidate only through the gate (refused, no better, passed), through
the normal promotion path. Delivery through a real worker: test_loop_worker.py."""

from __future__ import annotations

import pytest

from django_sbert.feedback import loop
from django_sbert.models import (
    EncoderVersion,
    RunStatus,
    TrainingPair,
    TrainingRun,
    VersionStatus,
)
from django_sbert.serving import serving_record
from tests.feedback.behaviour import at, search
from tests.finetuning.topics import NEWS
from tests.testapp.models import Article

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("model_dir")]


@pytest.fixture
def feedback(settings):
    def configure(**values):
        settings.SBERT = {
            **settings.SBERT,
            "FEEDBACK": {"MIN_CLIENTS": 1, "LOOP_DAYS": None, "LOOP_MIN_PAIRS": 4, **values},
        }

    configure()
    return configure


def clicks(queries: list[str], articles: list[Article], days: list[str]) -> None:
    """Each query searched on each day, its own article clicked."""
    shown = [a.pk for a in articles]
    for day in days:
        for query, article in zip(queries, articles, strict=False):
            search(query, shown, clicks=[article.pk], client=f"{day}-{query}", when=at(day))


@pytest.fixture
def articles():
    return [Article.objects.create(title=q, body=doc) for q, doc in NEWS]


def test_the_loop_starts_a_run_once_enough_new_pairs_wait_and_not_again(feedback, articles):
    queries = [q for q, _ in NEWS]
    days = [f"2026-01-{d:02d}" for d in range(1, 11)]
    clicks(queries[:3], articles, days)  # 3 train pairs (and 3 eval): fewer than 4
    report = loop.tick()
    assert report.pairs.created == 6 and report.started == {}
    assert report.waiting == {"default": "3 new train pairs from behaviour, 4 start a run"}
    assert not TrainingRun.objects.exists()

    clicks(queries[3:5], articles[3:5], days)  # 2 more: 5 new train pairs
    report = loop.tick()
    run = TrainingRun.objects.get()
    assert report.started == {"default": run.pk}
    assert run.status == RunStatus.QUEUED and run.loss == "mnrl"
    assert run.data["loop"]["new_pairs"] == 5
    behaviour = TrainingPair.objects.filter(source__startswith="events:testapp.Article.")
    assert sorted(run.data["train"]) == sorted(
        behaviour.filter(split="train").values_list("pk", flat=True)
    )
    assert sorted(run.data["eval"]) == sorted(
        behaviour.filter(split="eval").values_list("pk", flat=True)
    )
    # the same pairs do not start another run, even once this one ended
    TrainingRun.objects.filter(pk=run.pk).update(status=RunStatus.SUCCEEDED)
    report = loop.tick()
    assert report.started == {} and TrainingRun.objects.count() == 1
    assert report.waiting["default"].startswith("0 new train pairs")


def test_without_eval_pairs_from_behaviour_the_loop_waits(feedback, articles):
    clicks([q for q, _ in NEWS], articles, ["2026-01-01"])  # one day: no eval window
    report = loop.tick()
    assert report.started == {} and "no eval pairs" in report.waiting["default"]


def finished_run(before: float, after: float) -> EncoderVersion:
    """A finished run of the loop that measured the serving version at ``before`` and its
    candidate at ``after`` (nDCG@10 on its eval pairs), as the worker records them."""
    current = serving_record("default", max_age=0).version
    pair = TrainingPair.objects.create(text_a="q", text_b="d", split="eval", source="events:x")
    run = TrainingRun.objects.create(
        encoder_name="default",
        loss="mnrl",
        status=RunStatus.SUCCEEDED,
        base_version=current,
        data={"train": [], "eval": [pair.pk], "loop": {"new_pairs": 4}},
        metrics_before={"ndcg@10": before, "recall@10": 1.0},
        metrics_after={"ndcg@10": after, "recall@10": 1.0},
    )
    return EncoderVersion.objects.create(
        encoder_name="default",
        version=f"tiny-ft:{after}",
        directory="default/x",
        run=run,
        metrics={"ndcg@10": after, "recall@10": 1.0},
    )


@pytest.mark.parametrize(
    ("after", "promoted", "decision"),
    [
        (0.5, False, "refused by the gate (ndcg@10: candidate 0.5000 vs active 0.9000)"),
        (0.9, False, "not promoted: no better than the serving version"),
        (0.95, True, "promoting (ndcg@10: candidate 0.9500 vs active 0.9000)"),
    ],
)
def test_auto_promote_promotes_only_what_the_gate_passes_and_improves(
    feedback, after, promoted, decision
):
    feedback(AUTO_PROMOTE=True)
    candidate = finished_run(0.9, after)
    decided = loop.decide_finished()
    assert decided[candidate.run.pk].startswith(decision)
    candidate.refresh_from_db()
    assert candidate.status == (VersionStatus.PROMOTING if promoted else VersionStatus.CANDIDATE)
    if promoted:  # the normal path: the gate's verdict and the reason are on the request
        assert candidate.promotion_request["gate"] == "passed"
        assert candidate.promotion_request["reason"] == loop.PROMOTE_REASON
    run = TrainingRun.objects.get(pk=candidate.run.pk)
    assert run.data["loop"]["decision"] == decided[run.pk]
    assert loop.decide_finished() == {}  # decided once


def test_without_auto_promote_a_candidate_waits_for_staff(feedback):
    feedback(AUTO_PROMOTE=False)
    candidate = finished_run(0.5, 0.95)
    (decision,) = loop.decide_finished().values()
    assert decision.startswith("waiting for staff")
    candidate.refresh_from_db()
    assert candidate.status == VersionStatus.CANDIDATE
    (row,) = loop.loop_runs()
    assert row.candidate == candidate and row.decision == decision


def test_the_beat_entry_runs_the_loop_on_the_training_queue_every_loop_hours():
    from django_sbert.celery import FEEDBACK_LOOP_TASK, feedback_loop_schedule
    from django_sbert.tasks import feedback_loop

    entry = feedback_loop_schedule(hours=6)
    assert entry == {
        "task": FEEDBACK_LOOP_TASK,
        "schedule": 6 * 3600.0,
        "options": {"queue": "sbert-train", "expires": 6 * 3600.0},
    }
    assert feedback_loop.name == FEEDBACK_LOOP_TASK == "django_sbert.feedback_loop"
    assert feedback_loop_schedule(hours=None) is None
    assert feedback_loop_schedule()["schedule"] == 24 * 3600.0  # daily by default
    assert feedback_loop_schedule(hours=1, queue="q")["options"]["queue"] == "q"
