"""What people look for, on a hand-built log: every figure checked against the same figure
computed here in Python from the searches as written, and the date filter."""

from __future__ import annotations

from collections import defaultdict
from datetime import date

import pytest

from django_sbert.feedback import analytics
from tests.feedback.behaviour import at, normalize, search

pytestmark = pytest.mark.django_db

D0, D1, D2 = "2026-01-01", "2026-01-10", "2026-01-11"

# (query, shown pks, clicked pks, client, day, version)
LOG = [
    ("Bank Rates", ["a", "b", "c"], ["b"], "c1", D1, "v1"),
    ("bank  rates", ["a", "b", "c"], ["a", "c"], "c2", D1, "v1"),
    ("storm", [], [], "c1", D1, "v1"),
    ("phone", ["a", "b"], [], "c3", D1, "v1"),
    ("bank rates", ["a", "b", "c"], ["a"], "c3", D2, "v2"),
    ("phone", ["b", "a"], ["a"], "c1", D2, "v2"),
    ("storm", [], [], "c4", D2, "v2"),
    ("old query", ["a"], ["a"], "c9", D0, "v0"),
]


@pytest.fixture
def log():
    for query, shown, clicked, client, day, version in LOG:
        search(query, shown, clicks=clicked, client=client, when=at(day), version=version)


def expected(days: set[str]) -> dict:
    """The figures of the searches on ``days``, computed from LOG in Python."""
    rows = [r for r in LOG if r[4] in days]
    shown = [r for r in rows if r[1]]
    first = {id(r): min(r[1].index(c) + 1 for c in r[2]) if r[2] else None for r in rows}
    rr = [1 / first[id(r)] if first[id(r)] else 0.0 for r in shown]
    impressions: dict[int, int] = defaultdict(int)
    clicks: dict[int, int] = defaultdict(int)
    for r in rows:
        for position in range(1, len(r[1]) + 1):
            impressions[position] += 1
        for c in r[2]:
            clicks[r[1].index(c) + 1] += 1
    by_day: dict[tuple, list[float]] = defaultdict(list)
    for r in shown:
        by_day[(r[4], r[5])].append(1 / first[id(r)] if first[id(r)] else 0.0)
    return {
        "searches": len(rows),
        "zero": sum(not r[1] for r in rows),
        "abandoned": sum(bool(r[1]) and not r[2] for r in rows),
        "clicked": sum(bool(r[2]) for r in rows),
        "mrr": sum(rr) / len(rr) if rr else None,
        "ctr": {p: clicks[p] / impressions[p] for p in impressions},
        "by_day": {k: sum(v) / len(v) for k, v in by_day.items()},
        "queries": sorted({normalize(r[0]) for r in rows}),
    }


def test_summary_ctr_and_mrr_match_the_log_computed_by_hand(log):
    window = analytics.Window.between(date(2026, 1, 10), date(2026, 1, 11))
    want = expected({D1, D2})
    summary = analytics.summary(window)
    assert summary["searches"] == want["searches"] == 7
    assert summary["zero_results"] == want["zero"] == 2
    assert summary["abandoned"] == want["abandoned"] == 1
    assert summary["clicked"] == want["clicked"] == 4
    assert summary["visitors"] == 4
    assert summary["click_rate"] == pytest.approx(4 / 5)
    assert summary["mrr"] == pytest.approx(want["mrr"]) and want["mrr"] == pytest.approx(0.6)

    ctr = {row["position"]: row for row in analytics.ctr_by_position(window)}
    assert {p: row["ctr"] for p, row in ctr.items()} == pytest.approx(want["ctr"])
    assert (ctr[1]["impressions"], ctr[1]["clicks"]) == (5, 2)
    assert (ctr[3]["impressions"], ctr[3]["clicks"]) == (3, 1)

    by_day = {(str(r["day"]), r["version"]): r["mrr"] for r in analytics.mrr_by_day(window)}
    assert by_day == pytest.approx(want["by_day"])
    assert by_day == pytest.approx({(D1, "v1"): 0.5, (D2, "v2"): 0.75})
    versions = {r["version"]: r for r in analytics.mrr_by_version(window)}
    assert versions["v1"]["searches"] == 3 and versions["v1"]["mrr"] == pytest.approx(0.5)
    assert versions["v2"]["click_rate"] == pytest.approx(1.0)


def test_top_zero_and_abandoned_queries_are_merged_by_their_normalised_text(log):
    window = analytics.Window.between(date(2026, 1, 10), date(2026, 1, 11))
    top = analytics.top_queries(window)
    assert [(r["query"], r["searches"], r["visitors"]) for r in top] == [
        ("bank rates", 3, 3),
        ("phone", 2, 2),
        ("storm", 2, 2),
    ]
    assert top[0]["mrr"] == pytest.approx((1 / 2 + 1 + 1) / 3)
    assert top[0]["click_rate"] == pytest.approx(1.0)
    assert [(r["query"], r["searches"]) for r in analytics.zero_results(window)] == [("storm", 2)]
    (phone,) = analytics.abandoned(window)
    assert (phone["query"], phone["abandoned"], phone["searches"]) == ("phone", 1, 2)
    assert phone["share"] == pytest.approx(0.5)


def test_the_date_range_and_the_model_filter_what_is_counted(log):
    one_day = analytics.Window.between(date(2026, 1, 11), date(2026, 1, 11))
    want = expected({D2})
    summary = analytics.summary(one_day)
    assert summary["searches"] == want["searches"] == 3
    assert summary["mrr"] == pytest.approx(want["mrr"])
    assert [r["query"] for r in analytics.top_queries(one_day)] == want["queries"]
    early = analytics.Window.between(date(2026, 1, 1), date(2026, 1, 9))
    assert analytics.summary(early)["searches"] == 1
    assert [r["query"] for r in analytics.top_queries(early)] == ["old query"]
    other = analytics.Window.between(date(2026, 1, 1), date(2026, 1, 31), "testapp.Note")
    assert analytics.summary(other)["searches"] == 0
    assert analytics.ctr_by_position(other) == [] and analytics.mrr_by_day(other) == []
