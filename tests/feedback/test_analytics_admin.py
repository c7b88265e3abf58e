"""The analytics page in the admin: who may see it, what it shows, the date range, and its
"Make training pairs from these clicks" button."""

from __future__ import annotations

import json
import re

import pytest
from django.contrib.auth.models import Permission, User

from django_sbert.models import TrainingPair
from tests.feedback.behaviour import at, search
from tests.testapp.models import Article

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.admin.urls")]

URL = "/admin/django_sbert/searchlog/analytics/"


def user_with(name: str, codenames: list[str], *, staff: bool = True) -> User:
    user = User.objects.create_user(name, password="pw", is_staff=staff)
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    return User.objects.get(pk=user.pk)


@pytest.fixture
def log():
    for day, client, clicked in [
        ("2026-02-01", "c1", ["b"]),
        ("2026-02-01", "c2", ["b"]),
        ("2026-02-02", "c3", []),
        ("2026-02-03", "c4", ["a"]),
    ]:
        search("Rates", ["a", "b"], clicks=clicked, client=client, when=at(day))
    search("nothing here", [], client="c5", when=at("2026-02-02"))


def test_staff_without_the_view_permission_on_searches_gets_403(client, log):
    client.force_login(user_with("editor", ["view_trainingpair", "change_searchlog"]))
    assert client.get(URL).status_code == 403


def test_visitors_who_are_not_staff_are_sent_to_the_login_page(client, log):
    client.force_login(user_with("visitor", ["view_searchlog"], staff=False))
    response = client.get(URL)
    assert response.status_code == 302 and "/login/" in response["Location"]


def test_the_page_shows_the_figures_of_the_days_chosen_and_draws_them_with_chart_js(client, log):
    client.force_login(user_with("analyst", ["view_searchlog"]))
    response = client.get(URL, {"since": "2026-02-01", "until": "2026-02-02"})
    assert response.status_code == 200
    page = response.content.decode()
    assert re.search(r'id="sbert-searches">4<', page)
    assert re.search(r'id="sbert-zero">1<', page)
    assert re.search(r'id="sbert-abandoned">1<', page)
    assert re.search(r'id="sbert-mrr">0.333<', page)  # (1/2 + 1/2 + 0) / 3
    assert "django_sbert/vendor/chartjs/chart.umd.min.js" in page
    data = json.loads(re.search(r'id="sbert-chart-data"[^>]*>(.*?)</script>', page, re.S)[1])
    assert data["days"] == ["2026-02-01", "2026-02-02"]
    assert data["mrr"] == [{"label": "default: v1", "data": [0.5, 0.0]}]
    assert data["positions"] == [1, 2] and data["ctr"] == pytest.approx([0.0, 2 / 3], abs=1e-4)
    # no button for a user who may not add pairs
    assert "Make training pairs" not in page

    later = client.get(URL, {"since": "2026-02-03", "until": "2026-02-03"}).content.decode()
    assert re.search(r'id="sbert-searches">1<', later)
    assert re.search(r'id="sbert-mrr">1.000<', later)
    bad = client.get(URL, {"since": "2026-02-05", "until": "2026-02-01"})
    assert "The first day comes after the last day." in bad.content.decode()


def test_the_button_makes_pairs_from_the_clicks_of_the_days_shown(client, log):
    a = Article.objects.create(title="rates rise", body="the bank lifts rates")
    b = Article.objects.create(title="rates fall", body="the bank cuts rates")
    for day, client_id in [("2026-03-01", "x1"), ("2026-03-02", "x2")]:
        search("Rates", [a.pk, b.pk], clicks=[b.pk], client=client_id, when=at(day))
    reader = user_with("reader", ["view_searchlog"])
    client.force_login(reader)
    query = "?since=2026-03-01&until=2026-03-02"
    assert client.post(URL + query, {"min_clients": 2}).status_code == 403

    client.force_login(user_with("trainer", ["view_searchlog", "add_trainingpair"]))
    assert "Make training pairs" in client.get(URL + query).content.decode()
    response = client.post(URL + query, {"min_clients": 1, "negatives": "mined"}, follow=True)
    assert response.status_code == 200
    # the last of the two days is the eval window: one pair of each split
    pairs = {p.split: p for p in TrainingPair.objects.all()}
    assert set(pairs) == {"train", "eval"} and TrainingPair.objects.count() == 2
    pair = pairs["train"]
    assert (pair.text_a, pair.text_b) == ("rates", "rates fall\nthe bank cuts rates")
    assert pair.source == "events:testapp.Article.embedding:2026-03-01..2026-03-02"
    assert "2 pairs created (1 train, 1 eval)" in response.content.decode()
