"""Issue 67's items on the search log and its events, each against real PostgreSQL through the
Django test client: the filters digest keyed by SECRET_KEY (item 3), Unicode digits refused
with 400 and the token checked before the dwell time (item 4), the admin's UBI download
streamed with a row cap (item 7), conversions that do not fit their column refused at start-up
(item 8), and a log that is never purged warned of and shown by ``sbert_status`` (item 9)."""

from __future__ import annotations

import hashlib
import io
import json
from datetime import timedelta

import pytest
from celery import current_app
from django.contrib.auth.models import Permission
from django.core import checks
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.http import StreamingHttpResponse
from django.utils import timezone

from django_sbert.admin import searchlog
from django_sbert.celery import feedback_purge_schedule
from django_sbert.evaluation.run import EvaluationError, resolve_version
from django_sbert.feedback import make_token
from django_sbert.feedback.log import filters_digest
from django_sbert.models import SearchEvent, SearchLog
from tests.feedback.test_export import history  # noqa: F401

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.feedback.urls")]

CLICK = "/sbert/click/"


def test_the_filters_digest_is_an_hmac_keyed_by_the_secret_key(client, articles, log_on, settings):
    response = client.get("/search/", {"q": "interest rates", "category": "c3"})
    assert response.status_code == 200
    entry = SearchLog.objects.get()
    filters = {"category": ["c3"]}
    guess = json.dumps(filters, sort_keys=True)
    # One guess of the values no longer matches the stored digest...
    assert entry.filters_digest != hashlib.sha256(guess.encode()).hexdigest()
    assert len(entry.filters_digest) == 64
    # ...which is the same for the same filters, and another with another SECRET_KEY.
    assert entry.filters_digest == filters_digest(filters)
    settings.SECRET_KEY = "another secret key, long enough for the check framework" * 2
    assert filters_digest(filters) != entry.filters_digest


def test_unicode_digits_answer_400_and_the_token_is_checked_before_the_dwell_time(
    client, articles, log_on, settings
):
    # sbert/click/ without a token, with a dwell time int() cannot read: the token's message.
    response = client.post(CLICK, {"dwell_ms": "²"})
    assert response.status_code == 400 and "token" in response.json()["detail"]
    response = client.post(CLICK, {"token": "forged", "dwell_ms": "²"})
    assert response.status_code == 400 and "dwell_ms" not in response.json()["detail"]
    # With a good token: 400 naming dwell_ms for Unicode digits, 202 for ASCII ones.
    client.get("/search/", {"q": "interest rates"})
    entry = SearchLog.objects.get()
    token = make_token(entry.pk, entry.results[0][0], 1)
    for bad in ("²", "١٢", "9" * 1000):
        response = client.post(CLICK, {"token": token, "dwell_ms": bad})
        assert response.status_code == 400 and "dwell_ms" in response.json()["detail"], bad
    # More digits than int() reads (4,300) make a body over the endpoint's 4 KB: 413.
    assert client.post(CLICK, {"token": token, "dwell_ms": "9" * 5000}).status_code == 413
    assert client.post(CLICK, {"token": token, "dwell_ms": "1200"}).status_code == 202
    assert SearchEvent.objects.get().dwell_ms == 1200
    # SuggestView's ?k=: 400 with a message, not a 500.
    settings.ROOT_URLCONF = "tests.views.suggest_urls"
    for bad in ("²", "٣", "9" * 5000):
        response = client.get("/suggest/", {"q": "interest", "k": bad})
        assert response.status_code == 400 and "k must be" in response.json()["error"], bad
    assert client.get("/suggest/", {"q": "interest", "k": "2"}).status_code == 200
    # An evaluation's version given as Unicode digits: the message, not a ValueError.
    for bad in ("²", "9" * 5000):
        with pytest.raises(EvaluationError, match="has no version"):
            resolve_version("default", bad)


def test_the_admin_streams_the_ubi_download_with_a_row_cap(
    client,
    history,  # noqa: F811
    django_user_model,
    monkeypatch,
):
    staff = django_user_model.objects.create_user("analyst", is_staff=True)
    staff.user_permissions.add(*Permission.objects.filter(codename__in=["view_searchlog"]))
    client.force_login(staff)
    url = "/admin/django_sbert/searchlog/"
    selected = [b["search_id"] for b in history]
    monkeypatch.setattr(searchlog, "EXPORT_CHUNK", 1)  # one row a query: the chunks are joined
    response = client.post(url, {"action": "download_ubi", "_selected_action": selected})
    assert isinstance(response, StreamingHttpResponse)
    exported = [json.loads(line) for line in b"".join(response.streaming_content).splitlines()]
    oldest_first = list(SearchLog.objects.order_by("created_at", "pk").values_list("pk", flat=True))
    assert [q["query_id"] for q in exported] == [str(pk) for pk in oldest_first]
    assert "oldest" not in client.get(url).content.decode()  # under the cap: no warning
    # Past the cap: the oldest MAX_EXPORT_ROWS rows, and a warning on the next page.
    monkeypatch.setattr(searchlog, "MAX_EXPORT_ROWS", 1)
    response = client.post(url, {"action": "download_ubi", "_selected_action": selected})
    exported = [json.loads(line) for line in b"".join(response.streaming_content).splitlines()]
    assert [q["query_id"] for q in exported] == [str(oldest_first[0])]
    assert "holds the oldest 1 of the selected entries" in client.get(url).content.decode()


def test_conversion_kinds_longer_than_the_column_are_a_check_error(feedback):
    fits, overlong = "k" * 40, "add_to_cart_" + "x" * 30
    feedback(CONVERSIONS=["purchase", fits])
    call_command("check", "--tag", "django_sbert", stdout=io.StringIO(), stderr=io.StringIO())
    feedback(CONVERSIONS=["purchase", overlong])
    with pytest.raises(SystemCheckError, match="django_sbert.E014") as raised:
        call_command("check", "--tag", "django_sbert", stdout=io.StringIO(), stderr=io.StringIO())
    assert repr(overlong) in str(raised.value) and "40 characters" in str(raised.value)


@pytest.fixture
def beat_schedule():
    """The current Celery app's beat_schedule, emptied for the test and put back after."""
    saved = dict(current_app.conf.beat_schedule or {})
    current_app.conf.beat_schedule = {}
    yield current_app.conf
    current_app.conf.beat_schedule = saved


def test_a_log_never_purged_is_warned_of_and_sbert_status_shows_its_oldest_search(
    client, articles, feedback, settings, beat_schedule
):
    def w032() -> list[checks.CheckMessage]:
        found = checks.run_checks(include_deployment_checks=True, tags=["django_sbert"])
        return [m for m in found if m.id == "django_sbert.W032"]

    feedback(LOG=False)
    assert w032() == []  # nothing logged: nothing to purge
    feedback()
    (warning,) = w032()
    assert "SILENCED_SYSTEM_CHECKS" in warning.hint and "feedback_purge_schedule" in warning.hint
    out = io.StringIO()
    call_command("check", "--deploy", "--tag", "django_sbert", stdout=out, stderr=out)
    assert "django_sbert.W032" in out.getvalue()
    settings.SILENCED_SYSTEM_CHECKS = ["django_sbert.W032"]
    out = io.StringIO()
    call_command("check", "--deploy", "--tag", "django_sbert", stdout=out, stderr=out)
    assert "django_sbert.W032" not in out.getvalue()
    # A beat entry for the purge, in the Celery app or in CELERY_BEAT_SCHEDULE: no warning.
    beat_schedule.beat_schedule = {"purge": feedback_purge_schedule()}
    assert w032() == []
    beat_schedule.beat_schedule = {}
    settings.CELERY_BEAT_SCHEDULE = {"sbert-feedback-purge": feedback_purge_schedule()}
    assert w032() == []
    feedback(RETENTION_DAYS=None)
    del settings.CELERY_BEAT_SCHEDULE
    assert w032() == []  # kept until deleted, by choice

    # sbert_status: the oldest search's age, and that it is past the retention.
    feedback(RETENTION_DAYS=180)
    out = io.StringIO()
    call_command("sbert_status", "--no-progress", stdout=out)
    assert "Search log: empty." in out.getvalue()
    client.get("/search/", {"q": "interest rates"})
    SearchLog.objects.update(created_at=timezone.now() - timedelta(days=400, hours=1))
    out = io.StringIO()
    call_command("sbert_status", "--no-progress", stdout=out)
    assert "the oldest search is 400 days old" in out.getvalue()
    assert "past RETENTION_DAYS (180)" in out.getvalue()
