"""Measuring search in the admin: the grading page (the serving version's top rows and a
candidate's side by side, a grade per row, saved into a judgment list), the import page,
"Evaluate now" and the quality-over-time chart (real PostgreSQL, the tiny random model, a
real run trained in the test process for the candidate)."""

from __future__ import annotations

import importlib.util
import re
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.contrib.contenttypes.models import ContentType
from django.core.files.uploadedfile import SimpleUploadedFile
from django.utils import timezone

from django_sbert import serving
from django_sbert.finetuning import runs
from django_sbert.finetuning.execution import execute_run
from django_sbert.finetuning.options import Hyperparameters
from django_sbert.models import (
    EncoderVersion,
    Evaluation,
    JudgedQuery,
    Judgment,
    JudgmentList,
    RunStatus,
    TrainingPair,
)
from tests.admin.test_admin import ADMIN, ALL, TOPICS, user_with
from tests.testapp.admin import ArticleAdmin
from tests.testapp.models import Article

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.urls("tests.admin.urls"),
    pytest.mark.usefixtures("model_dir"),
]

JUDGING = [
    f"{action}_{model}"
    for action in ("view", "add", "change")
    for model in ("judgmentlist", "judgedquery", "judgment", "evaluation")
]
GRADE = f"{ADMIN}/judgmentlist/grade/"
TARGET = "testapp.Article.embedding"


@pytest.fixture
def staff(client):
    client.force_login(user_with("grader", ALL + JUDGING))
    return client


@pytest.fixture
def articles(embed) -> list[Article]:
    made = Article.objects.bulk_create(
        Article(title=query, body=f"{answer}. More about it follows here.", category="news")
        for query, answer in TOPICS
    )
    embed(*made)
    return made


def _rows(page: str) -> list[str]:
    """The pks of the grade selects, in page order."""
    return re.findall(r'<select name="grade-(\d+)"', page)


def test_the_grading_page_shows_the_top_rows_and_saves_grades_into_a_new_list(staff, articles):
    query = TOPICS[0][0]
    page = staff.get(GRADE, {"name": "Staff grades", "target": TARGET, "q": query})
    assert page.status_code == 200
    text = page.content.decode()
    shown = _rows(text)
    assert len(shown) == len(set(shown)) == len(articles)  # fewer than 10 rows exist
    assert str(articles[0].pk) in shown[:3]
    assert 'class="sbert-side"' in text and text.count('class="sbert-side"') == 1  # no candidate

    grades = {f"grade-{articles[0].pk}": "3", f"grade-{articles[1].pk}": "0"}
    data = {"name": "Staff grades", "target": TARGET, "q": query, "list": "", **grades}
    data[f"grade-{articles[2].pk}"] = ""  # left ungraded
    response = staff.post(GRADE, data)
    assert response.status_code == 302
    made = JudgmentList.objects.get(name="Staff grades")
    assert made.content_type == ContentType.objects.get_for_model(Article)
    assert made.field == "embedding"
    judged = JudgedQuery.objects.get(judgment_list=made)
    assert judged.text == query
    assert dict(judged.judgments.values_list("object_pk", "grade")) == {
        str(articles[0].pk): 3,
        str(articles[1].pk): 0,
    }
    # Back on the page, the grades are prefilled; a new grade and an ungrading are saved.
    again = staff.get(response["Location"]).content.decode()
    select = again.split(f'name="grade-{articles[0].pk}"')[1].split("</select>")[0]
    assert '<option value="3" selected>' in select
    staff.post(
        GRADE,
        {
            "list": made.pk,
            "q": query,
            f"grade-{articles[0].pk}": "2",
            f"grade-{articles[1].pk}": "",
        },
    )
    assert dict(judged.judgments.values_list("object_pk", "grade")) == {str(articles[0].pk): 2}
    # The list's page lists the query with its count of graded rows and a link to regrade it.
    change = staff.get(f"{ADMIN}/judgmentlist/{made.pk}/change/").content.decode()
    assert query in change and "1 (1)" in change and "grade its top rows" in change


def test_the_grading_page_escapes_rows_and_queries(staff, embed):
    (row,) = embed(Article.objects.create(title="<script>alert(1)</script> rates rise"))
    text = staff.get(GRADE, {"name": "x", "target": TARGET, "q": "<b>rates</b>"}).content.decode()
    assert "<script>alert(1)</script>" not in text and "&lt;script&gt;" in text
    assert "<b>rates</b>" not in text
    assert _rows(text) == [str(row.pk)]


def test_rows_the_model_admin_hides_are_neither_shown_nor_gradable(staff, articles, monkeypatch):
    hidden = articles[0]
    Article.objects.filter(pk=hidden.pk).update(category="private")
    monkeypatch.setattr(
        ArticleAdmin,
        "get_queryset",
        lambda self, request: Article.objects.exclude(category="private"),
    )
    params = {"name": "Public", "target": TARGET, "q": TOPICS[0][0]}
    shown = _rows(staff.get(GRADE, params).content.decode())
    assert shown and str(hidden.pk) not in shown
    response = staff.post(GRADE, {**params, f"grade-{hidden.pk}": "3"})
    assert response.status_code == 403
    assert not Judgment.objects.exists()


def test_the_grading_page_needs_both_permissions(client, articles):
    params = {"name": "x", "target": TARGET, "q": TOPICS[0][0]}
    # May change judgment lists, but not view articles: no rows, a 403.
    client.force_login(user_with("no-articles", JUDGING))
    assert client.get(GRADE, params).status_code == 403
    # May view articles, but not change judgment lists.
    client.force_login(user_with("no-lists", ["view_article", "view_judgmentlist"]))
    assert client.get(GRADE, params).status_code == 403
    # The list may not be created without the add permission.
    perms = ["view_article", "view_judgmentlist", "change_judgmentlist"]
    client.force_login(user_with("no-add", perms))
    assert client.get(GRADE, params).status_code == 200
    post = client.post(GRADE, {**params, f"grade-{articles[0].pk}": "1"})
    assert post.status_code == 403 and not JudgmentList.objects.exists()


def _candidate() -> EncoderVersion:
    TrainingPair.objects.bulk_create(
        TrainingPair(text_a=q, text_b=a, split="eval") for q, a in TOPICS
    )
    TrainingPair.objects.bulk_create(
        TrainingPair(text_a=f"{q} {n}", text_b=f"{a} {n}") for n in range(3) for q, a in TOPICS
    )
    hyper = Hyperparameters(loss="mnrl", epochs=1, batch_size=4, early_stopping=False)
    pks = list(TrainingPair.objects.values_list("pk", flat=True))
    run = runs.create_run("default", pks, hyperparameters=hyper, enqueue=False)
    assert execute_run(run.pk) == RunStatus.SUCCEEDED
    return EncoderVersion.objects.get(run=run)


def test_a_candidate_ranks_beside_the_serving_version_in_under_a_second(staff, articles):
    candidate = _candidate()
    params = {"name": "Both", "target": TARGET, "q": TOPICS[3][0]}
    staff.get(GRADE, params)  # both models loaded once, as on a running server
    started = time.perf_counter()
    page = staff.get(GRADE, params)
    seconds = time.perf_counter() - started
    text = page.content.decode()
    assert text.count('class="sbert-side"') == 2
    assert candidate.version in text
    # Each row has one grade select; a row in both columns says its rank on the left.
    assert len(_rows(text)) == len(set(_rows(text))) == len(articles)
    assert "on the left)" in text
    assert seconds < 1.0, seconds
    # "(the serving version only)" hides the candidate.
    alone = staff.get(GRADE, {**params, "candidate": ""}).content.decode()
    assert alone.count('class="sbert-side"') == 1


def test_the_import_page_imports_a_csv(staff, articles):
    pairs = enumerate(zip(TOPICS, articles, strict=True))
    rows = "query,object_pk,grade\n" + "".join(
        f"{q},{a.pk},{2 if n % 2 else 3}\n" for n, ((q, _), a) in pairs
    )
    upload = SimpleUploadedFile("grades.csv", rows.encode(), content_type="text/csv")
    response = staff.post(
        f"{ADMIN}/judgmentlist/import/",
        {"name": "Imported", "target": TARGET, "source": "file", "file": upload},
    )
    assert response.status_code == 302, response.content.decode()[-2000:]
    made = JudgmentList.objects.get(name="Imported")
    assert made.queries.count() == len(TOPICS)
    assert Judgment.objects.filter(query__judgment_list=made).count() == len(TOPICS)
    assert Judgment.objects.get(query__text=TOPICS[1][0]).grade == 2
    page = staff.get(f"{ADMIN}/judgmentlist/").content.decode()
    assert "Import judgments" in page and "Grade search results" in page


def test_evaluate_now_shows_each_mode_and_the_threshold(staff, articles):
    made = JudgmentList.objects.create(
        name="Topics", content_type=ContentType.objects.get_for_model(Article), field="embedding"
    )
    for (query, _), article in zip(TOPICS, articles, strict=True):
        judged = JudgedQuery.objects.create(judgment_list=made, text=query)
        Judgment.objects.create(query=judged, object_pk=str(article.pk), grade=3)
    url = f"{ADMIN}/judgmentlist/{made.pk}/evaluate/"
    assert "Evaluate now" in staff.get(url).content.decode()
    page = staff.post(url, {"version": "", "modes": ["vector", "keyword", "hybrid"], "store": "on"})
    text = page.content.decode()
    assert 'class="sbert-evaluations"' in text, text[-3000:]
    stored = list(Evaluation.objects.filter(judgment_list=made).order_by("mode"))
    assert [e.mode for e in stored] == ["hybrid", "keyword", "vector"]
    for evaluation in stored:
        assert f"{evaluation.metrics['ndcg@10']:.4f}" in text
    assert "precision 0.5" in text or "min_similarity" in text
    # The hybrid row puts the settings' fusion beside the one tuned on part of the list.
    fusion = stored[0].metrics["fusion"]
    assert f"settings&#x27; {fusion['settings']['ndcg@10']:.4f} (serves)" in text
    assert "tuned on the list: " in text
    # The list's page now charts them.
    change = staff.get(f"{ADMIN}/judgmentlist/{made.pk}/change/").content.decode()
    assert "sbert-quality-chart" in change and 'data-series="vector ndcg@10"' in change


def test_evaluate_now_on_several_lists_needs_the_permission_to_store_evaluations(client, articles):
    lists = [
        JudgmentList.objects.create(
            name=name, content_type=ContentType.objects.get_for_model(Article), field="embedding"
        )
        for name in ("One", "Two")
    ]
    client.force_login(user_with("changer", ["view_judgmentlist", "change_judgmentlist"]))
    page = client.post(
        f"{ADMIN}/judgmentlist/",
        {"action": "evaluate_now", "_selected_action": [str(made.pk) for made in lists]},
        follow=True,
    )
    assert "needs the &#x27;django_sbert.add_evaluation&#x27; permission" in page.content.decode()
    assert not Evaluation.objects.exists()


def test_the_chart_marks_promotions_between_evaluations(staff, articles):
    made = JudgmentList.objects.create(
        name="Over time", content_type=ContentType.objects.get_for_model(Article), field="embedding"
    )
    serving_now = serving.serving_record("default", max_age=0).version
    now = timezone.now()
    for days, value in ((3, 0.41), (2, 0.52), (0, 0.63)):
        for mode in ("vector", "hybrid"):
            e = Evaluation.objects.create(
                judgment_list=made,
                version=serving_now,
                mode=mode,
                metrics={"ndcg@10": value, "recall@10": value + 0.1, "queries": 8},
                trigger="schedule",
                seconds=0.1,
            )
            Evaluation.objects.filter(pk=e.pk).update(created_at=now - timedelta(days=days))
    EncoderVersion.objects.create(
        version="default-promoted",
        encoder_name="default",
        directory="default/promoted",
        status="retired",
        activated_at=now - timedelta(days=1),
    )
    EncoderVersion.objects.create(  # a candidate measured on the side: not on the chart
        version="default-never", encoder_name="default", directory="default/never"
    )
    Evaluation.objects.create(
        judgment_list=made,
        version="default-never",
        mode="vector",
        metrics={"ndcg@10": 0.99},
        trigger="manual",
        seconds=0.1,
    )
    page = staff.get(f"{ADMIN}/judgmentlist/{made.pk}/change/").content.decode()
    chart = page.split('<svg class="sbert-quality-chart"')[1].split("</svg>")[0]
    assert set(re.findall(r'data-series="([^"]+)"', chart)) == {
        "vector ndcg@10",
        "vector recall@10",
        "hybrid ndcg@10",
        "hybrid recall@10",
    }
    assert chart.count('class="sbert-promotion"') == 1 and "default-promoted" in chart
    assert "0.9900" not in chart  # the candidate's figure is in the table, not on the chart
    assert chart.count("<circle") == 12


def _demo_judgments():
    """The example project's ``articles/judgments.py``, loaded by path: it needs only
    django_sbert, so it runs here on the test app's articles."""
    path = Path(__file__).resolve().parents[2] / "example_project/articles/judgments.py"
    spec = importlib.util.spec_from_file_location("demo_judgments", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_demo_builds_its_judgment_list_from_the_held_out_pairs_and_measures_it(articles):
    demo = _demo_judgments()
    TrainingPair.objects.bulk_create(
        TrainingPair(text_a=q, text_b=article.body, split=split, source="demo")
        for n, ((q, _), article) in enumerate(zip(TOPICS, articles, strict=True))
        for split in (("eval",) if n % 2 else ("train",))
    )
    assert demo.evaluate_once() == []  # no list yet
    report = demo.make_held_out_list("testapp.Article", "embedding", "demo")
    assert report is not None and report.queries == len(TOPICS) // 2 and not report.unmatched
    made = JudgmentList.objects.get(name=demo.NAME)
    graded = {
        (j.query.text, j.object_pk, j.grade) for j in Judgment.objects.select_related("query")
    }
    assert graded == {
        (q, str(a.pk), 3)
        for n, ((q, _), a) in enumerate(zip(TOPICS, articles, strict=True))
        if n % 2
    }
    assert demo.make_held_out_list("testapp.Article", "embedding", "demo") is None  # once
    measured = demo.evaluate_once()
    assert {e.mode for e in measured} == {"vector", "keyword", "hybrid"}
    assert all(e.pk and e.metrics["queries"] == len(TOPICS) // 2 for e in measured)
    assert demo.evaluate_once() == []  # measured once; later ones are the schedule's
    assert made.evaluations.count() == len(measured)


def test_a_list_made_on_the_add_page_names_an_embedding_field(staff):
    article = ContentType.objects.get_for_model(Article)
    url = f"{ADMIN}/judgmentlist/add/"
    inline = {
        "queries-TOTAL_FORMS": "0",
        "queries-INITIAL_FORMS": "0",
        "queries-MIN_NUM_FORMS": "0",
        "queries-MAX_NUM_FORMS": "1000",
    }
    data = {"name": "Typed", "content_type": article.pk, "field": "body", **inline}
    page = staff.post(url, data).content.decode()
    assert "has no EmbeddingField" in page and not JudgmentList.objects.exists()
    user = ContentType.objects.get(app_label="auth", model="user")
    assert f'value="{user.pk}"' not in staff.get(url).content.decode()  # no EmbeddingField
    assert staff.post(url, {**data, "field": "embedding"}).status_code == 302
    assert JudgmentList.objects.get(name="Typed").field == "embedding"
