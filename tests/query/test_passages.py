"""Search by passages (django_sbert/query/passages.py) on tests.testapp.models.Report, whose
passages hold at most 24 tokens of the tiny model: max-sim ranking against an exact reference
computed here from the stored passage vectors, the best passage and its offsets, filters that
still return k rows, a top that one long row crowds, the queryset API, and hybrid search's
vector side. The passage index is used (checked with EXPLAIN) when sequential scans are off.
"""

from __future__ import annotations

import random
from contextlib import contextmanager

import numpy as np
import pytest
from django.db import connection, transaction
from django.db.models.functions import Length
from django.test.utils import CaptureQueriesContext

from django_sbert import indexing, serving
from tests.testapp.models import Report

pytestmark = pytest.mark.django_db

SENTENCES = [
    "The central bank will raise interest rates this year.",
    "Prices rise fast and the government will cut the tax.",
    "The market was falling and people want money.",
    "A new law on the economy is in the court.",
    "The president and the minister lost the vote.",
    "The party will win the election in the city.",
    "The war is over and peace is back in the country.",
    "A child plays guitar and the man eats food.",
    "The dog runs fast and the cat is slow.",
    "A woman is playing music in the old car.",
    "The old man was running in the city.",
    "Big cars are bad for the economy.",
]
QUERIES = [
    "the dog runs fast",
    "interest rates rise",
    "who won the election",
    "music and guitar",
    "the old car",
]


@pytest.fixture(autouse=True)
def fresh_index():
    """Empty tables with empty indexes: rows of earlier tests were rolled back, but their
    entries stay in the HNSW index until a VACUUM, and near-identical dead entries would
    crowd this test's search (TRUNCATE is transactional: the test's rollback undoes it)."""
    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {passage_model()._meta.db_table}, testapp_report")


def make_reports(n: int, seed: int = 0, **fields) -> list[Report]:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        picked = rng.sample(SENTENCES, rng.randint(2, 7))
        rows.append(Report(title=f"report {i}", body=" ".join(picked), **fields))
    return Report.objects.bulk_create(rows)


def index_all() -> None:
    indexing.embed_stale(indexing.get_ref("testapp.Report", "embedding"))


def passage_model():
    return Report._meta.get_field("embedding").passage_model


def exact_ranking(text: str, rows=None) -> list[tuple[int, float, int]]:
    """(pk, best similarity, best passage's ordinal) of every row, best first: the reference."""
    query = serving.encode_query(text)
    best: dict[int, tuple[float, int]] = {}
    allowed = None if rows is None else {r.pk for r in rows}
    for row_id, ordinal, vector in passage_model().objects.values_list(
        "row_id", "ordinal", "vector"
    ):
        if allowed is not None and row_id not in allowed:
            continue
        similarity = float(np.dot(query, np.asarray(vector)))
        if row_id not in best or similarity > best[row_id][0]:
            best[row_id] = (similarity, ordinal)
    ranked = sorted(best.items(), key=lambda item: (-item[1][0], item[0]))
    return [(pk, sim, ordinal) for pk, (sim, ordinal) in ranked]


@contextmanager
def index_only():
    """Fresh statistics and sequential scans off, so PostgreSQL reads the passages through
    their HNSW index even on tables this small (in a transaction, as the search's own settings
    are)."""
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE testapp_report")
            cursor.execute(f"ANALYZE {passage_model()._meta.db_table}")
            cursor.execute("SET LOCAL enable_seqscan = off")
        yield


def uses_passage_index(qs) -> bool:
    plan = qs.explain()
    return "sbert_psg_" in plan and "_hnsw" in plan


def check_rows(rows: list[Report], text: str, reference: list[tuple[int, float, int]]) -> None:
    """``rows`` are the reference's, in its order, with their best passage. Rows (or passages)
    with the same similarity may come in any order, and a tie at the cut in either set."""
    assert [r.similarity for r in rows] == pytest.approx([s for _, s, _ in reference], abs=1e-5)
    best = {pk: similarity for pk, similarity, _ in exact_ranking(text)}
    cut = reference[-1][1] + 1e-5
    above = {pk for pk, similarity, _ in reference if similarity > cut}
    assert above <= {r.pk for r in rows}
    query = serving.encode_query(text)
    for row in rows:
        assert row.similarity == pytest.approx(best[row.pk], abs=1e-5)
        stored = passage_model().objects.get(row=row, ordinal=row.passage["index"])
        assert float(np.dot(query, stored.vector)) == pytest.approx(best[row.pk], abs=1e-5)
        assert row.passage == {
            "text": stored.text,
            "start": stored.start,
            "end": stored.end,
            "index": stored.ordinal,
        }
        text_of_row = f"{row.title}\n{row.body}"
        assert text_of_row[row.passage["start"] : row.passage["end"]] == row.passage["text"]


@pytest.mark.heavy
@pytest.mark.parametrize("plan", ["default", "index"])
def test_rows_are_ranked_by_their_best_passage_like_an_exact_reference(plan):
    make_reports(300)
    index_all()
    assert passage_model().objects.count() > 600
    for text in QUERIES:
        reference = exact_ranking(text)[:10]
        if plan == "index":
            with index_only():
                assert uses_passage_index(Report.objects.similar_to(text)[:10])
                rows = list(Report.objects.similar_to(text)[:10])
        else:
            rows = list(Report.objects.similar_to(text, k=10))
        check_rows(rows, text, reference)


def test_filters_and_offsets_still_return_k_rows():
    """A filter that keeps 4% of the rows, written so that PostgreSQL cannot tell (it expects
    a third) and scans the passage index: the scan goes on (iterative scans) until the pool
    holds enough of those rows' passages; without iterative scans it stops at ef_search and
    comes back short. (A filter the planner knows to be selective reads those rows' passages
    directly, exact: the same rows.)"""
    make_reports(300)
    rare = make_reports(12, seed=1)
    Report.objects.filter(pk__in=[r.pk for r in rare]).update(title="rare")
    index_all()
    for text in QUERIES[:3]:
        reference = exact_ranking(text, rare)
        with index_only():
            hidden = Report.objects.alias(n=Length("title")).filter(n__lt=5)  # title "rare"
            search = hidden.similar_to(text, k=10)
            assert uses_passage_index(search)
            rows = list(search)
            later = list(Report.objects.similar_to(text).filter(title="rare")[5:10])
            stopped = list(hidden.similar_to(text, k=10, iterative_scan="off", ef_search=40))
        assert len(rows) == 10 and len(later) == 5
        assert len(stopped) < 10
        check_rows(rows, text, reference[:10])
        check_rows(later, text, reference[5:10])


@pytest.mark.parametrize(
    "exact_rows, max_scan_tuples",
    [(1000, None), (0, None), (0, 1)],
    ids=["few-rows-exact", "hashed-set", "hashed-set-runs-out"],
)
def test_a_filter_with_a_subquery_lists_its_rows_once(monkeypatch, exact_rows, max_scan_tuples):
    """A filter that holds a subquery (as a Wagtail queryset's pages do) is run once per
    search (``sbert_kept``): a few kept rows have their passages ranked exactly; more are a
    hashed set tested by the HNSW scan, and a scan that runs out of ``hnsw.max_scan_tuples``
    before naming k rows gives way to the exact ranking. Each way, the rows of the exact
    reference."""
    from django_sbert.query import options, passages

    monkeypatch.setattr(passages, "EXACT_ROWS", exact_rows)
    if max_scan_tuples:
        monkeypatch.setattr(options, "MAX_SCAN_TUPLES", max_scan_tuples)
    make_reports(300)
    rare = make_reports(12, seed=1)
    Report.objects.filter(pk__in=[r.pk for r in rare]).update(title="rare")
    index_all()
    kept = Report.objects.filter(pk__in=Report.objects.filter(title="rare").values("pk"))
    everything = Report.objects.filter(pk__in=Report.objects.values("pk"))
    for text in QUERIES[:3]:
        with CaptureQueriesContext(connection) as ctx:
            # (with max_scan_tuples 1, a scan of ef_search 1 cannot name 10 rows)
            rows = list(kept.similar_to(text, k=10, ef_search=1 if max_scan_tuples else None))
        (search,) = [q["sql"] for q in ctx.captured_queries if "<=>" in q["sql"]]
        assert "sbert_kept" in search and "IS TRUE" in search
        assert len(rows) == 10
        check_rows(rows, text, exact_ranking(text, rare)[:10])
        plan = kept.similar_to(text, k=10).explain(analyze=True).splitlines()
        (pool,) = [plan[i + 1] for i, line in enumerate(plan) if "CTE kpool0" in line]
        assert ("never executed" in pool) == (exact_rows > 0)  # a few rows: no index scan
        if not max_scan_tuples:  # a scan cut at 1 tuple is not the exact top of 312 rows
            check_rows(list(everything.similar_to(text, k=10)), text, exact_ranking(text)[:10])
    with CaptureQueriesContext(connection) as ctx:
        list(Report.objects.filter(title="rare").similar_to(QUERIES[0], k=10))
    (search,) = [q["sql"] for q in ctx.captured_queries if "<=>" in q["sql"]]
    assert "sbert_kept" not in search  # an index probe per row: PostgreSQL plans the join


def test_holds_subquery_finds_a_subquery_anywhere_in_the_filters():
    from django.db.models import Exists, OuterRef, Q

    from django_sbert.query.passages import holds_subquery

    def where(qs):
        return qs.query.where

    assert not holds_subquery(where(Report.objects.filter(title="rare", pk__gt=3)))
    assert not holds_subquery(where(Report.objects.filter(pk__in=[1, 2])))
    assert holds_subquery(where(Report.objects.filter(pk__in=Report.objects.values("pk"))))
    inner = Q(title="x") | Q(pk__in=Report.objects.filter(title="y").values("pk"))
    assert holds_subquery(where(Report.objects.filter(inner)))
    same = Report.objects.filter(title=OuterRef("title")).exclude(pk=OuterRef("pk"))
    assert holds_subquery(where(Report.objects.filter(Exists(same))))


def test_a_row_that_crowds_the_top_passages_does_not_cost_the_other_rows():
    """One row's passages are all the query's nearest (the query is one of them, and they are
    all alike): the top k * PASSAGES_PER_ROW passages name that row alone, so the same
    statement takes the wider pool and k rows come back."""
    crowd = Report.objects.create(title="dogs", body=" ".join(["The dog runs fast."] * 150))
    make_reports(30)
    index_all()
    crowded = passage_model().objects.filter(row=crowd)
    assert crowded.count() >= 40
    text = crowded.get(ordinal=1).text  # the same four sentences as nearly every other one
    query = serving.encode_query(text)
    nearest = sorted(
        passage_model().objects.values_list("row_id", "vector"),
        key=lambda item: -float(np.dot(query, item[1])),
    )[: 10 * 4]  # k * PASSAGES_PER_ROW
    assert {row_id for row_id, _ in nearest} == {crowd.pk}  # the narrow pool names one row
    with CaptureQueriesContext(connection) as ctx:
        rows = list(Report.objects.similar_to(text, k=10))
    searches = [q["sql"] for q in ctx.captured_queries if "<=>" in q["sql"]]
    assert len(searches) == 1, "one statement"
    assert len(rows) == 10 and rows[0].pk == crowd.pk
    assert rows[0].similarity == pytest.approx(1.0, abs=1e-5)
    check_rows(rows, text, exact_ranking(text)[:10])


def test_the_queryset_api_keeps_working():
    rows = make_reports(20)
    index_all()
    text = QUERIES[0]
    reference = exact_ranking(text)
    qs = Report.objects.similar_to(text)
    assert qs.count() == 20  # every row with passages, as similar_to() counts every row
    assert qs.exists()
    values = list(qs.values("pk", "similarity", "passage")[:3])
    assert [v["pk"] for v in values] == [pk for pk, _, _ in reference[:3]]
    assert values[0]["passage"]["index"] == reference[0][2]
    threshold = reference[4][1] - 1e-6
    assert len(Report.objects.similar_to(text, min_similarity=threshold)) == 5
    assert Report.objects.similar_to(text).get(pk=reference[3][0]).similarity == pytest.approx(
        reference[3][1], abs=1e-5
    )
    # passages=False: the rows' own vectors (the mean of their passages), as before
    plain = list(Report.objects.similar_to(text, passages=False, k=20))
    query = serving.encode_query(text)
    stored = dict(Report.objects.values_list("pk", "embedding"))
    assert not hasattr(plain[0], "passage")
    for row in plain:
        assert row.similarity == pytest.approx(float(np.dot(query, stored[row.pk])), abs=1e-5)
    # more like this compares a row's own vector with the others', by default
    like = list(Report.objects.similar_to(rows[0], k=5))
    assert rows[0] not in like and not hasattr(like[0], "passage")
    like_passages = list(Report.objects.similar_to(rows[0], k=5, passages=True))
    assert rows[0] not in like_passages and "text" in like_passages[0].passage


def test_a_field_without_passages_refuses_passages_true():
    from tests.testapp.models import Article

    with pytest.raises(ValueError, match="has no passages"):
        Article.objects.similar_to("rates", passages=True)


def test_hybrid_search_ranks_its_vector_side_by_best_passage():
    make_reports(40)
    index_all()
    text = "the dog runs fast"
    reference = exact_ranking(text)
    by_pk = {pk: (similarity, ordinal) for pk, similarity, ordinal in reference}
    rows = list(Report.objects.hybrid_search(text, k=40, candidates=20))
    vector_side = sorted((r for r in rows if r.vector_rank), key=lambda r: r.vector_rank)
    assert [by_pk[r.pk][0] for r in vector_side] == pytest.approx(
        [similarity for _, similarity, _ in reference[:20]], abs=1e-5
    )  # the top 20 by best passage (rows with equal ones in any order)
    query = serving.encode_query(text)
    for row in rows:  # each row's own best passage, exact
        similarity, _ = by_pk[row.pk]
        assert row.similarity == pytest.approx(similarity, abs=1e-5)
        stored = passage_model().objects.get(row=row, ordinal=row.passage["index"])
        assert float(np.dot(query, stored.vector)) == pytest.approx(similarity, abs=1e-5)
        assert row.passage["text"] == stored.text
    plain = list(Report.objects.hybrid_search(text, k=5, passages=False))
    assert not hasattr(plain[0], "passage")
    # Linear fusion normalises the best passages' similarities over the vector candidates.
    linear = list(
        Report.objects.hybrid_search(
            text, k=40, candidates=20, fusion="linear", vector_weight=0.7, keyword_weight=0.3
        )
    )
    near = [r.similarity for r in linear if r.vector_rank]
    high, low = max(near), min(near)
    best = max(r.keyword_score for r in linear if r.keyword_score is not None)
    for row in linear:
        vector = 0.7 * (row.similarity - low) / (high - low) if row.vector_rank else 0.0
        words = 0.3 * row.keyword_score / best if row.keyword_score is not None else 0.0
        assert row.score == pytest.approx(vector + words, abs=1e-5)


def test_best_sentences_points_at_the_sentence_nearest_to_the_query():
    from django_sbert.query.highlight import best_sentences

    passage = " ".join(SENTENCES[:6])
    target = SENTENCES[4]
    (mark, none) = best_sentences(target, [passage, None])
    assert passage[mark.start : mark.end] == target
    assert mark.similarity == pytest.approx(1.0, abs=1e-5)  # the same text, no prompts
    assert none is None
