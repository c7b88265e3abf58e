"""Training pairs from behaviour: evidence thresholds, normalised queries merged, the split by
time, negatives from what visitors skipped or never reached, the source, and re-runs."""

from __future__ import annotations

import io
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
    # min_lift=0: the clicks' places are not the point here (the lift has its own tests)
    a, b = rows[0], rows[1]
    # b: two clicks by one visitor on two days; a: one click each by two visitors
    search("rates", [a.pk, b.pk], clicks=[b.pk], client="same", when=at("2026-01-01"))
    search("rates", [a.pk, b.pk], clicks=[b.pk], client="same", when=at("2026-01-02"))
    search("rates", [a.pk, b.pk], clicks=[a.pk], client="c1", when=at("2026-01-01"))
    search("rates", [a.pk, b.pk], clicks=[a.pk], client="c2", when=at("2026-01-02"))
    report = behaviour_pairs(min_clients=2, min_lift=0, eval_share=0.1, negatives="mined")
    assert report.days == [date(2026, 1, 1), date(2026, 1, 2)]
    # two days: the second is the eval window, so no pair has two visitors in one window
    assert report.created == 0 and report.too_few_clients == 4
    report = behaviour_pairs(min_clients=1, min_lift=0, negatives="mined")
    assert report.created == 4  # a and b, in each window
    TrainingPair.objects.all().delete()
    # one window (one day of clicks): only a has two visitors
    search("rates", [a.pk, b.pk], clicks=[a.pk], client="c3", when=at("2026-01-05"))
    search("rates", [a.pk, b.pk], clicks=[a.pk], client="c4", when=at("2026-01-05"))
    search("rates", [a.pk, b.pk], clicks=[b.pk], client="c3", when=at("2026-01-05", 14))
    report = behaviour_pairs(at("2026-01-05", 0), min_clients=2, min_lift=0, negatives="mined")
    assert report.created == 1 and report.too_few_clients == 1
    pair = TrainingPair.objects.get()
    assert (pair.text_a, pair.text_b, pair.split) == ("rates", text(a), "train")


def test_queries_are_merged_by_their_normalised_text(rows):
    a = rows[0]
    search("Bank Rates", [a.pk], clicks=[a.pk], client="c1", when=at("2026-01-01"))
    search("  bank   RATES ", [a.pk], clicks=[a.pk], client="c2", when=at("2026-01-01", 15))
    report = behaviour_pairs(min_clients=2, negatives="mined")
    assert report.created == 1
    assert TrainingPair.objects.get().text_a == "bank rates"


def test_the_most_recent_tenth_of_the_days_is_the_eval_split(rows):
    a = rows[0]
    days = [f"2026-01-{d:02d}" for d in range(1, 21)]  # 20 days: the last 2 are eval
    for n, day in enumerate(days):
        for client in ("c1", "c2"):
            search(f"query {n}", [a.pk], clicks=[a.pk], client=client, when=at(day))
    assert eval_window([date(2026, 1, d) for d in range(1, 21)], 0.1) == date(2026, 1, 19)
    report = behaviour_pairs(min_clients=2, negatives="mined", eval_share=0.1)
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
    behaviour_pairs(min_clients=2, min_lift=0, negatives="unexamined")
    pair = TrainingPair.objects.get()
    # below the last click (position 2): r2 is the best-placed, and nobody clicked it
    assert (pair.text_b, pair.text_negative) == (text(r1), text(r2))
    TrainingPair.objects.all().delete()
    behaviour_pairs(min_clients=2, min_lift=0, negatives="skipped")
    assert TrainingPair.objects.get().text_negative == text(r0)
    TrainingPair.objects.all().delete()
    behaviour_pairs(min_clients=2, min_lift=0, negatives="mined")
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
    report = behaviour_pairs(min_clients=2, negatives="mined")
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
        "--negatives",
        "mined",
        stdout=out,
    )
    assert "1 pairs created (1 train, 0 eval)" in out.getvalue()
    assert "events:testapp.Article.embedding:2026-01-01..2026-01-01" in out.getvalue()
    call_command("sbert_make_pairs", "--from-events", "--min-clients", "3", stdout=out)
    assert TrainingPair.objects.count() == 1


def test_a_row_clicked_only_because_it_came_first_makes_no_pair(rows):
    r0, r1, r2, r3 = rows[:4]
    # Four other queries, three visitors each: their first result is clicked every time, their
    # second never.
    for n in range(4):
        for client in ("c1", "c2", "c3"):
            search(f"q{n}", [r0.pk, r3.pk], clicks=[r0.pk], client=client, when=at("2026-01-01"))
    # "rates", ten visitors: r1 shown first and clicked by two of them, r2 shown second and
    # clicked by six. A first place draws clicks from 14 of 22 searches, a second from 6 of 22:
    # r1's lift, counted one standard deviation low, is (2 - 1.52) / 6.36 = 0.08; r2's is
    # (6 - 1.41) / 2.73 = 1.68; each r0's (3 - 0.83) / 1.91 = 1.14.
    for n in range(10):
        clicks = [r1.pk] if n < 2 else [r2.pk] if n < 8 else []
        search("rates", [r1.pk, r2.pk], clicks=clicks, client=f"v{n}", when=at("2026-01-01"))
    report = behaviour_pairs(min_clients=2, min_lift=1.0, negatives="mined")
    assert (report.created, report.low_lift) == (5, 1)
    made = set(TrainingPair.objects.values_list("text_a", "text_b"))
    assert ("rates", text(r2)) in made and ("rates", text(r1)) not in made
    assert "1 clicked less than their places draw" in report.describe()
    TrainingPair.objects.all().delete()
    report = behaviour_pairs(min_clients=2, min_lift=0, negatives="mined")
    assert (report.created, report.low_lift) == (6, 0)
    TrainingPair.objects.all().delete()
    report = behaviour_pairs(min_clients=2, min_lift=1.2, negatives="mined")  # r0's go too
    assert (report.created, report.low_lift) == (1, 5)
    with pytest.raises(ValueError, match="min_lift"):
        behaviour_pairs(min_lift=-1)


def test_the_command_takes_the_lift_a_pair_needs(rows):
    r0, r1 = rows[:2]
    for n in range(4):  # r0 first, clicked by two of four visitors: a lift of 0.40
        search(
            "rates",
            [r0.pk, r1.pk],
            clicks=[r0.pk] if n < 2 else [],
            client=f"v{n}",
            when=at("2026-01-01"),
        )
    search("other", [r1.pk], clicks=[r1.pk], client="v9", when=at("2026-01-01"))
    search("other", [r1.pk], clicks=[r1.pk], client="v8", when=at("2026-01-01"))
    out = io.StringIO()
    # "other": r1 first and clicked by both its visitors, a lift of 1.0
    call_command("sbert_make_pairs", "--from-events", "--min-lift", "0.8", stdout=out)
    assert "1 pairs created" in out.getvalue() and "1 clicked less" in out.getvalue()
    with pytest.raises(CommandError, match="--min-lift"):
        call_command("sbert_make_pairs", "--from-events", "--min-lift", "-0.5")
