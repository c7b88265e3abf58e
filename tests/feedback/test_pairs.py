"""Training pairs from behaviour: evidence thresholds, normalised queries merged, the split by
time, negatives from what visitors skipped or never reached, the source, and re-runs."""

from __future__ import annotations

import io
import random
from datetime import date

import pytest
from django.core.management import CommandError, call_command

from django_sbert.feedback.pairs import behaviour_pairs, eval_window
from django_sbert.models import TrainingPair
from tests.feedback.behaviour import at, search
from tests.testapp.models import Article

pytestmark = pytest.mark.django_db


@pytest.fixture
def rows():
    """Five articles; ``text[n]`` is what the EmbeddingField encodes for article n."""
    articles = [
        Article.objects.create(title=f"title {n}", body=f"body of article {n}") for n in range(5)
    ]
    return articles


def text(article: Article) -> str:
    return f"{article.title}\n{article.body}"


def test_a_pair_needs_clicks_from_enough_distinct_visitors(rows):
    # min_relevance=0: where the clicks were is not the point here (it has its own tests)
    a, b = rows[0], rows[1]
    # b: two clicks by one visitor on two days; a: one click each by two visitors
    search("rates", [a.pk, b.pk], clicks=[b.pk], client="same", when=at("2026-01-01"))
    search("rates", [a.pk, b.pk], clicks=[b.pk], client="same", when=at("2026-01-02"))
    search("rates", [a.pk, b.pk], clicks=[a.pk], client="c1", when=at("2026-01-01"))
    search("rates", [a.pk, b.pk], clicks=[a.pk], client="c2", when=at("2026-01-02"))
    report = behaviour_pairs(min_clients=2, min_relevance=0, eval_share=0.1, negatives="mined")
    assert report.days == [date(2026, 1, 1), date(2026, 1, 2)]
    # two days: the second is the eval window, so no pair has two visitors in one window
    assert report.created == 0 and report.too_few_clients == 4
    report = behaviour_pairs(min_clients=1, min_relevance=0, negatives="mined")
    assert report.created == 4  # a and b, in each window
    TrainingPair.objects.all().delete()
    # one window (one day of clicks): only a has two visitors
    search("rates", [a.pk, b.pk], clicks=[a.pk], client="c3", when=at("2026-01-05"))
    search("rates", [a.pk, b.pk], clicks=[a.pk], client="c4", when=at("2026-01-05"))
    search("rates", [a.pk, b.pk], clicks=[b.pk], client="c3", when=at("2026-01-05", 14))
    report = behaviour_pairs(at("2026-01-05", 0), min_clients=2, min_relevance=0, negatives="mined")
    assert report.created == 1 and report.too_few_clients == 1
    pair = TrainingPair.objects.get()
    assert (pair.text_a, pair.text_b, pair.split) == ("rates", text(a), "train")


def test_queries_are_merged_by_their_normalised_text(rows):
    a = rows[0]
    search("Bank Rates", [a.pk], clicks=[a.pk], client="c1", when=at("2026-01-01"))
    search("  bank   RATES ", [a.pk], clicks=[a.pk], client="c2", when=at("2026-01-01", 15))
    report = behaviour_pairs(min_clients=2, min_relevance=0, negatives="mined")
    assert report.created == 1
    assert TrainingPair.objects.get().text_a == "bank rates"


def test_the_most_recent_tenth_of_the_days_is_the_eval_split(rows):
    a = rows[0]
    days = [f"2026-01-{d:02d}" for d in range(1, 21)]  # 20 days: the last 2 are eval
    for n, day in enumerate(days):
        for client in ("c1", "c2"):  # two visitors a day (two who click 20 pairs: a script)
            search(f"query {n}", [a.pk], clicks=[a.pk], client=f"{client}-{day}", when=at(day))
    assert eval_window([date(2026, 1, d) for d in range(1, 21)], 0.1) == date(2026, 1, 19)
    report = behaviour_pairs(min_clients=2, min_relevance=0, negatives="mined", eval_share=0.1)
    assert (report.train, report.eval) == (18, 2)
    eval_queries = set(TrainingPair.objects.filter(split="eval").values_list("text_a", flat=True))
    assert eval_queries == {"query 18", "query 19"}
    assert report.eval_from == date(2026, 1, 19)


def test_a_re_run_makes_no_duplicate_and_the_source_says_where_pairs_came_from(rows):
    a, b = rows[0], rows[1]
    for client in ("c1", "c2"):
        search("rates", [a.pk, b.pk], clicks=[b.pk], client=client, when=at("2026-01-03"))
    first = behaviour_pairs(min_clients=2, negatives="mined")
    assert first.created == 1
    pair = TrainingPair.objects.get()
    assert pair.source == "events:testapp.Article.embedding:2026-01-03..2026-01-03"
    again = behaviour_pairs(min_clients=2, negatives="mined")
    assert (again.created, again.existing) == (0, 1)
    # more clicks later: only the new pair is made, under the longer range
    for client in ("c3", "c4"):
        search("storm", [a.pk], clicks=[a.pk], client=client, when=at("2026-01-04"))
    later = behaviour_pairs(min_clients=2, negatives="mined", eval_share=0.1)
    assert later.created == 1 and later.existing == 1
    new = TrainingPair.objects.exclude(pk=pair.pk).get()
    assert new.text_a == "storm" and new.split == "eval"
    assert new.source == "events:testapp.Article.embedding:2026-01-03..2026-01-04"
    assert TrainingPair.objects.count() == 2


def test_negatives_from_behaviour_unexamined_or_skipped_never_a_clicked_row(rows):
    r0, r1, r2, r3, r4 = rows
    shown = [r0.pk, r1.pk, r2.pk, r3.pk, r4.pk]
    # both visitors skip r0 and click r1; r3 is also clicked by someone for the same query
    search("rates", shown, clicks=[r1.pk], client="c1", when=at("2026-01-01"))
    search("rates", shown, clicks=[r1.pk], client="c2", when=at("2026-01-01", 13))
    search("rates", shown, clicks=[r3.pk], client="c3", when=at("2026-01-01", 14))
    behaviour_pairs(min_clients=2, min_relevance=0, negatives="unexamined")
    pair = TrainingPair.objects.get()
    # below the last click (position 2): r2 is the best-placed, and nobody clicked it
    assert (pair.text_b, pair.text_negative) == (text(r1), text(r2))
    TrainingPair.objects.all().delete()
    behaviour_pairs(min_clients=2, min_relevance=0, negatives="skipped")
    assert TrainingPair.objects.get().text_negative == text(r0)
    TrainingPair.objects.all().delete()
    behaviour_pairs(min_clients=2, min_relevance=0, negatives="mined")
    assert TrainingPair.objects.get().text_negative == ""


def test_a_negative_falls_back_on_the_other_kind_and_a_pair_without_any_is_left_out(rows):
    r0, r1 = rows[0], rows[1]
    for client in ("c1", "c2"):  # clicked at position 1: nothing above it
        search("first", [r0.pk, r1.pk], clicks=[r0.pk], client=client, when=at("2026-01-01"))
        search("only", [r0.pk], clicks=[r0.pk], client=client, when=at("2026-01-01"))
    report = behaviour_pairs(min_clients=2, negatives="skipped")
    pair = TrainingPair.objects.get()
    assert (pair.text_a, pair.text_negative) == ("first", text(r1))
    assert report.without_negative == 1  # "only" showed one row: no negative at all


def test_deleted_rows_are_left_out_and_counted(rows):
    a = rows[0]
    for client in ("c1", "c2"):
        search("gone", [a.pk], clicks=[a.pk], client=client, when=at("2026-01-01"))
    a.delete()
    report = behaviour_pairs(min_clients=2, min_relevance=0, negatives="mined")
    assert report.created == 0 and report.missing_rows == 1


def test_the_management_command_makes_pairs_from_events(rows):
    a = rows[0]
    for client in ("c1", "c2", "c3"):
        search("rates", [a.pk], clicks=[a.pk], client=client, when=at("2026-01-01"))
    search("later", [a.pk], clicks=[a.pk], client="c1", when=at("2026-02-01"))
    out = io.StringIO()
    call_command(
        "sbert_make_pairs",
        "--from-events",
        "--until",
        "2026-01-31",
        "--min-clients",
        "3",
        "--min-relevance",
        "0",
        "--negatives",
        "mined",
        stdout=out,
    )
    assert "1 pairs created (1 train, 0 eval)" in out.getvalue()
    assert "events:testapp.Article.embedding:2026-01-01..2026-01-01" in out.getvalue()
    again = ["--min-clients", "3", "--min-relevance", "0"]
    call_command("sbert_make_pairs", "--from-events", *again, stdout=out)
    assert TrainingPair.objects.count() == 1


def visitors_of_other_queries(articles: list[Article], queries: int = 40) -> None:
    """A log for the click model to learn from: ``queries`` queries of ten visitors each, every
    query showing five of ``articles`` of which one (at a seeded place) is wanted; visitors look
    at position r with probability 1 / r^0.7 and click a wanted row they look at nine times in
    ten, any other one time in ten."""
    rng = random.Random(0)
    logs = []
    for n in range(queries):
        shown = rng.sample(articles, 5)
        wanted = shown[min(4, int(rng.expovariate(1.0)))]
        for visitor in range(10):
            clicks = [
                row.pk
                for position, row in enumerate(shown, start=1)
                if rng.random() < position**-0.7 and rng.random() < (0.9 if row is wanted else 0.1)
            ]
            logs.append((f"q{n}", [row.pk for row in shown], clicks, f"q{n}-v{visitor}"))
    for query, shown, clicks, client in logs:
        search(query, shown, clicks=clicks, client=client, when=at("2026-01-01"))


@pytest.fixture
def many_rows(rows):
    return rows + [
        Article.objects.create(title=f"title {n}", body=f"body of article {n}")
        for n in range(5, 12)
    ]


def test_where_a_row_was_clicked_decides_whether_it_was_wanted(many_rows):
    r0, r1 = many_rows[:2]
    visitors_of_other_queries(many_rows[2:])
    # The same three clicks of ten visitors: "first" showed r0 first, where nearly everyone
    # looks, and seven passed it by; "fifth" showed r1 fifth, where few look, and three clicked.
    others = many_rows[2:6]
    for n in range(10):
        search(
            "first",
            [r0.pk, *(a.pk for a in others)],
            clicks=[r0.pk] if n < 3 else [],
            client=f"f{n}",
            when=at("2026-01-01"),
        )
        search(
            "fifth",
            [*(a.pk for a in others), r1.pk],
            clicks=[r1.pk] if n < 3 else [],
            client=f"g{n}",
            when=at("2026-01-01"),
        )
    report = behaviour_pairs(min_clients=2, negatives="mined")  # MIN_RELEVANCE's default: 0.9
    made = set(TrainingPair.objects.values_list("text_a", "text_b"))
    assert ("fifth", text(r1)) in made and ("first", text(r0)) not in made
    assert report.unlikely >= 1
    assert f"{report.unlikely} more likely chance clicks than wanted rows" in report.describe()
    model = report.click_models["testapp.Article"]
    assert model.examination[0] == 1 and model.examination[4] < 0.6
    assert model.click_wanted > 3 * model.click_unwanted

    TrainingPair.objects.all().delete()
    everything = behaviour_pairs(min_clients=2, min_relevance=0, negatives="mined")
    assert everything.unlikely == 0 and everything.created == report.created + report.unlikely
    with pytest.raises(ValueError, match="min_relevance"):
        behaviour_pairs(min_relevance=1.5)


def test_the_command_takes_how_likely_a_pair_must_be(many_rows):
    r0, r1 = many_rows[:2]
    visitors_of_other_queries(many_rows[2:])
    for n in range(10):
        search(
            "first",
            [r0.pk, r1.pk],
            clicks=[r0.pk] if n < 3 else [],
            client=f"f{n}",
            when=at("2026-01-01"),
        )
    out = io.StringIO()
    call_command("sbert_make_pairs", "--from-events", "--min-relevance", "0.9", stdout=out)
    strict = TrainingPair.objects.values_list("text_a", flat=True)
    assert "first" not in strict and "more likely chance clicks" in out.getvalue()
    TrainingPair.objects.all().delete()
    call_command("sbert_make_pairs", "--from-events", "--min-relevance", "0", stdout=out)
    assert "first" in TrainingPair.objects.values_list("text_a", flat=True)
    with pytest.raises(CommandError, match="--min-relevance"):
        call_command("sbert_make_pairs", "--from-events", "--min-relevance", "1.5")


def test_the_click_model_counts_a_visitor_once_however_often_they_search(many_rows):
    r0 = many_rows[0]
    visitors_of_other_queries(many_rows[2:])
    others = [a.pk for a in many_rows[2:6]]
    # Three visitors opened r0, shown first; a fourth searched the same query thirty times and
    # never opened it. Counted by search, r0 was passed by in 30 of 33 showings at the place
    # everyone looks (a chance click at best); counted by visitor, three of four wanted it.
    for n in range(3):
        search("regular", [r0.pk, *others], clicks=[r0.pk], client=f"v{n}", when=at("2026-01-01"))
    for hour in range(30):
        search("regular", [r0.pk, *others], client="habit", when=at("2026-01-01", hour % 24))
    report = behaviour_pairs(min_clients=2, negatives="mined")
    assert ("regular", text(r0)) in set(TrainingPair.objects.values_list("text_a", "text_b"))
    unlikely = report.unlikely  # of the other queries
    # Thirty visitors who passed it by are thirty showings: then it was a chance click.
    TrainingPair.objects.all().delete()
    for n in range(30):
        search("regular", [r0.pk, *others], client=f"passer{n}", when=at("2026-01-01"))
    report = behaviour_pairs(min_clients=2, negatives="mined")
    assert ("regular", text(r0)) not in set(TrainingPair.objects.values_list("text_a", "text_b"))
    assert report.unlikely == unlikely + 1


def test_by_default_one_visitor_makes_a_pair_the_click_model_is_sure_of(many_rows):
    """The defaults (MIN_CLIENTS 1, MIN_RELEVANCE 0.9): r1, shown fifth where few look and
    opened by the one visitor of four who looked that far, is a pair; r2, shown first to thirty
    visitors and opened by one, is a chance click. MIN_CLIENTS 2 keeps every pair to two."""
    r0, r1, r2 = many_rows[:3]
    visitors_of_other_queries(many_rows[3:])
    others = [a.pk for a in many_rows[3:6]]
    for n in range(4):
        clicks = [r0.pk, r1.pk] if n == 0 else [r0.pk]
        search(
            "deep", [r0.pk, *others, r1.pk], clicks=clicks, client=f"d{n}", when=at("2026-01-01")
        )
    for n in range(30):
        clicks = [r2.pk] if n == 0 else []
        search("habit", [r2.pk, *others], clicks=clicks, client=f"h{n}", when=at("2026-01-01"))
    behaviour_pairs(negatives="mined")
    made = set(TrainingPair.objects.values_list("text_a", "text_b"))
    assert {("deep", text(r0)), ("deep", text(r1))} <= made
    assert not any(query == "habit" for query, _ in made)
    TrainingPair.objects.all().delete()
    report = behaviour_pairs(min_clients=2, negatives="mined")
    made = set(TrainingPair.objects.values_list("text_a", "text_b"))
    assert ("deep", text(r0)) in made and ("deep", text(r1)) not in made
    assert report.too_few_clients >= 2
