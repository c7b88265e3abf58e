"""Measuring a judgment list (django_sbert/evaluation/run.py) on real PostgreSQL with the tiny
model: each mode's figures equal ``ranking_metrics`` of rankings computed here (vector and
passages from the stored vectors, keyword and hybrid from the searches themselves); the
threshold; a version that does not serve, measured on its pool, equal to the same version's
figures once promoted; each query ranked as a visitor's search ranks it (same vector, same
rows, same scores); ``sbert_evaluate``'s table, ``--json`` and ``--fail-under``; an
evaluation stored after a real promotion; the beat entry.
"""

from __future__ import annotations

import itertools
import json
from io import StringIO

import numpy as np
import pytest
from django.contrib.contenttypes.models import ContentType
from django.core.management import CommandError, call_command
from django.db import connection

from django_sbert import indexing, serving
from django_sbert.celery import EVALUATE_TASK, evaluation_schedule
from django_sbert.conf import sbert_settings
from django_sbert.encoder.metrics import ranking_metrics
from django_sbert.evaluation import run
from django_sbert.evaluation.run import EvaluationError, evaluate, similarity_threshold
from django_sbert.evaluation.tasks import evaluate_lists
from django_sbert.finetuning import promotion, runs
from django_sbert.finetuning.execution import execute_run
from django_sbert.finetuning.options import Hyperparameters
from django_sbert.models import Evaluation, JudgedQuery, Judgment, JudgmentList, TrainingPair
from tests.celery_app import app
from tests.finetuning.topics import NEWS
from tests.testapp.models import Article, Report

pytestmark = pytest.mark.django_db

TOPICS = NEWS
QUERIES = {  # query -> {topic index: grade}
    "interest rates and the bank": {0: 3, 3: 1},
    "the cup and the trophy": {1: 2},
    "a new library in the city": {4: 3, 2: 0},
    "water on mars": {5: 1, 6: 2},
}


@pytest.fixture(autouse=True)
def fresh_index():
    """Empty tables and indexes (dead HNSW entries of earlier tests would crowd the search)."""
    passages = Report._meta.get_field("embedding").passage_model._meta.db_table
    with connection.cursor() as cursor:
        tables = f"{passages}, testapp_report, testapp_article, testapp_note"
        cursor.execute(f"TRUNCATE {tables} CASCADE")


def judgment_list(model, rows, name: str = "news") -> JudgmentList:
    """A list over ``model.embedding`` grading ``rows`` (by topic index) for ``QUERIES``."""
    graded = JudgmentList.objects.create(
        name=name, content_type=ContentType.objects.get_for_model(model), field="embedding"
    )
    for text, grades in QUERIES.items():
        query = JudgedQuery.objects.create(judgment_list=graded, text=text)
        Judgment.objects.bulk_create(
            Judgment(query=query, object_pk=str(rows[i].pk), grade=g) for i, g in grades.items()
        )
    return graded


def articles() -> list[Article]:
    rows = Article.objects.bulk_create(
        Article(title=title, body=f"{body} {i}")
        for i, (title, body) in enumerate(TOPICS + TOPICS[:4])
    )
    indexing.embed_stale(indexing.get_ref("testapp.Article", "embedding"))
    return rows


def reports() -> list[Report]:
    rows = Report.objects.bulk_create(
        Report(title=title, body=f"{body}. {TOPICS[(i + 3) % 8][1]}. {title} again {i}")
        for i, (title, body) in enumerate(TOPICS + TOPICS)
    )
    indexing.embed_stale(indexing.get_ref("testapp.Report", "embedding"))
    return rows


def grades_of(graded: JudgmentList) -> dict[str, dict[str, int]]:
    return {
        str(q.pk): {j.object_pk: j.grade for j in q.judgments.all()} for q in graded.queries.all()
    }


def by_hand(scores: dict[int, float]) -> list[str]:
    """Pks by score, best first, ties to the smaller pk (the searches' order), top 100."""
    return [str(pk) for pk, _ in sorted(scores.items(), key=lambda i: (-i[1], i[0]))][:100]


def vector_rankings(model, graded: JudgmentList) -> dict[str, list[str]]:
    """Each query's rows by the cosine of the stored row vectors (numpy, not SQL)."""
    stored = {pk: np.asarray(v) for pk, v in model.objects.values_list("pk", "embedding")}
    out = {}
    for query in graded.queries.all():
        vector = serving.encode_query(query.text)
        out[str(query.pk)] = by_hand({pk: float(vector @ v) for pk, v in stored.items()})
    return out


def passage_rankings(graded: JudgmentList) -> dict[str, list[str]]:
    """Each query's rows by their best passage, as ``similar_to(passages=True)`` ranks them,
    checked against max-sim over the stored passage vectors (numpy): the same rows, in an order
    by-hand scores agree with up to 1e-6. The tiny model's cosines crowd near 1, and PostgreSQL
    sums in float32 where numpy sums in float64, so rows 1e-8 apart may swap."""
    passages = Report._meta.get_field("embedding").passage_model.objects
    out = {}
    for query in graded.queries.all():
        vector = serving.encode_query(query.text)
        best: dict[int, float] = {}
        for row_id, stored in passages.values_list("row_id", "vector"):
            best[row_id] = max(best.get(row_id, -2.0), float(vector @ np.asarray(stored)))
        found = [row.pk for row in Report.objects.similar_to(query.text, k=100, passages=True)]
        assert sorted(found) == sorted(best)
        for higher, lower in itertools.pairwise(found):
            assert best[higher] >= best[lower] - 1e-6, (query.text, higher, lower)
        out[str(query.pk)] = [str(pk) for pk in found]
    return out


def search_rankings(model, graded: JudgmentList, mode: str) -> dict[str, list[str]]:
    out = {}
    for query in graded.queries.all():
        if mode == "keyword":
            match = sbert_settings.SEARCH["KEYWORD"]["MATCH"]
            rows = model.objects.keyword_search(query.text, k=100, match=match)
        else:
            extra = {"passages": False} if model is Report else {}
            rows = model.objects.hybrid_search(query.text, k=100, **extra)
        out[str(query.pk)] = [str(row.pk) for row in rows]
    return out


def expected(rankings: dict[str, list[str]], graded: JudgmentList, rows: int) -> dict:
    figures = ranking_metrics(rankings, grades_of(graded), 10, corpus_size=rows)
    return {key: figures[key] for key in run.METRIC_KEYS if key in figures}


def check(evaluation: Evaluation, figures: dict) -> None:
    for key, value in figures.items():
        assert evaluation.metrics[key] == pytest.approx(value, abs=1e-6), (evaluation.mode, key)
    assert evaluation.metrics["queries"] == len(QUERIES)
    assert {"ndcg@10", "recall@10", "mrr@10", "no_relevant@10"} <= set(figures)
    if evaluation.mode in ("vector", "passages"):  # all of 12+ rows ranked: recall@100 known
        assert "recall@100" in figures


def test_every_mode_equals_ranking_metrics_of_its_rankings():
    rows = reports()
    graded = judgment_list(Report, rows)
    found = {e.mode: e for e in evaluate(graded, store=False)}
    assert list(found) == ["vector", "keyword", "hybrid", "passages"]
    assert not Evaluation.objects.exists()
    check(found["vector"], expected(vector_rankings(Report, graded), graded, len(rows)))
    check(found["passages"], expected(passage_rankings(graded), graded, len(rows)))
    for mode in ("keyword", "hybrid"):
        check(found[mode], expected(search_rankings(Report, graded, mode), graded, len(rows)))
    vector = found["vector"]
    assert vector.version == serving.encoder_version("default")
    assert vector.trigger == "manual" and vector.seconds > 0
    assert vector.metrics["threshold"]["precision"] == 0.5
    assert "threshold" not in found["keyword"].metrics


def test_sbert_evaluate_ranks_each_query_as_a_visitors_search_does():
    """The evaluation encodes its queries together; a visitor's search encodes one text alone
    (its process's cache emptied first): the same rows in the same order with the same scores,
    so the figure measures exactly what visitors get (vector and hybrid)."""
    rows = reports()
    graded = judgment_list(Report, rows)
    for text in ("rates", "the bank and the trophy of the new library in the city " * 3):
        JudgedQuery.objects.create(judgment_list=graded, text=text)  # other lengths
    task = run._load(graded, run.list_field(graded))
    ranked = run._live_rankings(task, ("vector", "hybrid"), serving.encoder_version("default"))
    assert len(ranked["vector"][0]) == len(QUERIES) + 2
    for query in graded.queries.all():
        serving.clear_query_cache()
        found = Report.objects.similar_to(query.text, k=100, passages=False)
        visitor = [(str(row.pk), float(row.similarity)) for row in found]
        assert ranked["vector"][0][str(query.pk)] == visitor, query.text
        serving.clear_query_cache()
        found = Report.objects.hybrid_search(query.text, k=100, passages=False)
        assert ranked["hybrid"][0][str(query.pk)] == [(str(r.pk), r.similarity) for r in found]


def test_a_field_without_keywords_or_passages_has_the_vector_mode_alone(embed):
    from tests.testapp.models import Note

    notes = [Note.objects.create(text=f"{a} {b} {i}") for i, (a, b) in enumerate(TOPICS * 2)]
    embed(*notes)
    graded = judgment_list(Note, notes)
    [only] = evaluate(graded)
    assert only.mode == "vector" and only.pk is not None
    check(only, expected(vector_rankings(Note, graded), graded, len(notes)))
    with pytest.raises(EvaluationError, match="cannot search by 'keyword'"):
        evaluate(graded, modes=["keyword"])


def test_a_list_with_nothing_relevant_is_refused():
    rows = articles()
    graded = judgment_list(Article, rows)
    Judgment.objects.filter(query__judgment_list=graded).update(grade=0)
    with pytest.raises(EvaluationError, match="no query with a row graded 1"):
        evaluate(graded)


def test_the_threshold_is_where_precision_falls_below_the_level():
    graded = {"a": {"1": 2, "2": 1}, "b": {"3": 1}}
    rankings = {
        "a": [("1", 0.9), ("4", 0.8), ("2", 0.7), ("5", 0.3)],
        "b": [("3", 0.85), ("6", 0.6), ("7", 0.5)],
    }
    # by similarity: .9 hit, .85 hit, .8 miss, .7 hit (3/4), .6 miss (3/5), .5 miss (3/6),
    # .3 miss (3/7)
    assert similarity_threshold(rankings, graded, 0.5) == 0.5
    assert similarity_threshold(rankings, graded, 0.7) == 0.7
    assert similarity_threshold(rankings, graded, 1.0) == 0.85
    assert similarity_threshold({"a": [("4", 0.9)]}, graded, 0.5) is None


def train_candidate():
    pairs = []
    for n in range(4):
        pairs += [TrainingPair(text_a=f"{a} {n}", text_b=f"{b} {n}") for a, b in TOPICS]
    pairs += [TrainingPair(text_a=a, text_b=b, split="eval", source="eval") for a, b in TOPICS]
    pairs = TrainingPair.objects.bulk_create(pairs)
    params = Hyperparameters(loss="mnrl", learning_rate=5e-3, batch_size=8)
    training = runs.create_run(
        "default", [p.pk for p in pairs], hyperparameters=params, enqueue=False
    )
    execute_run(training.pk)
    training.refresh_from_db()
    return training.candidate


@pytest.fixture
def eager():
    saved = app.conf.task_always_eager, app.conf.task_eager_propagates
    app.conf.task_always_eager = app.conf.task_eager_propagates = True
    try:
        yield
    finally:
        app.conf.task_always_eager, app.conf.task_eager_propagates = saved


@pytest.mark.heavy
def test_an_evaluation_is_stored_after_a_real_promotion(
    model_dir, eager, django_capture_on_commit_callbacks
):
    rows = articles()
    graded = judgment_list(Article, rows)
    base = serving.encoder_version("default")
    candidate = train_candidate()
    # Before: the candidate measured on its pool (every row here), nothing served changes.
    before = {e.mode: e for e in evaluate(graded, version=candidate.version, store=False)}
    assert before["vector"].version == candidate.version
    assert serving.encoder_version("default") == base
    assert set(before) == {"vector", "keyword", "hybrid"}
    [by_pk] = evaluate(graded, version=str(candidate.pk), modes=["vector"], store=False)
    assert by_pk.version == candidate.version
    assert by_pk.metrics["ndcg@10"] == pytest.approx(before["vector"].metrics["ndcg@10"])

    with django_capture_on_commit_callbacks(execute=True):
        promotion.start_promotion(candidate, force=True, run_now=True)
    serving.forget_serving()
    assert serving.encoder_version("default") == candidate.version
    stored = {e.mode: e for e in Evaluation.objects.filter(judgment_list=graded)}
    assert set(stored) == {"vector", "keyword", "hybrid"}
    assert {e.trigger for e in stored.values()} == {"promotion"}
    assert {e.version for e in stored.values()} == {candidate.version}
    # The rows now hold the candidate's vectors: the live figures are the pool's of before.
    check(stored["vector"], expected(vector_rankings(Article, graded), graded, len(rows)))
    for key in ("ndcg@10", "recall@10", "mrr@10"):
        assert stored["vector"].metrics[key] == pytest.approx(before["vector"].metrics[key])
    # and the base model, which no longer serves, is measured on its pool
    [old] = evaluate(graded, version="base", modes=["vector"], store=False)
    assert old.version == base


@pytest.mark.heavy
def test_no_evaluation_after_a_promotion_when_turned_off(
    model_dir, eager, django_capture_on_commit_callbacks, settings
):
    rows = articles()
    judgment_list(Article, rows)
    settings.SBERT = {**settings.SBERT, "EVALUATION": {"AFTER_PROMOTION": False}}
    candidate = train_candidate()
    with django_capture_on_commit_callbacks(execute=True):
        promotion.start_promotion(candidate, force=True, run_now=True)
    assert not Evaluation.objects.exists()


def test_the_task_evaluates_every_list_and_skips_one_that_fails():
    rows = articles()
    good = judgment_list(Article, rows)
    bad = judgment_list(Article, rows, name="nothing relevant")
    Judgment.objects.filter(query__judgment_list=bad).update(grade=0)
    stored = evaluate_lists()
    assert {e.judgment_list_id for e in Evaluation.objects.filter(pk__in=stored)} == {good.pk}
    assert {e.trigger for e in Evaluation.objects.all()} == {"schedule"}


def test_the_beat_entry_follows_schedule_hours():
    entry = evaluation_schedule()
    assert entry["task"] == EVALUATE_TASK and entry["schedule"] == 24 * 3600.0
    assert entry["options"]["queue"] == "sbert-train"
    assert evaluation_schedule(hours=None) is None
    assert evaluation_schedule(hours=1)["schedule"] == 3600.0


def test_sbert_evaluate_prints_a_table_and_json():
    rows = articles()
    judgment_list(Article, rows)
    out = StringIO()
    call_command("sbert_evaluate", "news", stdout=out)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("judgment list news: testapp.Article.embedding, version ")
    assert lines[1].split()[:3] == ["mode", "ndcg@10", "recall@10"]
    assert [line.split()[0] for line in lines[2:5]] == ["vector", "keyword", "hybrid"]
    assert lines[5] == "hybrid fusion, nDCG@10 on the list:"  # the fusions side by side
    assert Evaluation.objects.count() == 3

    out = StringIO()
    call_command("sbert_evaluate", "news", "--json", "--mode", "vector", "--no-store", stdout=out)
    data = json.loads(out.getvalue())
    assert data["list"] == "news" and list(data["modes"]) == ["vector"]
    vector = data["modes"]["vector"]
    stored = Evaluation.objects.filter(mode="vector").get()
    assert vector["ndcg@10"] == pytest.approx(stored.metrics["ndcg@10"])
    assert vector["id"] is None and Evaluation.objects.count() == 3


def test_sbert_evaluate_fail_under_for_a_deploy_pipeline():
    rows = articles()
    judgment_list(Article, rows)
    [vector] = evaluate(JudgmentList.objects.get(name="news"), modes=["vector"], store=False)
    score = vector.metrics["ndcg@10"]
    # passes: the figure is at or above the threshold
    call_command(
        "sbert_evaluate",
        "news",
        "--mode",
        "vector",
        f"--fail-under=nDCG@10={score - 0.01}",
        stdout=StringIO(),
    )
    # fails: exit status 1 with the failing figure
    with pytest.raises(CommandError, match=r"vector ndcg@10 .* < ") as failed:
        call_command(
            "sbert_evaluate",
            "news",
            "--mode",
            "vector",
            "--fail-under",
            "ndcg@10=1.01",
            "--fail-under",
            f"mrr@10={vector.metrics['mrr@10'] - 0.01}",
            stdout=StringIO(),
        )
    assert "mrr@10" not in str(failed.value)
    assert failed.value.returncode == 1
    with pytest.raises(CommandError, match="METRIC=VALUE"):
        call_command("sbert_evaluate", "news", "--fail-under", "ndcg@10", stdout=StringIO())
    with pytest.raises(CommandError, match="No judgment list named 'other'; there are: news"):
        call_command("sbert_evaluate", "other", stdout=StringIO())
    with pytest.raises(CommandError, match="no version 'nope'"):
        call_command("sbert_evaluate", "news", "--encoder-version", "nope", stdout=StringIO())
