"""BM25 keyword ranking (django_sbert/keyword/bm25.py) against an independent computation.

The ``rank-bm25`` package's ``BM25Okapi`` computes ``idf * tf * (k1 + 1) / (tf + k1 * (1 - b +
b * len / avglen))`` in numpy from token lists. Two of its choices differ from ours, and the
reference is told ours so that the same formula is compared:

* its idf is ``ln((N - df + 0.5) / (df + 0.5))`` with a floor for common words; ours is
  Lucene's ``ln(1 + (N - df + 0.5) / (df + 0.5))`` (``_calc_idf`` overridden);
* its document length is the number of tokens; ours is the number of distinct lexemes of the
  field (``doc_len`` and ``avgdl`` set after construction).

The documents' tokens are PostgreSQL's own lexemes (``unnest(to_tsvector(...))``, one per
position), so tokenisation is not what is compared; the scoring is.
"""

from __future__ import annotations

import math

import pytest
import rank_bm25
from django.db import connection

from django_sbert.keyword import statistics
from tests.query.test_query import search_settings
from tests.testapp.models import Article

BODIES = [
    "The cat sat on the mat with another cat and a third cat.",
    "Dogs chase cats; a dog barks at the cat.",
    "Interest rates rise as the central bank fights inflation.",
    "The central bank of Europe kept its rates.",
    "A long text about markets, prices, bonds, shares, banks, rates, funds, yields and trade.",
    "Cats sleep.",
    "Inflation, inflation, inflation: prices rise again and again.",
    "Nothing to see here at all.",
]


class LuceneIdfOkapi(rank_bm25.BM25Okapi):
    """BM25Okapi with Lucene's idf, and the document lengths set by the caller."""

    def _calc_idf(self, nd: dict) -> None:
        for word, freq in nd.items():
            self.idf[word] = math.log(1 + (self.corpus_size - freq + 0.5) / (freq + 0.5))


def lexemes(text: str, config: str = "english") -> list[str]:
    """``text`` as PostgreSQL's tokens: each lexeme once per position."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT lexeme FROM unnest(to_tsvector(%s::regconfig, %s)) AS u, "
            "unnest(u.positions) ORDER BY lexeme",
            [config, text],
        )
        return [row[0] for row in cursor.fetchall()]


def body_only(rescore: int = 100, **keyword):
    """Settings ranking by the body alone (weight letter B): one field, plain Okapi BM25, every
    word of the query a candidate's (``SEARCH["KEYWORD"]`` keys, ``rescore``: BM25_RESCORE)."""
    weights = {"A": 0.0, "B": 1.0, "C": 1.0, "D": 1.0}
    keyword = {"WEIGHTS": weights, **keyword}
    return search_settings(KEYWORD=keyword, KEYWORD_CANDIDATE_ROWS=None, BM25_RESCORE=rescore)


@pytest.fixture
def corpus(db) -> list[Article]:
    return Article.objects.bulk_create(Article(title="", body=body) for body in BODIES)


@pytest.mark.django_db
@pytest.mark.parametrize("k1,b", [(1.2, 0.75), (2.0, 0.3), (0.5, 1.0)])
def test_bm25_scores_equal_rank_bm25(corpus, k1, b):
    docs = [lexemes(body) for body in BODIES]
    reference = LuceneIdfOkapi(docs, k1=k1, b=b)
    reference.doc_len = [len(set(doc)) for doc in docs]  # our length: distinct lexemes
    reference.avgdl = sum(reference.doc_len) / len(docs)
    query = "cat inflation rates bank"
    expected = reference.get_scores(lexemes(query))
    with body_only(K1=k1, B=b):
        searched = Article.objects.keyword_search(query, match="any", max_df=1.0)
        found = dict(searched.values_list("pk", "keyword_score"))
        ranked = list(searched.values_list("pk", flat=True))
    assert found, "no row found"
    for obj, score in zip(corpus, expected, strict=True):
        if score > 0:
            assert found[obj.pk] == pytest.approx(score, rel=1e-9), obj.body
        else:
            assert obj.pk not in found
    assert ranked == sorted(found, key=lambda pk: (-found[pk], pk))


@pytest.mark.django_db
def test_two_fields_are_weighted_and_normalised_each_on_its_own(db):
    """BM25F: tf~ = sum of w_f * tf_f / (1 - b + b * len_f / avglen_f), saturated once."""
    rows = [("Cat", "The dog and the bird."), ("Dogs", "A cat, a cat and a cat."), ("Bird", "")]
    Article.objects.bulk_create(Article(title=t, body=b) for t, b in rows)
    weights = {"A": 2.0, "B": 1.0}
    k1, b = 1.2, 0.75
    fields = [[lexemes(t), lexemes(body)] for t, body in rows]
    n = len(rows)
    avg = [sum(len(set(f[i])) for f in fields) / n for i in range(2)]
    df = sum(1 for f in fields if "cat" in f[0] + f[1])
    idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
    expected = {}
    for (title, _), f in zip(rows, fields, strict=True):
        tf = 0.0
        for i, letter in enumerate("AB"):
            norm = 1 - b + b * len(set(f[i])) / avg[i]
            tf += weights[letter] * f[i].count("cat") / norm
        if tf:
            expected[title] = idf * tf * (k1 + 1) / (k1 + tf)
    with search_settings(KEYWORD={"WEIGHTS": weights}, KEYWORD_CANDIDATE_ROWS=None):
        found = dict(
            Article.objects.keyword_search("cats", match="any", max_df=1.0).values_list(
                "title", "keyword_score"
            )
        )
    assert found == pytest.approx(expected, rel=1e-9)


@pytest.mark.django_db
def test_match_all_ranks_the_rows_holding_every_word_by_bm25(corpus):
    found = list(
        Article.objects.keyword_search("central bank rates", match="all").values_list(
            "body", "keyword_score"
        )
    )
    assert [body for body, _ in found] == [BODIES[3], BODIES[2]]  # shorter text first
    assert all(score > 0 for _, score in found)


@pytest.mark.django_db
def test_ts_rank_is_gone_and_bm25_is_the_one_rank(corpus):
    with pytest.raises(ValueError, match="ts_rank, deprecated in 0.2.0, was removed"):
        Article.objects.keyword_search("cat", match="any", rank="ts_rank")
    with pytest.raises(ValueError, match="ts_rank"):
        Article.objects.hybrid_search("cat", rank="ts_rank")
    found = Article.objects.keyword_search("cat", match="any", rank="bm25")
    assert list(found) == list(Article.objects.keyword_search("cat", match="any"))


@pytest.mark.django_db
def test_without_statistics_keyword_search_falls_back_to_ts_rank(corpus):
    with connection.cursor() as cursor:
        cursor.execute(
            "DELETE FROM django_sbert_keyword_total WHERE relation = %s",
            ["testapp_article.embedding_tsv"],
        )
    found = list(Article.objects.keyword_search("cat", match="any").values_list("body", flat=True))
    assert BODIES[0] in found
    statistics.rebuild()
    stored = statistics.stored(connection, "testapp_article", "embedding_tsv")
    assert stored[0]["*"] == len(BODIES)


@pytest.mark.django_db
def test_only_the_best_rows_by_the_quick_score_get_the_exact_one(db):
    Article.objects.bulk_create(
        Article(title="", body=f"cat number {i} " + "dog " * (i % 3)) for i in range(30)
    )
    with body_only(rescore=5):
        assert len(Article.objects.keyword_search("cat dog", match="any", max_df=1.0)) == 5
        assert len(Article.objects.keyword_search("cat dog", k=12, match="any", max_df=1.0)) == 12


@pytest.mark.django_db
def test_b_of_1_with_an_empty_field_ranks_by_the_other_field(db):
    """With b 1 an empty field's length norm, 1 - b + b * 0 / avglen, is 0: it holds no word,
    so it adds nothing, and the row ranks by its other fields instead of failing on a
    division by zero."""
    rows = [("Cat", ""), ("Dog", "A cat sat."), ("Bird", "The bird sang.")]
    Article.objects.bulk_create(Article(title=t, body=b) for t, b in rows)
    with search_settings(KEYWORD={"B": 1.0}, KEYWORD_CANDIDATE_ROWS=None):
        found = dict(
            Article.objects.keyword_search("cat", match="any", max_df=1.0).values_list(
                "title", "keyword_score"
            )
        )
    assert set(found) == {"Cat", "Dog"} and all(score > 0 for score in found.values())
