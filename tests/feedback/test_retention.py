"""Retention and forgetting: the purge (task, command), one client's deletion."""

from __future__ import annotations

import io
import json
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from django_sbert.celery import FEEDBACK_PURGE_TASK, feedback_purge_schedule
from django_sbert.feedback import client_key_for_session, client_key_for_user, forget_user
from django_sbert.feedback.tasks import feedback_purge
from django_sbert.models import SearchEvent, SearchLog
from tests.feedback.conftest import search_url

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.feedback.urls")]


def search_and_click(client, q: str = "interest rates") -> str:
    body = client.get(search_url(q, k=3)).json()
    token = body["results"][0]["click_token"]
    data = json.dumps({"token": token})
    assert client.post("/api/sbert/events/", data, content_type="application/json").status_code
    return body["search_id"]


@pytest.fixture
def searching(articles, registered, log_on) -> None:
    registered()


def age(search_id: str, days: int) -> None:
    moment = timezone.now() - timedelta(days=days)
    SearchLog.objects.filter(pk=search_id).update(created_at=moment)
    SearchEvent.objects.filter(search_id=search_id).update(created_at=moment)


def test_the_purge_deletes_searches_and_events_past_retention(client, searching, feedback):
    feedback(RETENTION_DAYS=30)
    old, recent = search_and_click(client), search_and_click(client, "a dog")
    age(old, 31)
    age(recent, 29)
    assert feedback_purge() == {"searches": 1, "events": 1, "pairs": 0, "judged_queries": 0}
    assert list(SearchLog.objects.values_list("pk", flat=True)) == [
        SearchLog.objects.get(pk=recent).pk
    ]
    assert SearchEvent.objects.get().search_id == SearchLog.objects.get().pk


def test_retention_none_keeps_everything_and_the_command_can_say_days(client, searching, feedback):
    feedback(RETENTION_DAYS=None)
    old = search_and_click(client)
    age(old, 1000)
    assert feedback_purge() == {"searches": 0, "events": 0, "pairs": 0, "judged_queries": 0}
    out = io.StringIO()
    call_command("sbert_feedback", "purge", "--days", "365", stdout=out)
    assert "Deleted 1 searches and 1 events" in out.getvalue()
    assert not SearchLog.objects.exists() and not SearchEvent.objects.exists()


def test_the_beat_entry_names_the_purge_task():
    entry = feedback_purge_schedule()
    assert entry["task"] == FEEDBACK_PURGE_TASK == feedback_purge.name
    assert entry["schedule"] == 86400.0 and entry["options"]["expires"] == 86400.0


def test_forgetting_a_user_deletes_their_searches_and_events_only(
    client, searching, django_user_model
):
    user = django_user_model.objects.create_user("forget-me")
    client.force_login(user)
    search_and_click(client)
    search_and_click(client, "a dog")
    client.logout()
    kept = search_and_click(client)  # another visitor
    assert forget_user(user) == (2, 2, 0, 0)
    assert list(SearchLog.objects.values_list("pk", flat=True)) == [
        SearchLog.objects.get(pk=kept).pk
    ]
    assert SearchEvent.objects.count() == 1
    assert not SearchLog.objects.filter(client=client_key_for_user(user)).exists()


def test_forgetting_by_the_command_by_user_and_by_session(client, searching, django_user_model):
    user = django_user_model.objects.create_user("gone")
    client.force_login(user)
    search_and_click(client)
    client.logout()
    session = client.session
    session["seen"] = True
    session.save()  # an anonymous visitor with a session
    search_and_click(client, "a dog")
    assert SearchLog.objects.filter(client=client_key_for_session(session.session_key)).exists()
    out = io.StringIO()
    call_command("sbert_feedback", "forget", "--user", str(user.pk), stdout=out)
    assert "Deleted 1 searches and 1 events" in out.getvalue()
    call_command("sbert_feedback", "forget", "--session", session.session_key, stdout=out)
    assert not SearchLog.objects.exists() and not SearchEvent.objects.exists()
