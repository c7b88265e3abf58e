"""Export: searches and events as OpenSearch User Behavior Insights JSON lines, from the
command and from the admin."""

from __future__ import annotations

import io
import json
from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission
from django.core.management import CommandError, call_command
from django.utils import timezone

from django_sbert.models import SearchEvent, SearchLog
from tests.feedback.conftest import search_url

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.feedback.urls")]

QUERY_FIELDS = {
    "query_id",
    "user_query",
    "query",
    "client_id",
    "timestamp",
    "query_response_id",
    "query_response_hit_ids",
    "query_attributes",
    "application",
    "object_id_field",
}
EVENT_FIELDS = {
    "action_name",
    "query_id",
    "client_id",
    "timestamp",
    "event_attributes",
    "application",
    "message_type",
}


@pytest.fixture
def history(client, articles, registered, feedback) -> list[dict]:
    """Two logged searches with a click and a conversion on the first."""
    feedback(CONVERSIONS=["add_to_cart"])
    registered()
    bodies = [client.get(search_url(q, k=4)).json() for q in ("interest rates", "a dog")]
    token = bodies[0]["results"][2]["click_token"]
    for kind in ("click", "add_to_cart"):
        data = json.dumps({"token": token, "kind": kind, "dwell_ms": 900})
        response = client.post("/api/sbert/events/", data, content_type="application/json")
        assert response.status_code == 202
    return bodies


def lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines()]


def test_the_command_writes_ubi_queries_and_events(history, tmp_path):
    queries, events = tmp_path / "q.jsonl", tmp_path / "e.jsonl"
    call_command("sbert_feedback", "export", "--queries", str(queries), "--events", str(events))
    exported = lines(queries.read_text())
    assert [q["query_id"] for q in exported] == [b["search_id"] for b in history]
    first = exported[0]
    assert set(first) == QUERY_FIELDS
    assert first["user_query"] == first["query"] == "interest rates"
    assert first["query_response_hit_ids"] == [str(r["id"]) for r in history[0]["results"]]
    assert first["client_id"] == SearchLog.objects.get(pk=first["query_id"]).client
    assert first["timestamp"].endswith("Z")
    assert first["query_attributes"]["mode"] == "vector"
    clicked = history[0]["results"][2]
    exported_events = lines(events.read_text())
    assert [e["action_name"] for e in exported_events] == ["click", "add_to_cart"]
    for event in exported_events:
        assert set(event) == EVENT_FIELDS
        assert event["query_id"] == history[0]["search_id"]
        assert event["client_id"] == first["client_id"]
        assert event["event_attributes"]["position"]["ordinal"] == 3
        assert event["event_attributes"]["object"]["object_id"] == str(clicked["id"])
        assert event["event_attributes"]["dwell_ms"] == 900
        assert event["application"] == "testapp.Article"


def test_the_command_keeps_the_last_days_and_writes_to_stdout(history):
    SearchLog.objects.filter(pk=history[1]["search_id"]).update(
        created_at=timezone.now() - timedelta(days=10)
    )
    out = io.StringIO()
    call_command("sbert_feedback", "export", "--days", "7", "--queries", "-", stdout=out)
    assert [q["query_id"] for q in lines(out.getvalue())] == [history[0]["search_id"]]
    with pytest.raises(CommandError, match="--queries"):
        call_command("sbert_feedback", "export")


def test_staff_with_the_view_permission_download_ubi_from_the_admin(
    client, history, django_user_model
):
    staff = django_user_model.objects.create_user("analyst", is_staff=True)
    client.force_login(staff)
    url = "/admin/django_sbert/searchlog/"
    action = {"action": "download_ubi", "_selected_action": [b["search_id"] for b in history]}
    assert client.get(url).status_code == 403  # no permission yet
    assert client.post(url, action).status_code == 403
    staff.user_permissions.add(
        Permission.objects.get(codename="view_searchlog"),
        Permission.objects.get(codename="view_searchevent"),
    )
    assert client.get(url).status_code == 200
    response = client.post(url, action)
    assert response.status_code == 200
    assert response["Content-Disposition"].startswith('attachment; filename="ubi_queries-')
    exported = lines(b"".join(response.streaming_content).decode())
    assert sorted(q["query_id"] for q in exported) == sorted(b["search_id"] for b in history)
    events = client.post(
        "/admin/django_sbert/searchevent/",
        {
            "action": "download_ubi",
            "_selected_action": SearchEvent.objects.values_list("pk", flat=True),
        },
    )
    kinds = [e["action_name"] for e in lines(b"".join(events.streaming_content).decode())]
    assert kinds == ["click", "add_to_cart"]
    # read-only: no add or change pages
    entry = SearchLog.objects.first()
    assert client.get("/admin/django_sbert/searchlog/add/").status_code == 403
    change = client.post(f"/admin/django_sbert/searchlog/{entry.pk}/change/", {"query": "x"})
    assert change.status_code in (200, 403)
    entry.refresh_from_db()
    assert entry.query != "x"
