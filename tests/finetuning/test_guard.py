"""The guard: a run from behaviour is measured on evidence no visitor writes (the site's judged
queries, else queries cut from its rows), and the gate refuses a candidate that loses there
whatever its eval pairs say. Real runs of the tiny model on PostgreSQL."""

from __future__ import annotations

import pytest
from django.contrib.contenttypes.models import ContentType

from django_sbert import serving
from django_sbert.finetuning import guard, runs
from django_sbert.finetuning.execution import execute_run
from django_sbert.finetuning.gate import gate, stored_verdict
from django_sbert.finetuning.options import Hyperparameters
from django_sbert.models import (
    EncoderVersion,
    Judgment,
    JudgmentList,
    RunStatus,
    TrainingPair,
    TrainingRun,
)
from tests.finetuning.topics import TOPICS
from tests.testapp.models import Article

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("model_dir")]

SOURCE = "events:testapp.Article.embedding:2026-01-01..2026-01-10"


@pytest.fixture
def rows() -> list[Article]:
    """Articles of two lines: a pseudo-query can be cut from each (one line against the rest)."""
    return [Article.objects.create(title=a, body=b) for a, b in TOPICS]


def behaviour_run(source: str = SOURCE) -> TrainingRun:
    """A trained run on pairs from behaviour (or from ``source``)."""
    pairs = [TrainingPair(text_a=a, text_b=b, source=source) for a, b in TOPICS * 2]
    pairs += [TrainingPair(text_a=a, text_b=b, split="eval", source=source) for a, b in TOPICS]
    made = TrainingPair.objects.bulk_create(pairs)
    hyper = Hyperparameters(loss="mnrl", batch_size=4, learning_rate=1e-3)
    run = runs.create_run("default", [p.pk for p in made], hyperparameters=hyper, enqueue=False)
    assert execute_run(run.pk) == RunStatus.SUCCEEDED
    run.refresh_from_db()
    return run


def test_a_run_from_behaviour_records_its_guard_and_other_runs_do_not(rows):
    run = behaviour_run()
    recorded = run.data["guard"]
    assert recorded["source"] == "content" and recorded["queries"] == len(rows)
    assert recorded["version"] == run.base_version
    candidate = EncoderVersion.objects.get(run=run)
    again = guard.measure(
        "default",
        run.base_version,
        serving.get_encoder("default", run.base_version),
        serving.get_encoder("default", candidate.version),
    )
    assert recorded["active"] == pytest.approx(again.active, abs=1e-5)
    assert recorded["candidate"] == pytest.approx(again.candidate, abs=1e-5)
    assert recorded["passed"] == again.passed

    other = behaviour_run(source="file:pairs.csv")
    assert "guard" not in other.data


def fake_run(guard_values: dict | None, *, eval_before: float, eval_after: float) -> EncoderVersion:
    """A finished run from behaviour as the worker records it, its guard as given."""
    current = serving.serving_record("default", max_age=0).version
    train = TrainingPair.objects.create(text_a="q", text_b="d", source=SOURCE)
    evaluation = TrainingPair.objects.create(text_a="q", text_b="d", split="eval", source=SOURCE)
    data = {"train": [train.pk], "eval": [evaluation.pk]}
    if guard_values is not None:
        data["guard"] = {"source": "content", "queries": 6, "version": current, **guard_values}
    run = TrainingRun.objects.create(
        encoder_name="default",
        loss="mnrl",
        status=RunStatus.SUCCEEDED,
        base_version=current,
        data=data,
        metrics_before={"ndcg@10": eval_before},
        metrics_after={"ndcg@10": eval_after},
    )
    return EncoderVersion.objects.create(
        encoder_name="default",
        version=f"tiny-ft:{eval_after}",
        directory="default/x",
        run=run,
        metrics={"ndcg@10": eval_after},
    )


@pytest.mark.parametrize(
    ("guard_candidate", "passed"), [(0.70, True), (0.685, True), (0.67, False)]
)
def test_the_gate_refuses_a_candidate_that_loses_on_the_guard_set(guard_candidate, passed):
    candidate = fake_run(
        {"active": 0.70, "candidate": guard_candidate}, eval_before=0.5, eval_after=0.9
    )
    verdict = stored_verdict(candidate)
    assert verdict.passed is passed
    assert verdict.guard is not None and verdict.guard.active == 0.70
    assert "guard (6 content queries no visitor wrote)" in verdict.describe()
    if not passed:  # the eval pairs (0.9 against 0.5) cannot outvote it
        assert "loses more than 0.02 nDCG@10 on the guard set" in verdict.describe()


def test_without_a_guard_measured_against_the_serving_version_the_gate_measures_it(rows):
    run = behaviour_run()
    candidate = EncoderVersion.objects.get(run=run)
    run.data = {**run.data, "guard": {**run.data["guard"], "version": "an earlier version"}}
    run.save(update_fields=["data"])
    assert stored_verdict(candidate) is None  # a web request leaves it to the promotion task
    verdict = gate(candidate)  # the promotion task measures it
    assert verdict.guard is not None and verdict.guard.version == run.base_version
    assert verdict.guard.active == pytest.approx(run.data["guard"]["active"], abs=1e-5)


def test_the_guard_set_is_the_sites_judged_queries_less_those_visitors_wrote(rows):
    listed = JudgmentList.objects.create(
        name="editors",
        content_type=ContentType.objects.get_for_model(Article),
        field="embedding",
    )
    written, typed = (listed.queries.create(text=text) for text in ("storm", "city park"))
    Judgment.objects.create(query=written, object_pk=str(rows[3].pk), grade=3)
    Judgment.objects.create(query=typed, object_pk=str(rows[4].pk), grade=2)
    Judgment.objects.create(query=typed, object_pk=str(rows[0].pk), grade=0)
    TrainingPair.objects.create(text_a="city park", text_b="x", source=SOURCE)  # a visitor's
    found = guard.guard_set("default", "v1")
    assert found.source == "judgments"
    assert list(found.queries.values()) == ["storm"]
    assert list(found.relevant.values()) == [{f"testapp.Article.embedding:{rows[3].pk}"}]
    assert f"testapp.Article.embedding:{rows[0].pk}" in found.corpus  # every row is ranked


def test_the_content_guard_set_is_fixed_for_a_version(rows):
    first, again = guard.guard_set("default", "v1"), guard.guard_set("default", "v1")
    assert first.source == "content" and first.queries == again.queries
    assert first.corpus == again.corpus and first.relevant == again.relevant
    key = next(iter(first.queries))
    assert first.queries[key] not in first.corpus[key]  # the row without its query line
