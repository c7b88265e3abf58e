"""evaluations/: staff with the admin's permissions; POST measures a judgment list with the
real code and the tiny model, GET lists the stored evaluations newest first, filtered by list."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from django.contrib.contenttypes.models import ContentType

from django_sbert import indexing
from django_sbert.models import Evaluation, JudgedQuery, Judgment, JudgmentList
from tests.testapp.models import Article

from .conftest import ARTICLES

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.api.urls")]

URL = "/api/sbert/evaluations/"


@pytest.fixture
def news() -> JudgmentList:
    """A judgment list over the eight embedded articles: two queries, graded."""
    rows = Article.objects.bulk_create(
        Article(title=title, body=body, category=category) for title, body, category in ARTICLES
    )
    indexing.embed_stale(indexing.get_ref("testapp.Article", "embedding"))
    graded = JudgmentList.objects.create(
        name="news", content_type=ContentType.objects.get_for_model(Article), field="embedding"
    )
    for text, pk, grade in (("interest rates", rows[1].pk, 3), ("a dog", rows[4].pk, 2)):
        query = JudgedQuery.objects.create(judgment_list=graded, text=text)
        Judgment.objects.create(query=query, object_pk=str(pk), grade=grade)
    return graded


@pytest.mark.parametrize("role", ["anonymous", "user", "viewer"])
def test_refused_to_anyone_but_staff(client_as, news, role):
    client = client_as(role)
    assert client.get(URL).status_code in (401, 403)
    assert client.post(URL, {"list": "news"}, format="json").status_code in (401, 403)
    assert not Evaluation.objects.exists()


def test_staff_measure_a_list_and_read_it_back(client_as, news, users):
    codenames = ("view_evaluation", "change_judgmentlist", "add_evaluation")
    users["staff"].user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    client = client_as("staff")
    answer = client.post(URL, {"list": "news", "modes": ["vector", "keyword"]}, format="json")
    assert answer.status_code == 201, answer.content
    body = answer.json()
    assert [e["mode"] for e in body] == ["vector", "keyword"]
    assert body[0]["list"] == "news" and body[0]["trigger"] == "manual"
    assert {"ndcg@10", "recall@10", "mrr@10", "no_relevant@10"} <= set(body[0]["metrics"])
    assert body[0]["metrics"]["queries"] == 2
    assert Evaluation.objects.count() == 2

    client.post(URL, {"list": "news", "modes": ["hybrid"]}, format="json")
    listed = client.get(URL, {"list": "news"}).json()
    results = listed["results"] if isinstance(listed, dict) else listed
    assert [e["mode"] for e in results][0] == "hybrid"  # newest first
    assert len(results) == 3
    assert client.get(URL, {"list": "other"}).json()["results"] == []


def test_not_stored_when_asked_and_errors_say_what_to_change(client_as, news):
    client = client_as("superuser")
    answer = client.post(URL, {"list": "news", "store": False}, format="json")
    assert answer.status_code == 200
    assert [e["mode"] for e in answer.json()] == ["vector", "keyword", "hybrid"]
    assert not Evaluation.objects.exists()
    missing = client.post(URL, {"list": "nope"}, format="json")
    assert missing.status_code == 400 and "No judgment list named 'nope'" in str(missing.json())
    bad = client.post(URL, {"list": "news", "modes": ["passages"]}, format="json")
    assert bad.status_code == 400 and "cannot search by 'passages'" in str(bad.json())
    unknown = client.post(URL, {"list": "news", "version": "nope"}, format="json")
    assert unknown.status_code == 400 and "no version 'nope'" in str(unknown.json())
    typo = client.post(URL, {"list": "news", "mode": ["keyword"], "store": False}, format="json")
    assert typo.status_code == 400 and "Unknown field" in str(typo.json()["mode"])
    empty = client.post(URL, {"list": "news", "modes": [], "store": False}, format="json")
    assert empty.status_code == 400 and "modes" in empty.json()
