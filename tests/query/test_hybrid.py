"""keyword_search() and hybrid_search(): the generated tsvector, fusion, filters, plans."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from django.conf import settings
from django.core import checks
from django.core.paginator import Paginator
from django.db import connection, models
from django.test.utils import isolate_apps, override_settings

from django_sbert.conf import SEARCH_DEFAULTS
from django_sbert.fields import EmbeddingField
from django_sbert.keyword import tsquery
from django_sbert.keyword.tsquery import clear_statistics_cache
from django_sbert.query import SemanticManager
from django_sbert.serving import encode_query, encoder_dimensions, encoder_version
from tests.conftest import RANK_FUSION
from tests.query.test_query import record_search_settings
from tests.testapp.models import Article, Author, Note

# Written for rank fusion (tests/conftest.py, RANK_FUSION).
pytestmark = pytest.mark.usefixtures("rank_fusion")


@pytest.fixture(autouse=True)
def _fresh_column_statistics():
    """Each test reads the tsvector statistics of its own rows (a process caches them)."""
    clear_statistics_cache()
    yield
    clear_statistics_cache()


K = SEARCH_DEFAULTS["FUSION"]["RRF_K"]  # rank fusion's k (SBERT["SEARCH"]["FUSION"]["RRF_K"])

ROWS = [  # (title, body, category)
    ("The XJ-9000 widget", "A rare product code in a catalogue.", "shop"),
    ("Central bank raises interest rates", "Prices rise fast.", "economy"),
    ("Market falls", "Prices fall as the market is slow.", "economy"),
    ("Cats and dogs", "A cat plays with a dog.", "pets"),
    ("Guitar music", "A man plays guitar music.", "music"),
    ("Election results", "The party won the vote.", "politics"),
]


def unit(vector) -> np.ndarray:
    vector = np.asarray(vector, dtype=np.float32)
    return vector / np.linalg.norm(vector)


def store(obj: Article, vector) -> None:
    """Store ``vector`` as written by the serving encoder (searches match rows by version)."""
    Article.objects.filter(pk=obj.pk).update(
        embedding=unit(vector), embedding_version=encoder_version()
    )


def tsvector(obj: Article) -> str:
    return Article.objects.values_list("embedding_tsv", flat=True).get(pk=obj.pk)


@pytest.fixture
def articles(db) -> list[Article]:
    return make_articles()


@pytest.fixture
def committed_articles(transactional_db) -> list[Article]:
    """``articles`` outside a test-wide transaction: searches run as in production, in
    autocommit (pipeline mode where psycopg 3 has it)."""
    return make_articles()


def make_articles() -> list[Article]:
    """ROWS, embedded so that the XJ-9000 row is the one FARTHEST from the query "XJ-9000".

    The other rows lie near the query vector, at distances growing with their position, so
    vector search alone ranks the XJ-9000 row last and its exact term must come from the
    keyword side.
    """
    query = encode_query("XJ-9000")
    rng = np.random.default_rng(3)
    objs = [Article.objects.create(title=t, body=b, category=c) for t, b, c in ROWS]
    store(objs[0], -query)
    for i, obj in enumerate(objs[1:], start=1):
        noise = rng.standard_normal(query.shape[0]).astype(np.float32)
        store(obj, unit(query) + 0.15 * i * unit(noise))
    return objs


# -- the generated column -------------------------------------------------------------------


def test_tsvector_is_generated_weighted_and_follows_every_kind_of_write(db):
    row = Article.objects.create(title="Zebra crossing", body="A striped road marking.")
    assert "'zebra':1A" in tsvector(row) and "'stripe':4B" in tsvector(row)  # stemmed, weighted
    Article.objects.filter(pk=row.pk).update(title="Giraffe")  # no signal, no save()
    assert "'giraff':1A" in tsvector(row) and "zebra" not in tsvector(row)
    row.refresh_from_db()
    row.body = "Tall animals."
    row.save()
    assert "'tall':2B" in tsvector(row) and "stripe" not in tsvector(row)
    (bulk,) = Article.objects.bulk_create([Article(title="Okapi", body="")])
    assert tsvector(bulk) == "'okapi':1A"
    assert Article.objects.keyword_search("giraffe").get() == row


def test_field_deconstructs_keyword_options_and_adds_one_gin_index():
    field = Article._meta.get_field("embedding")
    _, _, _, kwargs = field.deconstruct()
    assert kwargs["keyword_search"] is True
    assert "keyword_config" not in kwargs and "keyword_weights" not in kwargs  # defaults
    gin = [index for index in Article._meta.indexes if index.fields == ["embedding_tsv"]]
    assert len(gin) == 1 and type(gin[0]).__name__ == "GinIndex"
    assert not Note._meta.get_field("embedding").has_keyword_search


@isolate_apps("tests.testapp")
def test_checks_reject_sources_sql_cannot_generate_from():
    class Method(models.Model):
        text = models.TextField()
        embedding = EmbeddingField(source="build", keyword_search=True, dimensions=32)

        def build(self) -> str:
            return self.text

        class Meta:
            app_label = "testapp"

    class Typed(models.Model):
        title = models.CharField(max_length=10)
        year = models.IntegerField()
        embedding = EmbeddingField(source=("title", "year"), keyword_search=True, dimensions=32)

        class Meta:
            app_label = "testapp"

    class Weights(models.Model):
        title = models.CharField(max_length=10)
        embedding = EmbeddingField(
            source=("title",), keyword_search=True, keyword_weights=("Z",), dimensions=32
        )

        class Meta:
            app_label = "testapp"

    class Custom(models.Model):
        title = models.CharField(max_length=10)
        body = models.TextField()
        embedding = EmbeddingField(
            source=("title", "body"),
            keyword_search=True,
            keyword_config="simple",
            keyword_weights={"title": "B", "body": "D"},
            dimensions=32,
        )

        class Meta:
            app_label = "testapp"
            indexes = [models.Index(fields=["embedding_tsv"], name="custom_tsv")]

    def ids(model):
        return [m.id for m in model._meta.get_field("embedding").check() if m.level >= checks.ERROR]

    assert ids(Method) == ["django_sbert.E010"]
    assert "embedding_tsv" not in {f.name for f in Method._meta.get_fields()}
    assert ids(Typed) == ["django_sbert.E010"]
    assert ids(Weights) == ["django_sbert.E011"]
    assert ids(Custom) == []
    sql, params = Custom._meta.get_field("embedding_tsv").generated_sql(connection)
    assert sql.count("setweight(to_tsvector(%s::regconfig") == 2
    assert [p for p in params if p] == ["simple", "B", "simple", "D"]
    assert [i.name for i in Custom._meta.indexes] == ["custom_tsv"]  # the user's index is kept


# -- keyword_search -------------------------------------------------------------------------


def test_keyword_search_finds_a_rare_exact_term(articles):
    found = list(Article.objects.keyword_search("XJ-9000"))
    assert found == [articles[0]] and found[0].keyword_score > 0
    assert list(Article.objects.keyword_search("xj-9000 catalogue")) == [articles[0]]
    assert list(Article.objects.keyword_search("XJ-9000 guitar")) == []  # every word
    assert set(Article.objects.keyword_search("XJ-9000 or guitar")) == {articles[0], articles[4]}
    assert articles[4] in Article.objects.keyword_search("XJ-9000 guitar", match="any")
    assert list(Article.objects.keyword_search("prices -market")) == [articles[1]]


def test_keyword_search_ranks_title_matches_above_body_matches(articles):
    title = Article.objects.create(title="Prices", body="unrelated words")
    ranked = list(Article.objects.keyword_search("prices"))
    assert ranked[0] == title and len(ranked) == 3
    scores = [r.keyword_score for r in ranked]
    assert scores == sorted(scores, reverse=True)


@pytest.mark.parametrize(
    "text", ["", "   ", "?!", "...", '"', "-", "or", "!(&|", "'", "\\", "the of and", "a & b |"]
)
def test_empty_punctuation_and_syntax_only_texts_do_not_raise(articles, text):
    assert list(Article.objects.keyword_search(text, match="any")) == []
    assert list(Article.objects.keyword_search(text)) == []
    rows = list(Article.objects.hybrid_search(text))
    if not text.strip():
        assert rows == []  # a blank search finds nothing, rather than arbitrary rows
    else:  # nothing to match by keywords: the vector side's rows only
        assert len(rows) == len(ROWS) and all(r.keyword_rank is None for r in rows)


# -- hybrid_search --------------------------------------------------------------------------


def test_hybrid_finds_the_exact_term_that_vector_search_ranks_last(articles):
    vector_only = list(Article.objects.similar_to("XJ-9000"))
    assert vector_only[-1] == articles[0]  # the premise: vectors alone miss it

    results = list(Article.objects.hybrid_search("XJ-9000"))
    top = results[0]
    assert top == articles[0]
    assert (top.vector_rank, top.keyword_rank) == (len(ROWS), 1)
    assert top.score == pytest.approx(1 / (K + 1) + 1 / (K + len(ROWS)))
    assert top.similarity == pytest.approx(-1.0, abs=1e-5)
    # the rest come from the vector side only, in vector order
    assert [r.pk for r in results[1:]] == [r.pk for r in vector_only[:-1]]
    assert all(r.keyword_rank is None and r.keyword_score is None for r in results[1:])
    assert [r.vector_rank for r in results[1:]] == list(range(1, len(ROWS)))
    scores = [r.score for r in results]
    assert scores == sorted(scores, reverse=True)


def test_weights_rrf_k_and_candidates(articles):
    keyword_off = list(Article.objects.hybrid_search("XJ-9000", keyword_weight=0))
    assert keyword_off[0] == articles[1] and keyword_off[-1] == articles[0]
    vector_off = Article.objects.hybrid_search("XJ-9000", vector_weight=0).first()
    assert vector_off == articles[0]
    top = Article.objects.hybrid_search("XJ-9000", rrf_k=0, keyword_weight=0.5).first()
    assert top.score == pytest.approx(1 / 1)  # the vector side's first row: 1 / (0 + 1)
    few = list(Article.objects.hybrid_search("XJ-9000", candidates=2))
    assert {r.pk for r in few} == {articles[0].pk, articles[1].pk, articles[2].pk}
    with override_settings(
        SBERT={
            **settings.SBERT,
            "SEARCH": {"FUSION": {**RANK_FUSION["FUSION"], "RRF_K": 0, "CANDIDATES": 1}},
        }
    ):
        only = list(Article.objects.hybrid_search("XJ-9000"))
        assert [r.pk for r in only] == [articles[0].pk, articles[1].pk]
        assert only[0].score == pytest.approx(1.0) and only[1].score == pytest.approx(1.0)
    for bad in ({"candidates": 0}, {"rrf_k": -1}, {"keyword_weight": -1}, {"match": "some"}):
        with pytest.raises(ValueError):
            Article.objects.hybrid_search("XJ-9000", **bad)


def test_linear_fusion_sums_each_sides_normalised_score(articles):
    results = list(
        Article.objects.hybrid_search(
            "XJ-9000", fusion="linear", vector_weight=0.6, keyword_weight=0.4
        )
    )
    similarities = [r.similarity for r in results]
    high, low = max(similarities), min(similarities)  # every row is a vector candidate
    best = max(r.keyword_score for r in results if r.keyword_score is not None)
    for r in results:
        words = 0.4 * r.keyword_score / best if r.keyword_score is not None else 0.0
        assert r.score == pytest.approx(0.6 * (r.similarity - low) / (high - low) + words)
    # The keyword match is the vector side's farthest row: 0.4 from its words alone, below
    # the nearest row's 0.6; with the weights the other way round, it comes first.
    assert results[0] == articles[1] and results[0].score == pytest.approx(0.6)
    assert results[-1] == articles[0] and results[-1].score == pytest.approx(0.4)
    flipped = Article.objects.hybrid_search(
        "XJ-9000", fusion="linear", vector_weight=0.4, keyword_weight=0.6
    ).first()
    assert flipped == articles[0] and flipped.score == pytest.approx(0.6)
    # The library's defaults are that fusion (SBERT["SEARCH"] left out: not rank_fusion's).
    with override_settings(SBERT={k: v for k, v in settings.SBERT.items() if k != "SEARCH"}):
        default = Article.objects.hybrid_search("XJ-9000").first()
        assert default == articles[0] and default.score == pytest.approx(0.6)
    # Two vector candidates: the keyword match is outside the vector list and gets nothing
    # from it; the nearer candidate 1, the farther 0.
    few = Article.objects.hybrid_search(
        "XJ-9000", fusion="linear", vector_weight=0.6, keyword_weight=0.4, candidates=2
    )
    scores = {r.pk: (r.vector_rank, r.score) for r in few}
    assert scores == {
        articles[1].pk: (1, pytest.approx(0.6)),
        articles[0].pk: (None, pytest.approx(0.4)),
        articles[2].pk: (2, pytest.approx(0.0)),
    }
    # The same fusion from the settings.
    search = {
        **settings.SBERT.get("SEARCH", {}),
        "FUSION": {"METHOD": "linear", "KEYWORD_WEIGHT": 1.5},
    }
    with override_settings(SBERT={**settings.SBERT, "SEARCH": search}):
        top = Article.objects.hybrid_search("XJ-9000").first()
        assert top == articles[0] and top.score == pytest.approx(1.5)
    with pytest.raises(ValueError, match="fusion must be one of"):
        Article.objects.hybrid_search("XJ-9000", fusion="borda")


def test_filters_before_and_after_apply_to_both_candidate_lists(articles):
    # With one candidate per side, the top vector row (economy) and the top keyword row (shop)
    # are both outside "music": a filter applied only after fusing would return nothing.
    before = list(Article.objects.filter(category="music").hybrid_search("XJ-9000", candidates=1))
    after = list(Article.objects.hybrid_search("XJ-9000", candidates=1).filter(category="music"))
    assert before == after == [articles[4]]
    assert after[0].vector_rank == 1  # ranked within the filtered rows

    excluded = Article.objects.hybrid_search("XJ-9000").exclude(pk=articles[0].pk)
    assert articles[0] not in excluded and len(excluded) == len(ROWS) - 1
    author = Author.objects.create(name="Ada")
    Article.objects.filter(pk=articles[3].pk).update(author=author)
    by_author = Article.objects.hybrid_search("XJ-9000").filter(author__name="Ada")
    assert list(by_author.select_related("author")) == [articles[3]]
    # a condition on the fused score itself is applied to the fused rows
    strong = Article.objects.hybrid_search("XJ-9000").filter(score__gt=1 / (K + 1) + 0.0001)
    assert list(strong) == [articles[0]]


LIST = "SELECT * FROM unnest("  # the keyword side's rows, ranked ahead (query/fusion.py)


def fused_statements(captured) -> list[str]:
    return [q["sql"] for q in captured if "sbert_hybrid" in q["sql"]]


def test_the_keyword_side_ranked_ahead_is_read_by_the_fused_statement(articles):
    from django.test.utils import CaptureQueriesContext

    from django_sbert.serving import clear_query_cache

    clear_query_cache()  # the text is encoded while its keyword side is ranked
    with CaptureQueriesContext(connection) as captured:
        ahead = list(
            Article.objects.filter(category__in=["shop", "economy"]).hybrid_search("XJ-9000")
        )
    (fused,) = fused_statements(captured)
    assert LIST in fused and "@@" not in fused  # the list, not a second ranking
    ranked_ahead = [q["sql"] for q in captured if "@@" in q["sql"]]
    assert len(ranked_ahead) == 1 and "sbert_hybrid" not in ranked_ahead[0]
    # the same rows, ranks and scores as when the fused statement ranks the keywords itself
    with CaptureQueriesContext(connection) as captured:
        inside = list(
            Article.objects.hybrid_search("XJ-9000").filter(category__in=["shop", "economy"])
        )
    (fused,) = fused_statements(captured)
    assert "@@" in fused and LIST not in fused  # a filter chained after: ranked inside
    assert [(r.pk, r.keyword_rank, r.vector_rank) for r in ahead] == [
        (r.pk, r.keyword_rank, r.vector_rank) for r in inside
    ]
    assert [r.score for r in ahead] == pytest.approx([r.score for r in inside])
    assert [r.keyword_score for r in ahead] == pytest.approx(
        [r.keyword_score for r in inside], nan_ok=True
    )


@pytest.mark.django_db
def test_keyword_rows_travel_as_array_text_that_postgresql_reads_back_exactly():
    import uuid

    from django_sbert.query.fusion import KeywordRows

    scores = (0.1, 1 / 3, 12345.678901234567, 5e-324, 2.0)
    pk_lists = {
        "bigint": (7, 3, 2**62, 1, 9),
        "uuid": tuple(uuid.uuid4() for _ in scores),
        "text": ('a "quoted" pk', "back\\slash", "{braces}, commas", "NULL", " spaced "),
    }
    with connection.cursor() as cursor:
        for pk_type, pks in pk_lists.items():
            cursor.execute(*KeywordRows("default", (), pks, scores).as_sql(pk_type))
            # in rank order, every pk and every bit of every score
            assert cursor.fetchall() == list(zip(pks, scores, strict=True)), pk_type


def record_search_steps(monkeypatch) -> tuple[list[str], Any]:
    """The hybrid search's statements (recorded by the execute wrapper returned), its
    encode and the encode's start in the pool (in this thread, so ordered with the
    statements), in the order they happen."""
    from django_sbert.query import aio

    events: list[str] = []
    submit, encode = aio._submit, aio.encode_query_for

    def recorded_submit(*args, **kwargs):
        events.append("started")
        return submit(*args, **kwargs)

    def recorded_encode(*args, **kwargs):
        events.append("encode")
        return encode(*args, **kwargs)

    def recorded_statement(execute, sql, params, many, context):
        if "sbert_hybrid" in sql:
            events.append("fused")
        elif "django_sbert_keyword_lexeme" in sql:
            events.append("statistics")
        elif "@@" in sql:
            events.append("keywords")
        return execute(sql, params, many, context)

    monkeypatch.setattr(aio, "_submit", recorded_submit)
    monkeypatch.setattr(aio, "encode_query_for", recorded_encode)
    return events, recorded_statement


def use_query_runtime(settings, runtime: str) -> None:
    from django_sbert import serving
    from django_sbert.encoder.paths import onnxruntime_missing

    if runtime == "onnxruntime" and onnxruntime_missing() is not None:
        pytest.skip(str(onnxruntime_missing()))
    encoder = {**settings.SBERT["ENCODERS"]["default"], "QUERY_RUNTIME": runtime}
    settings.SBERT = {**settings.SBERT, "ENCODERS": {"default": encoder}}
    serving.reset_encoders()
    Article.objects.similar_to("load the encoder and its query graph")


@pytest.mark.parametrize("runtime", ["torch", "onnxruntime"])
def test_the_text_is_encoded_while_postgresql_ranks_the_keyword_side(
    articles, monkeypatch, settings, runtime
):
    """In a caller's transaction (no pipeline: a statement's execute() waits for its rows) a
    torch encode starts in the pool once the keyword statement is compiled, just before it
    runs: the encoding thread then shares no Python time with this one (the GIL), only
    cores. An encode that waits outside the GIL (ONNX Runtime's one call) starts before the
    search's first statement, so it overlaps the word statistics and the compiling too."""
    from django_sbert import serving
    from django_sbert.serving import clear_query_cache
    from django_sbert.serving.cache import encodes_outside_gil

    use_query_runtime(settings, runtime)
    current = serving.serving_record("default")
    assert encodes_outside_gil(current) == (runtime == "onnxruntime")
    events, recorded = record_search_steps(monkeypatch)
    clear_query_cache()
    with connection.execute_wrapper(recorded):
        found = list(Article.objects.hybrid_search("XJ-9000"))
    assert found[0].pk == articles[0].pk
    assert sorted(events) == ["encode", "fused", "keywords", "started", "statistics"]
    # (the pool's thread records "encode" while this one goes on, in either order)
    mine = [event for event in events if event != "encode"]
    if runtime == "torch":
        assert mine == ["statistics", "started", "keywords", "fused"]
    else:
        assert mine == ["started", "statistics", "keywords", "fused"]
    serving.reset_encoders()


@pytest.mark.parametrize("runtime", ["torch", "onnxruntime"])
def test_in_pipeline_mode_a_torch_encode_runs_here_while_the_keyword_statement_runs(
    committed_articles, monkeypatch, settings, runtime
):
    """In autocommit, psycopg 3 sends the keyword statement at execute() (pipeline mode) and
    PostgreSQL runs it while this thread encodes the text: no pool, no shared GIL. An encode
    that waits outside the GIL still starts in the pool before the first statement."""
    from django_sbert import serving
    from django_sbert.query.options import pipeline_supported
    from django_sbert.serving import clear_query_cache

    if not pipeline_supported():
        pytest.skip("no pipeline mode here (psycopg 2, or libpq < 14)")
    use_query_runtime(settings, runtime)
    events, recorded = record_search_steps(monkeypatch)
    clear_query_cache()
    with connection.execute_wrapper(recorded):
        found = list(Article.objects.hybrid_search("XJ-9000"))
    assert found[0].pk == committed_articles[0].pk
    if runtime == "torch":
        assert events == ["statistics", "keywords", "encode", "fused"]
    else:
        assert sorted(events) == ["encode", "fused", "keywords", "started", "statistics"]
        mine = [event for event in events if event != "encode"]
        assert mine == ["started", "statistics", "keywords", "fused"]
    # The same rows as the search ranked in one statement, nothing run ahead.
    ranked = Article.objects.hybrid_search("XJ-9000").filter(pk__gte=0)
    assert [(r.pk, r.score) for r in found] == [(r.pk, pytest.approx(r.score)) for r in ranked]
    serving.reset_encoders()


def test_the_query_server_is_asked_before_the_keyword_statement(db, settings, tmp_path):
    """A query server's answer is a socket wait: encodes_outside_gil() whatever the model."""
    from django_sbert import serving
    from django_sbert.serving.cache import encodes_outside_gil

    current = serving.serving_record("default")
    assert not encodes_outside_gil(current)  # the test settings: torch, in this process
    settings.SBERT = {
        **settings.SBERT,
        "QUERY_SERVER": {"SOCKET": [str(tmp_path / "query.sock"), "in-process"]},
    }
    assert encodes_outside_gil(current)


def test_a_row_deleted_after_the_keyword_side_ran_ahead_is_not_returned(articles):
    search = Article.objects.hybrid_search("XJ-9000")  # the keyword side has run
    Article.objects.filter(pk=articles[0].pk).delete()
    assert articles[0].pk not in [r.pk for r in search]


def test_k_slicing_count_values_pagination_and_subqueries(articles):
    assert len(Article.objects.hybrid_search("XJ-9000", k=2)) == 2
    assert len(Article.objects.hybrid_search("XJ-9000", k=2)[:4]) == 4
    assert Article.objects.hybrid_search("XJ-9000").count() == len(ROWS)
    assert Article.objects.hybrid_search("XJ-9000").exists()
    values = list(Article.objects.hybrid_search("XJ-9000").values("title", "score"))
    assert values[0] == {
        "title": "The XJ-9000 widget",
        "score": pytest.approx(1 / (K + 1) + 1 / (K + 6)),
    }
    ordered = list(Article.objects.hybrid_search("XJ-9000", k=100))
    assert list(Article.objects.hybrid_search("XJ-9000", k=100).iterator()) == ordered
    pages = Paginator(Article.objects.hybrid_search("XJ-9000"), 4)
    assert [a for n in pages.page_range for a in pages.page(n).object_list] == ordered
    inner = Article.objects.hybrid_search("XJ-9000").values("pk")[:2]  # k applies to fetching
    assert set(Article.objects.filter(pk__in=inner)) == set(ordered[:2])
    row = Article.objects.hybrid_search("XJ-9000").first()
    assert {"embedding", "embedding_tsv"} <= row.get_deferred_fields()
    assert (
        Article.objects.hybrid_search("XJ-9000").order_by("title").first().title == "Cats and dogs"
    )


def test_rows_without_a_vector_are_still_found_by_keywords(articles):
    fresh = Article.objects.create(title="XJ-9000 spare parts", body="")  # not embedded yet
    results = list(Article.objects.hybrid_search("XJ-9000"))
    row = next(r for r in results if r == fresh)
    assert row.similarity is None and row.vector_rank is None and row.keyword_rank in (1, 2)
    assert list(Article.objects.keyword_search("spare parts")) == [fresh]
    assert fresh not in Article.objects.similar_to("XJ-9000")


def test_models_without_keyword_search_get_a_clear_error(db):
    with pytest.raises(ValueError, match=r"keyword_search=True.*makemigrations"):
        Note.objects.hybrid_search("cats")
    with pytest.raises(ValueError, match=r"keyword_search=True"):
        Note.objects.keyword_search("cats")
    with pytest.raises(TypeError, match="similar_to"):
        Article.objects.hybrid_search([0.1, 0.2])
    with pytest.raises(ValueError, match="already applied"):
        Article.objects.hybrid_search("cats").filter(published=True).hybrid_search("dogs")


def test_search_settings_take_effect_for_the_vector_side(articles):
    log: list[dict[str, str]] = []
    with connection.execute_wrapper(record_search_settings(log)):
        list(Article.objects.hybrid_search("XJ-9000", ef_search=77, iterative_scan="strict_order"))
    assert log == [
        {
            "hnsw.ef_search": "77",
            "hnsw.iterative_scan": "strict_order",
            "hnsw.max_scan_tuples": "20000",
            "enable_seqscan": "off",
        }
    ]


# -- plans ----------------------------------------------------------------------------------


@pytest.fixture
def many_articles(db):
    """2,000 rows with random unit vectors and a few words each; ANALYZEd; no seq scans."""
    rng = np.random.default_rng(11)
    dim = encoder_dimensions()
    vectors = rng.standard_normal((2000, dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    words = ["alpha", "beta", "gamma", "delta", "omega", "sigma", "kappa", "theta"]
    version = encoder_version()  # searches by text match rows of the serving version
    Article.objects.bulk_create(
        Article(
            title=f"{words[i % 8]} {words[(i // 8) % 8]} item{i}",
            body="",
            category=str(i % 10),
            published=i % 100 != 0,
            embedding=vectors[i],
            embedding_version=version,
        )
        for i in range(len(vectors))
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE testapp_article")
        cursor.execute("SET LOCAL enable_seqscan = off")
    return vectors


def gin_index_name() -> str:
    return next(i.name for i in Article._meta.indexes if i.fields == ["embedding_tsv"])


@pytest.mark.heavy
def test_explain_shows_the_hnsw_and_gin_indexes(many_articles):
    plan = Article.objects.hybrid_search("item42 gamma", match="all").explain()
    assert "article_embedding_hnsw" in plan, plan
    assert gin_index_name() in plan, plan
    filtered = Article.objects.filter(published=True).hybrid_search("item42 gamma").explain()
    assert "article_embedding_hnsw" in filtered and gin_index_name() in filtered
    keyword_plan = Article.objects.keyword_search("item42").explain()
    assert gin_index_name() in keyword_plan and "hnsw" not in keyword_plan


@pytest.mark.heavy
def test_filtered_hybrid_search_still_returns_k_rows(many_articles):
    # 1% of the rows pass the filter; the iterative scan keeps the vector side full.
    results = list(
        Article.objects.filter(published=False).hybrid_search("zzz", candidates=10, ef_search=10)
    )
    assert len(results) == 10 and not any(r.published for r in results)
    assert [r.vector_rank for r in results] == list(range(1, 11))
    assert Article.objects.keyword_search("item42").get().title.endswith("item42")


# -- the real model: a paraphrase with no shared word ---------------------------------------


@pytest.mark.slow
@isolate_apps("tests.testapp")
@pytest.mark.django_db
def test_a_paraphrase_without_shared_words_is_found_by_vector_and_hybrid(minilm):
    class Paper(models.Model):
        title = models.CharField(max_length=200)
        body = models.TextField(blank=True)
        embedding = EmbeddingField(source=("title", "body"), dimensions=384, keyword_search=True)

        objects = SemanticManager()

        class Meta:
            app_label = "testapp"

    texts = [
        ("Physicians", "Doctors treat patients who are sick in hospitals."),
        ("Stock exchange", "Shares and bonds are traded by investors."),
        ("Kitchen", "Recipes for baking bread and cakes."),
        ("Football", "The team scored a goal in the final match."),
        ("Weather", "Heavy rain and strong wind are expected tomorrow."),
    ]
    with connection.schema_editor() as editor:
        editor.create_model(Paper)
    rows = [Paper.objects.create(title=t, body=b) for t, b in texts]
    vectors = minilm.encode([f"{t}\n{b}" for t, b in texts], normalize=True)
    query = "medical staff caring for ill people"  # no word in common with the first row
    ml = {"ENCODERS": {"default": {"MODEL": "all-MiniLM-L6-v2", "THREADS": 1, "COMPILE": False}}}
    with override_settings(SBERT={**settings.SBERT, **ml}):
        for row, vector in zip(rows, vectors, strict=True):
            Paper.objects.filter(pk=row.pk).update(
                embedding=vector, embedding_version=encoder_version()
            )
        assert list(Paper.objects.keyword_search(query, match="any")) == []
        assert Paper.objects.similar_to(query).first() == rows[0]
        hybrid = list(Paper.objects.hybrid_search(query))
    assert hybrid[0] == rows[0] and hybrid[0].keyword_rank is None
    assert hybrid[0].similarity > hybrid[1].similarity


def test_without_bm25_statistics_any_word_ranking_weighs_rare_words_by_idf(db):
    # A column without BM25 statistics (no triggers): word weights from ANALYZE's statistics.
    # 60 rows share the common words. "telomerase" is in one row, "nucleosome" in two; the
    # row with nucleosome also holds every common word.
    Article.objects.bulk_create(
        Article(title="patients increase", body="patients increase risk") for _ in range(60)
    )
    rare = Article.objects.create(title="Telomerase", body="an enzyme")
    crowded = Article.objects.create(
        title="Nucleosome patients increase", body="patients increase risk"
    )
    Article.objects.create(title="Nucleosome", body="")
    with connection.cursor() as cursor:
        cursor.execute(
            "DELETE FROM django_sbert_keyword_total WHERE relation = %s",
            ["testapp_article.embedding_tsv"],
        )
    text = "telomerase and nucleosome increase risk in patients"
    # No statistics yet: every word weighs 1, and the row holding the most words wins.
    assert Article.objects.keyword_search(text, match="any", max_df=1.0).first() == crowded
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE testapp_article")
    clear_statistics_cache()  # as after STATS_SECONDS in a long-running process
    ranked = list(Article.objects.keyword_search(text, match="any", max_df=1.0))
    # The rarest word outweighs a commoner one plus every common word; rows holding only
    # common words are not candidates once rarer words exist (1/63 + 2/63 <= MATCH_DF).
    assert ranked[:2] == [rare, crowded] and len(ranked) == 3
    assert ranked[0].keyword_score > ranked[1].keyword_score > ranked[2].keyword_score
    # words in more than max_df of the rows are not searched for at all
    assert list(Article.objects.keyword_search("patients", match="any", max_df=0.2, k=100))
    assert len(Article.objects.keyword_search("patients", match="any", k=100)) == 61
    assert list(Article.objects.keyword_search("enzyme patients", match="any")) == [rare]
    with pytest.raises(ValueError, match="max_df"):
        Article.objects.keyword_search(text, match="any", max_df=0)


def test_bm25_weighs_rare_words_by_exact_idf_from_the_first_row(db):
    # The same rows, ranked by BM25: the statistics are exact as soon as the rows are written
    # (no ANALYZE), so the rarest word outweighs a commoner one plus every common word.
    Article.objects.bulk_create(
        Article(title="patients increase", body="patients increase risk") for _ in range(60)
    )
    rare = Article.objects.create(title="Telomerase", body="an enzyme")
    crowded = Article.objects.create(
        title="Nucleosome patients increase", body="patients increase risk"
    )
    alone = Article.objects.create(title="Nucleosome", body="")
    text = "telomerase and nucleosome increase risk in patients"
    ranked = list(Article.objects.keyword_search(text, k=100, match="any", max_df=1.0))
    # The shorter nucleosome row beats the longer one (length normalisation); rows holding
    # only the common words follow.
    assert ranked[:3] == [rare, alone, crowded] and len(ranked) == 63
    assert ranked[0].keyword_score > ranked[1].keyword_score > ranked[2].keyword_score
    assert ranked[2].keyword_score > ranked[3].keyword_score
    assert len(Article.objects.keyword_search("patients", match="any", k=100)) == 61
    assert list(Article.objects.keyword_search("enzyme patients", match="any")) == [rare]


def test_a_word_no_row_holds_does_not_hide_the_listed_words(db):
    # 60 rows; "increase" is in 20 of them (over MATCH_DF alone, under max_df). At this size
    # ANALYZE lists every word, so "pyongyang", listed nowhere, is in no row: the listed word
    # must still find candidates, or the keyword side would find nothing at all.
    Article.objects.bulk_create(
        Article(title=f"report {i}", body="prices increase" if i < 20 else "prices fall")
        for i in range(60)
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE testapp_article")
    clear_statistics_cache()
    text = "increase in pyongyang"
    terms = dict((t[0], t[2]) for t in keyword_terms(text))
    assert terms["pyongyang"] == 0.0 and terms["increas"] > tsquery.MATCH_DF
    found = list(Article.objects.keyword_search(text, match="any", max_df=0.5, k=100))
    assert len(found) == 20 and all("increase" in row.body for row in found)
    # A row written after ANALYZE with the unlisted word is found, and first: the word is
    # still searched for, with the idf of a word rarer than every listed one.
    new = Article.objects.create(title="Pyongyang", body="a quiet day")
    ranked = list(Article.objects.keyword_search(text, match="any", max_df=0.5, k=100))
    assert ranked[0] == new and len(ranked) == 21


def keyword_terms(text: str) -> tuple[tsquery.Term, ...]:
    """The (lexeme, idf, df) the keyword side of a search of ``text`` uses."""
    return tsquery.query_terms(connection, "testapp_article", "embedding_tsv", "english", text, 0.5)


# -- the fusion chosen for the serving version (finetuning/hybrid.py) -----------------------


def serve_with_fusion(fusion: dict[str, float]) -> None:
    """Record the serving (base) version as active, with ``fusion`` stored in its metrics."""
    from django_sbert.models import EncoderVersion, VersionStatus
    from django_sbert.serving import base_version, forget_serving

    EncoderVersion.objects.create(
        encoder_name="default",
        version=base_version("default"),
        is_base=True,
        status=VersionStatus.ACTIVE,
        metrics={"ndcg@10": 0.5, **{f"fusion_{k}": v for k, v in fusion.items()}},
    )
    forget_serving()


def test_a_version_with_a_chosen_fusion_changes_hybrid_searchs_fusion(articles):
    # Today's fusion (no version chose one): the exact keyword match comes first.
    assert Article.objects.hybrid_search("XJ-9000").first() == articles[0]
    serve_with_fusion({"rrf_k": 0.0, "vector_weight": 1.0, "keyword_weight": 0.0})
    tuned = list(Article.objects.hybrid_search("XJ-9000"))
    # Keyword weight 0, rrf_k 0: the vector ranking, its first row scored 1 / (0 + 1).
    assert tuned[0] == articles[1] and tuned[0].score == pytest.approx(1.0)
    assert tuned[-1] == articles[0] and tuned[-1].score == pytest.approx(1 / len(ROWS))
    # An argument given still wins over the version's choice, each one on its own.
    given = Article.objects.hybrid_search("XJ-9000", keyword_weight=1.0).first()
    assert given == articles[0] and given.score == pytest.approx(1 / 1 + 1 / len(ROWS))
    # SEARCH["FUSION"]["TUNED"] False: the settings, as for a site that never fine-tunes.
    search = {**settings.SBERT.get("SEARCH", {}), "FUSION": {"TUNED": False}}
    with override_settings(SBERT={**settings.SBERT, "SEARCH": search}):
        assert Article.objects.hybrid_search("XJ-9000").first() == articles[0]


def test_a_version_that_chose_linear_fusion_searches_with_it(articles):
    linear = {"rrf_k": 60.0, "vector_weight": 0.8, "keyword_weight": 0.2}
    serve_with_fusion({**linear, "method": "linear"})
    results = list(Article.objects.hybrid_search("XJ-9000"))
    # Linear scores: the nearest row 0.8, the keyword match (farthest by vector) 0.2.
    assert results[0] == articles[1] and results[0].score == pytest.approx(0.8)
    assert results[-1] == articles[0] and results[-1].score == pytest.approx(0.2)
    # A weight given replaces the version's; the kind stays.
    given = Article.objects.hybrid_search("XJ-9000", keyword_weight=0.9).first()
    assert given == articles[0] and given.score == pytest.approx(0.9)
    # Another kind asked for (or rrf_k, which only rank fusion has): the settings' fusion,
    # none of the version's weights.
    for other in ({"fusion": "rrf"}, {"rrf_k": K}):
        top = Article.objects.hybrid_search("XJ-9000", **other).first()
        assert top == articles[0] and top.score == pytest.approx(1 / (K + 1) + 1 / (K + len(ROWS)))


def test_a_version_without_a_chosen_fusion_searches_as_today(articles):
    serve_with_fusion({})  # an active version whose run chose nothing (no positive eval pairs)
    top = Article.objects.hybrid_search("XJ-9000").first()
    assert top == articles[0] and top.score == pytest.approx(1 / (K + 1) + 1 / (K + len(ROWS)))
