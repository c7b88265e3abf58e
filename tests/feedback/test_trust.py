"""Learning you can trust: a visitor is a network, not a free client key; no visitor writes both
a run's lesson and its exam; a scripted run is flagged and never auto-promoted; forgetting and
the purge reach the pairs; pairs from behaviour are bounded.

The searches go through the REST API over Django's test client, without cookies, from several
REMOTE_ADDRs, as a script would send them; the loop and the pairs read them from PostgreSQL."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.core.cache import cache
from django.utils import timezone

from django_sbert.evaluation.judgments import from_eval_pairs
from django_sbert.feedback import analytics, client_key_for_session, forget_client, loop
from django_sbert.feedback import pairs as pairs_module
from django_sbert.feedback.evidence import attack_signals, independent_eval
from django_sbert.feedback.pairs import behaviour_pairs, keep_newest
from django_sbert.feedback.retention import purge_expired
from django_sbert.feedback.visitors import network_key, network_of
from django_sbert.models import (
    JudgedQuery,
    JudgmentList,
    PairEvidence,
    SearchEvent,
    SearchLog,
    TrainingPair,
    TrainingRun,
)
from tests.feedback.behaviour import at, search
from tests.feedback.conftest import search_url

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.feedback.urls")]

# Four addresses on four networks, as in the review's script.
SCRIPT_ADDRESSES = ("198.51.100.7", "203.0.113.9", "192.0.2.44", "100.64.3.2")


@pytest.fixture
def site(articles, registered, feedback):
    """The API over the eight test articles, the log on, the loop's other settings at their
    defaults but a smaller LOOP_MIN_PAIRS, AUTO_PROMOTE on."""
    registered()
    feedback(AUTO_PROMOTE=True, LOOP_MIN_PAIRS=10, LOOP_DAYS=None)
    return articles


def search_and_click_last(client, query: str, address: str) -> None:
    """A cookieless search from ``address`` whose last result is clicked (and reported)."""
    body = client.get(search_url(query, k=8), REMOTE_ADDR=address).json()
    token = body["results"][-1]["click_token"]
    answer = client.post(
        "/api/sbert/events/",
        json.dumps({"token": token}),
        content_type="application/json",
        REMOTE_ADDR=address,
    )
    assert answer.status_code == 202, answer.content


def spread_over_days(first_day: str) -> None:
    """Put the searches logged so far on two days, in the order they came: the first half on
    ``first_day``, the rest on the next (each click a few seconds after its search)."""
    logs = list(SearchLog.objects.order_by("created_at", "pk"))
    start = at(first_day)
    for number, log in enumerate(logs):
        moment = start + timedelta(days=number * 2 // len(logs), seconds=number)
        SearchLog.objects.filter(pk=log.pk).update(created_at=moment)
        SearchEvent.objects.filter(search=log).update(created_at=moment + timedelta(seconds=4))


def test_one_script_from_four_addresses_gets_no_run_and_nothing_promoted(client, site):
    """The review's scenario: one cookieless script, four addresses, 40 queries searched twice a
    day for two days, the last result clicked each time. Its 160 searches are 160 client keys
    but four networks, each clicking the same 40 chosen rows: their clicks are set aside, no
    pair is made, no run starts."""
    queries = [f"scripted query {n}" for n in range(40)]
    for day in range(2):
        for n, query in enumerate(queries):
            for turn in range(2):
                search_and_click_last(client, query, SCRIPT_ADDRESSES[(2 * day + turn + n) % 4])
    assert SearchLog.objects.count() == 160 and SearchEvent.objects.count() == 160
    spread_over_days("2026-03-02")

    summary = analytics.summary(analytics.Window.days(3650))
    assert (summary["visitors"], summary["networks"]) == (160, 4)

    report = loop.tick()
    assert report.pairs.heavy_networks == 4
    assert report.pairs.created == 0 and report.pairs.set_aside == 80  # 40 train + 40 eval
    assert report.started == {} and not TrainingRun.objects.exists()
    assert not TrainingPair.objects.exists()


def test_visitors_on_many_networks_still_make_pairs(client, site, feedback):
    """The same clicks from honest visitors: each query searched from networks of its own."""
    feedback(MIN_RELEVANCE=0)  # eight results and a few searches: too few for the click model
    for n in range(12):
        for turn in range(2):
            search_and_click_last(client, f"honest query {n}", f"10.{n}.{turn}.5")
    spread_over_days("2026-03-02")
    report = behaviour_pairs(min_relevance=0)
    assert report.heavy_networks == 0
    assert (report.train, report.eval) == (6, 6)  # queries 0-5 on the first day, 6-11 after
    evidence = PairEvidence.objects.filter(pair__split="train")
    assert evidence.count() == 12  # two visitors a pair
    networks = {network_key_for(f"10.{n}.{turn}.5") for n in range(6) for turn in range(2)}
    assert {e.network for e in evidence} == networks


def network_key_for(address: str) -> str:
    from django.test import RequestFactory

    return network_key(RequestFactory().get("/", REMOTE_ADDR=address))


def test_a_network_is_a_slash_24_or_a_slash_48_and_only_its_keyed_hash_is_stored(
    client, site, settings
):
    assert network_of("203.0.113.9") == network_of("203.0.113.250") == "203.0.113.0/24"
    assert network_of("::ffff:203.0.113.9") == "203.0.113.0/24"
    assert network_of("2001:db8:aa:1::7") == network_of("2001:db8:aa:ffff::1") == "2001:db8:aa::/48"
    assert network_of("not an address") == ""
    assert network_key_for("203.0.113.9") == network_key_for("203.0.113.77")
    assert network_key_for("203.0.113.9") != network_key_for("203.0.114.9")

    client.get(search_url("rates", k=3), REMOTE_ADDR="203.0.113.9")
    (log,) = SearchLog.objects.all()
    assert log.network == network_key_for("203.0.113.9") and len(log.network) == 32
    assert "203.0.113" not in json.dumps(list(SearchLog.objects.values()), default=str)

    # Behind proxies, the address NUM_PROXIES names: X-Forwarded-For's, not the proxy's.
    settings.SBERT = {**settings.SBERT, "API": {"NUM_PROXIES": 1}}
    client.get(
        search_url("rates", k=3), REMOTE_ADDR="10.0.0.1", HTTP_X_FORWARDED_FOR="198.51.100.7"
    )
    latest = SearchLog.objects.order_by("-created_at").first()
    assert latest.network == network_key_for("198.51.100.7")


def test_client_keys_from_one_network_count_as_one_visitor(client, site, feedback):
    """160 cookieless searches from one address: 160 client keys, one visitor. With two visitors
    a pair (the docs' recipe for "no visitor makes a pair alone") nothing is made."""
    feedback(MIN_CLIENTS=2, MIN_RELEVANCE=0.5)
    for n in range(80):
        search_and_click_last(client, f"query {n % 4}", "198.51.100.7")
        search_and_click_last(client, f"query {n % 4}", "198.51.100.8")
    spread_over_days("2026-03-02")
    report = behaviour_pairs()
    assert report.created == 0 and report.too_few_clients == 8  # 4 queries, 2 splits


def test_the_logging_budget_is_per_network_too(client, site, feedback):
    """Sessions cost a script nothing either: past NETWORK_RATE_FACTOR clients' budgets, a
    network's searches are served but not logged."""
    feedback(rates={"logging": "2/minute"})
    cache.clear()
    for n in range(25):
        client.cookies.clear()
        session = client.session
        session["visitor"] = n
        session.save()
        assert client.get(search_url("rates", k=3), REMOTE_ADDR="203.0.113.9").status_code == 200
    assert SearchLog.objects.count() == 20  # 2/minute x 10 for the network


def two_windows(queries, rows, *, train_clients, eval_clients) -> None:
    """Each query's row clicked on three train days and one eval day by the given clients
    (as (client, network) pairs), two visitors per day."""
    for day in ("2026-02-01", "2026-02-02", "2026-02-03", "2026-02-04"):
        who = eval_clients if day == "2026-02-04" else train_clients
        for query, row in zip(queries, rows, strict=False):
            for client_key, network in who:
                log = search(
                    query, [row.pk], clicks=[row.pk], client=f"{client_key}-{day}", when=at(day)
                )
                SearchLog.objects.filter(pk=log.pk).update(network=network)


def test_eval_pairs_come_only_from_visitors_who_made_no_train_pair(site, feedback):
    feedback(MIN_RELEVANCE=0, LOOP_MIN_PAIRS=2, LOOP_DAYS=None)
    rows = site[:6]
    queries = [f"q{n}" for n in range(6)]
    # Queries 0-2: the same two networks click in both windows (one script's lesson and exam);
    # queries 3-5: other networks in the eval window.
    two_windows(queries[:3], rows[:3], train_clients=[("a", "n1"), ("b", "n2")],
                eval_clients=[("a", "n1"), ("b", "n2")])  # fmt: skip
    two_windows(queries[3:], rows[3:], train_clients=[("c", "n3"), ("d", "n4")],
                eval_clients=[("e", "n5"), ("f", "n6")])  # fmt: skip
    report = loop.tick()
    run = TrainingRun.objects.get(pk=report.started["default"])
    eval_queries = set(
        TrainingPair.objects.filter(pk__in=run.data["eval"]).values_list("text_a", flat=True)
    )
    assert eval_queries == {"q3", "q4", "q5"}
    train = TrainingPair.objects.filter(split="train").values_list("pk", flat=True)
    every_eval = TrainingPair.objects.filter(split="eval").values_list("pk", flat=True)
    assert len(every_eval) == 6 and len(independent_eval(train, every_eval)) == 3


def test_a_run_whose_only_eval_pairs_are_its_train_visitors_does_not_start(site, feedback):
    feedback(MIN_RELEVANCE=0, LOOP_MIN_PAIRS=2, LOOP_DAYS=None)
    two_windows(["q0", "q1"], site[:2], train_clients=[("a", "n1")], eval_clients=[("b", "n1")])
    report = loop.tick()
    assert report.started == {}
    assert "no eval pairs from visitors who made no train pair" in report.waiting["default"]


def scripted_pairs(count: int, *, position: int = 8, networks: int = 3) -> list[int]:
    """``count`` train pairs with evidence as a script leaves it: the same few networks, one
    low position, all in one hour."""
    moment = timezone.now() - timedelta(days=1)
    pks = []
    for n in range(count):
        pair = TrainingPair.objects.create(
            text_a=f"q{n}", text_b=f"d{n}", split="train", source="events:testapp.Article.x:"
        )
        for k in range(networks):
            PairEvidence.objects.create(
                pair=pair, object_pk=str(n), client=f"c{n}-{k}", network=f"net{k}",
                position=position, clicked_at=moment + timedelta(seconds=n),
            )  # fmt: skip
        pks.append(pair.pk)
    return pks


def test_attack_signals_name_what_a_script_leaves_and_honest_pairs_show_none(db):
    flags = attack_signals(scripted_pairs(30))
    assert [flag.split(":")[0] for flag in flags] == ["concentrated", "low positions", "burst"]
    assert "30 of 30 pairs were clicked only from networks that made 3 pairs or more" in flags[0]

    TrainingPair.objects.all().delete()
    moment = timezone.now() - timedelta(days=30)
    honest = []
    for n in range(30):
        pair = TrainingPair.objects.create(text_a=f"q{n}", text_b=f"d{n}", split="train")
        PairEvidence.objects.create(
            pair=pair, object_pk=str(n), client=f"v{n}", network=f"n{n}",
            position=1 + n % 4, clicked_at=moment + timedelta(hours=5 * n),
        )  # fmt: skip
        honest.append(pair.pk)
    assert attack_signals(honest) == []
    # Rows nobody clicked before the loop's previous run, once there is one.
    assert attack_signals(honest, since=moment)[0].startswith("new rows: 30 of 30")


def test_a_flagged_run_is_not_auto_promoted_and_the_admin_says_why(site, admin_client):
    from tests.feedback.test_loop import finished_run

    candidate = finished_run(0.5, 0.95)
    run = candidate.run
    run.data = {**run.data, "loop": {"new_pairs": 30, "flags": ["burst: 30 of 30 visits"]}}
    run.save(update_fields=["data"])
    (decision,) = loop.decide_finished().values()
    assert decision.startswith("not promoted: its pairs look scripted (burst: 30 of 30 visits)")
    candidate.refresh_from_db()
    assert candidate.status == "candidate"
    page = admin_client.get("/admin/django_sbert/searchlog/analytics/").content.decode()
    assert "flagged: burst: 30 of 30 visits" in page
    assert "guard set no visitor writes" in page


def sessions_click(client, query: str, session_keys: list[str], address_of) -> None:
    for n, _ in enumerate(session_keys):
        client.cookies.clear()
        session = client.session
        session["n"] = n
        session.save()
        session_keys[n] = session.session_key
        search_and_click_last(client, query, address_of(n))


def test_forgetting_a_visitor_deletes_the_pairs_and_judgments_they_helped_make(
    client, site, feedback
):
    feedback(MIN_RELEVANCE=0)
    forgotten_keys = [""]
    kept_keys = ["", ""]
    sessions_click(client, "my name and street", forgotten_keys, lambda n: "198.51.100.7")
    sessions_click(client, "another query", kept_keys, lambda n: f"10.0.{n}.1")
    sessions_click(client, "my name and street", ["", ""], lambda n: f"10.1.{n}.1")
    spread_over_days("2026-03-02")
    behaviour_pairs(min_relevance=0)
    assert set(TrainingPair.objects.values_list("text_a", flat=True)) == {
        "my name and street",
        "another query",
    }
    graded = JudgmentList.objects.create(
        name="from clicks", content_type_id=_article_type(), field="embedding"
    )
    from_eval_pairs(graded)
    assert JudgedQuery.objects.filter(text="my name and street").exists()

    deleted = forget_client(client_key_for_session(forgotten_keys[0]))
    # its train pair, and the eval pair of the same text two others made
    assert deleted.searches == 1 and deleted.pairs == 2 and deleted.judged_queries == 1
    assert not TrainingPair.objects.filter(text_a="my name and street").exists()
    assert not JudgedQuery.objects.filter(text="my name and street").exists()
    assert TrainingPair.objects.filter(text_a="another query").exists()


def _article_type() -> int:
    from django.contrib.contenttypes.models import ContentType

    from tests.testapp.models import Article

    return ContentType.objects.get_for_model(Article).pk


def test_the_purge_deletes_the_pairs_whose_clicks_are_all_past_retention(site, feedback):
    feedback(MIN_RELEVANCE=0, RETENTION_DAYS=30)
    row = site[0]
    old, recent = timezone.now() - timedelta(days=40), timezone.now() - timedelta(days=3)
    for n, when in enumerate([old, old + timedelta(days=1), recent, recent + timedelta(days=1)]):
        query = "old query" if n < 2 else "recent query"
        search(query, [row.pk], clicks=[row.pk], client=f"v{n}", when=when)
    search("old query", [row.pk], clicks=[row.pk], client="late", when=recent)  # clicked again
    search("gone query", [row.pk], clicks=[row.pk], client="x", when=old)
    search("gone query", [row.pk], clicks=[row.pk], client="y", when=old + timedelta(days=1))
    behaviour_pairs(min_relevance=0)
    made = set(TrainingPair.objects.values_list("text_a", flat=True))
    assert made == {"old query", "recent query", "gone query"}
    TrainingPair.objects.create(  # made before pairs recorded their visitors, long ago
        text_a="unrecorded", text_b="d", source="events:testapp.Article.embedding:x"
    )
    TrainingPair.objects.filter(text_a="unrecorded").update(created_at=old)
    deleted = purge_expired()
    assert deleted.pairs == 2  # gone query's pair, the unrecorded one
    assert set(TrainingPair.objects.values_list("text_a", flat=True)) == {
        "old query",
        "recent query",
    }


def test_pairs_from_behaviour_are_bounded_to_the_newest(site, feedback, monkeypatch):
    feedback(MIN_RELEVANCE=0)
    row = site[0]
    for n in range(6):
        for day in ("2026-02-01", "2026-02-02"):
            search(f"query {n}", [row.pk], clicks=[row.pk], client=f"v{n}-{day}", when=at(day))
    monkeypatch.setattr(pairs_module, "MAX_PAIRS", 4)
    report = behaviour_pairs(min_relevance=0)
    assert report.created == 12
    assert TrainingPair.objects.count() == 4
    newest = sorted(TrainingPair.objects.values_list("pk", flat=True))
    assert keep_newest("events:", limit=2) == 2
    assert sorted(TrainingPair.objects.values_list("pk", flat=True)) == newest[2:]


def test_a_click_just_inside_the_window_on_a_search_before_it_goes_through_the_click_model(
    site,
):
    """Thirty visitors were shown row a first and passed it by; one chance click on it, on a
    search logged just before the window read, is a chance click, not a wanted row."""
    a, b = site[0], site[1]
    start = at("2026-02-10")
    for n in range(30):
        when = start + timedelta(hours=n)
        search("rates", [a.pk, b.pk], clicks=[b.pk], client=f"v{n}", when=when)
    edge = search("rates", [a.pk, b.pk], client="late", when=start - timedelta(minutes=1))
    SearchEvent.objects.create(
        search=edge, object_pk=str(a.pk), position=1, kind="click", client="late",
        created_at=start + timedelta(seconds=30),
    )  # fmt: skip
    report = behaviour_pairs(since=start, min_relevance=0.9)
    texts = {p.text_b for p in TrainingPair.objects.all()}
    assert report.unlikely >= 1
    assert not any(a.title in text for text in texts)
