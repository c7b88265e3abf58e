"""similar_to(): results, chaining, the HNSW plan, per-query pgvector settings, encoder cache."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
from django.conf import settings
from django.core.paginator import Paginator
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext, override_settings
from pgvector.django import L2Distance

from django_sbert import serving
from django_sbert.query import SemanticQuerySet, options
from django_sbert.serving import encode_query, encode_texts, get_encoder
from tests.testapp.models import Article, Author, Note, Product

DIM = 32  # the tiny test model


def unit(vector) -> np.ndarray:
    vector = np.asarray(vector, dtype=np.float32)
    return vector / np.linalg.norm(vector)


@contextmanager
def search_settings(**search: Any) -> Iterator[None]:
    """``SBERT["SEARCH"]`` keys, and the constants of query/options.py (``ITERATIVE_SCAN``,
    ``MAX_SCAN_TUPLES``, ``ENABLE_SEQSCAN``) given by their names."""
    constants = {key: search.pop(key) for key in list(search) if hasattr(options, key)}
    with (
        pytest.MonkeyPatch.context() as patch,
        override_settings(SBERT={**settings.SBERT, "SEARCH": search}),
    ):
        for key, value in constants.items():
            patch.setattr(options, key, value)
        yield


@pytest.fixture
def articles(db, embed):
    author = Author.objects.create(name="Ada")
    rows = [
        ("Central bank raises interest rates", "The bank said prices rise fast.", "economy"),
        ("Election results", "The party won the vote in the city.", "politics"),
        ("Cats and dogs", "A cat plays with a dog.", "pets"),
        ("Market falls", "Prices fall as the market is slow.", "economy"),
        ("Guitar music", "A man plays guitar music.", "music"),
    ]
    objs = [Article.objects.create(title=t, body=b, category=c, author=author) for t, b, c in rows]
    embed(*objs)
    Article.objects.create(title="Not embedded yet", body="interest rates", category="economy")
    return objs


def cosine(a, b) -> float:
    return float(np.dot(unit(a), unit(b)))


# -- what it returns ---------------------------------------------------------------------------


def test_text_query_orders_by_cosine_and_annotates_similarity(articles):
    query = "Central bank raises interest rates\nThe bank said prices rise fast."
    results = list(Article.objects.similar_to(query))
    assert results[0] == articles[0]
    assert results[0].similarity == pytest.approx(1.0, abs=1e-5)
    sims = [r.similarity for r in results]
    assert sims == sorted(sims, reverse=True)
    qvec = encode_query(query)
    with CaptureQueriesContext(connection) as ctx:
        loaded = list(Article.objects.similar_to(query, k=5).defer(None))
    # set_config + the search + enable_seqscan put back (the test runs in a transaction); the
    # vectors come with the rows, not one query per row (with fewer rows than k, the serving
    # version is read once more: test_version_switch.py)
    assert len(ctx.captured_queries) == 3
    for row in loaded:
        assert row.similarity == pytest.approx(cosine(qvec, row.embedding), abs=1e-5)
    assert "Not embedded yet" not in {r.title for r in results}  # rows without vectors excluded
    assert len(results) == 5


def test_instance_query_is_more_like_this_without_itself(articles):
    results = list(Article.objects.similar_to(articles[0]))
    assert articles[0] not in results and len(results) == 4
    # an unsaved-vector copy of the instance is reloaded from the database
    fresh = Article(pk=articles[0].pk)
    assert list(Article.objects.similar_to(fresh)) == results


def test_instance_without_embedding_explains_what_to_do(articles):
    pending = Article.objects.get(title="Not embedded yet")
    with pytest.raises(ValueError, match="no embedding yet.*sbert_reindex testapp.Article"):
        Article.objects.similar_to(pending)


def test_vector_query_and_wrong_size(articles):
    vector = np.asarray(articles[2].embedding)
    assert Article.objects.similar_to(vector).first() == articles[2]
    assert Article.objects.similar_to(list(vector)).first() == articles[2]
    with pytest.raises(ValueError, match="3 dimensions but testapp.Article.embedding holds 32"):
        Article.objects.similar_to([0.1, 0.2, 0.3])
    with pytest.raises(TypeError, match="text, a model instance or a vector"):
        Article.objects.similar_to({"a": 1})


def test_other_models_and_sources(db, embed):
    note = Note.objects.create(text="cats play", tags="pets")
    product = Product.objects.create(name="Guitar", description="six strings")
    embed(note, product)
    assert Note.objects.similar_to("cats play\ntags: pets").first().similarity == pytest.approx(
        1.0, abs=1e-5
    )
    # more like this across models sharing an encoder: nothing is excluded
    assert Product.objects.similar_to(note).get() == product


def test_chaining_filter_exclude_select_related_values_and_pagination(articles):
    qs = Article.objects.filter(category="economy").similar_to("prices rise")
    assert {a.category for a in qs} == {"economy"} and len(qs) == 2
    chained = Article.objects.similar_to("prices rise").filter(category="economy")
    assert list(chained) == list(qs)
    assert articles[0] not in Article.objects.similar_to("prices").exclude(pk=articles[0].pk)

    rows = list(Article.objects.similar_to("prices").select_related("author"))
    with CaptureQueriesContext(connection) as ctx:
        assert {r.author.name for r in rows} == {"Ada"}
    assert len(ctx.captured_queries) == 0

    values = list(Article.objects.similar_to("prices").values("title", "similarity"))
    assert set(values[0]) == {"title", "similarity"}
    assert [v["similarity"] for v in values] == sorted(
        (v["similarity"] for v in values), reverse=True
    )

    ordered = list(Article.objects.similar_to("prices", k=100))
    paginator = Paginator(Article.objects.similar_to("prices"), 2)
    assert paginator.count == 5
    pages = [list(paginator.page(n).object_list) for n in paginator.page_range]
    assert [a for page in pages for a in page] == ordered
    assert Article.objects.similar_to("prices").count() == 5


def test_k_caps_unsliced_results_and_slicing_wins(articles):
    assert len(Article.objects.similar_to("prices", k=2)) == 2
    with search_settings(K=3):
        assert len(Article.objects.similar_to("prices")) == 3
    assert len(Article.objects.similar_to("prices", k=2)[:4]) == 4
    assert len(Article.objects.similar_to("prices", k=2)[1:]) == 2  # k rows after the offset


def test_min_similarity_filters_by_distance(articles):
    query = articles[0].embedding
    all_sims = [a.similarity for a in Article.objects.similar_to(query)]
    threshold = (all_sims[1] + all_sims[2]) / 2
    kept = list(Article.objects.similar_to(query, min_similarity=threshold))
    assert len(kept) == 2 and all(a.similarity >= threshold for a in kept)


def test_field_argument(articles):
    assert Article.objects.similar_to("x", field="embedding").count() == 5
    with pytest.raises(ValueError, match="has no EmbeddingField 'nope'"):
        Article.objects.similar_to("x", field="nope")
    with pytest.raises(ValueError, match="no EmbeddingField; add one"):
        SemanticQuerySet(model=Author).similar_to("x")


# -- HNSW: plan, per-query settings, filtered top-k --------------------------------------------


@pytest.fixture
def many_articles(db):
    """2,000 rows with random unit vectors; 1% of them (20) unpublished."""
    rng = np.random.default_rng(7)
    vectors = rng.standard_normal((2000, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    Article.objects.bulk_create(
        Article(title=f"a{i}", body="", published=(i % 100 != 0), embedding=vectors[i])
        for i in range(len(vectors))
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE testapp_article")
        # Small tables tempt the planner into a sequential scan; the point here is whether the
        # index CAN serve the query (it cannot when operator and opclass disagree).
        cursor.execute("SET LOCAL enable_seqscan = off")
    return vectors


@pytest.mark.heavy
def test_explain_shows_the_hnsw_index(many_articles):
    plan = Article.objects.similar_to(many_articles[0])[:10].explain()
    assert "article_embedding_hnsw" in plan, plan
    # The same query ordered by L2 cannot use a vector_cosine_ops index: the test can fail.
    l2_plan = Article.objects.order_by(L2Distance("embedding", many_articles[0]))[:10].explain()
    assert "article_embedding_hnsw" not in l2_plan


@pytest.mark.heavy
def test_filtered_top_k_returns_k_rows_with_iterative_scan(many_articles):
    query = many_articles[5]
    unpublished = Article.objects.filter(published=False)
    with search_settings(ITERATIVE_SCAN="off", EF_SEARCH=40):
        plan = unpublished.similar_to(query)[:10].explain()
        assert "article_embedding_hnsw" in plan, plan
        assert len(unpublished.similar_to(query)[:10]) < 10  # the pitfall, pgvector #259
    with search_settings(ITERATIVE_SCAN="relaxed_order", EF_SEARCH=40):
        results = list(unpublished.similar_to(query)[:10])
        assert "article_embedding_hnsw" in unpublished.similar_to(query)[:10].explain()
    assert len(results) == 10 and not any(r.published for r in results)
    sims = [r.similarity for r in results]
    assert sims == sorted(sims, reverse=True)
    # An approximate index (its graph differs per build) may miss a near row; most must match.
    exact = sorted((cosine(query, many_articles[i]) for i in range(0, 2000, 100)), reverse=True)
    found = sum(any(abs(sim - e) < 1e-5 for e in exact[:10]) for sim in sims)
    assert found >= 8, (sims, exact[:10])


SEARCH_SETTINGS = (
    "hnsw.ef_search",
    "hnsw.iterative_scan",
    "hnsw.max_scan_tuples",
    "enable_seqscan",
)


def record_search_settings(log: list[dict[str, str]]):
    """An execute_wrapper reading the session's hnsw.* settings just before a vector query."""

    def wrapper(execute, sql, params, many, context):
        if "<=>" in sql:
            with context["connection"].connection.cursor() as cursor:
                row = {}
                for name in SEARCH_SETTINGS:
                    cursor.execute(f"SHOW {name}")
                    row[name] = cursor.fetchone()[0]
            log.append(row)
        return execute(sql, params, many, context)

    return wrapper


def show(name: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute(f"SHOW {name}")
        return cursor.fetchone()[0]


@pytest.mark.django_db(transaction=True)
def test_search_settings_take_effect_in_autocommit_mode_and_do_not_leak(embed):
    embed(Article.objects.create(title="rates", body="rise"))
    log: list[dict[str, str]] = []
    assert connection.get_autocommit()
    with (
        search_settings(EF_SEARCH=123, ITERATIVE_SCAN="strict_order", MAX_SCAN_TUPLES=5000),
        connection.execute_wrapper(record_search_settings(log)),
    ):
        list(Article.objects.similar_to("rates"))
        list(Article.objects.similar_to("rates").iterator())
    assert log == 2 * [
        {
            "hnsw.ef_search": "123",
            "hnsw.iterative_scan": "strict_order",
            "hnsw.max_scan_tuples": "5000",
            "enable_seqscan": "off",
        }
    ]
    assert show("hnsw.ef_search") == "40"  # pgvector's default again: SET LOCAL ended with COMMIT
    assert show("hnsw.iterative_scan") == "off"
    assert show("enable_seqscan") == "on"


def test_search_settings_take_effect_inside_a_transaction(articles):
    log: list[dict[str, str]] = []
    with transaction.atomic(), connection.execute_wrapper(record_search_settings(log)):
        list(Article.objects.similar_to("rates", ef_search=77, iterative_scan="relaxed_order"))
    assert log[0]["hnsw.ef_search"] == "77"
    assert log[0]["hnsw.iterative_scan"] == "relaxed_order"
    assert log[0]["enable_seqscan"] == "off"


@pytest.mark.parametrize("before", ["on", "off"])
def test_inside_a_transaction_the_planner_setting_is_put_back_after_the_search(articles, before):
    """hnsw.* settings last until the caller's transaction ends, but enable_seqscan would
    change how the caller's other queries plan: it is restored once the search is done."""
    log: list[dict[str, str]] = []
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT set_config('enable_seqscan', %s, true)", [before])
        with connection.execute_wrapper(record_search_settings(log)):
            embedded = Article.objects.filter(embedding__isnull=False).count()
            assert len(list(Article.objects.similar_to("rates"))) == embedded
            list(Article.objects.similar_to("rates").iterator())  # streamed: restored at the end
        assert [row["enable_seqscan"] for row in log] == ["off", "off"]
        assert show("enable_seqscan") == before
        assert show("hnsw.ef_search") == "100"  # the usual SET LOCAL rule for hnsw.*


def test_enable_seqscan_true_leaves_the_planner_alone(articles):
    log: list[dict[str, str]] = []
    with (
        search_settings(ENABLE_SEQSCAN=True),
        connection.execute_wrapper(record_search_settings(log)),
    ):
        list(Article.objects.similar_to("rates"))
    assert log[0]["enable_seqscan"] == "on"


@pytest.mark.heavy
@pytest.mark.django_db
def test_the_index_serves_a_table_the_planner_would_read_whole():
    """On tables of a few thousand rows pgvector's cost estimate makes PostgreSQL's planner
    prefer reading every row, and it does not count the vectors kept out of line (TOAST),
    which made that 8 times slower than the HNSW index on 5,000 SciFact abstracts
    (docs/search.md). ENABLE_SEQSCAN=False (the default) keeps the search on the index."""
    rng = np.random.default_rng(3)
    vectors = rng.standard_normal((3000, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    Article.objects.bulk_create(
        Article(title=f"a{i}", body="", embedding=vectors[i]) for i in range(len(vectors))
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE testapp_article")
    query = vectors[0]
    with search_settings(ENABLE_SEQSCAN=True, EF_SEARCH=400):
        plan = Article.objects.similar_to(query)[:10].explain()
        assert "Seq Scan" in plan and "article_embedding_hnsw" not in plan, plan  # the pitfall
    with search_settings(EF_SEARCH=400):
        plan = Article.objects.similar_to(query)[:10].explain()
        assert "article_embedding_hnsw" in plan, plan
        nearest = list(Article.objects.similar_to(query)[:10])
    assert nearest[0].title == "a0" and len(nearest) == 10
    with pytest.raises(ValueError, match="iterative_scan must be one of"):
        Article.objects.similar_to("rates", iterative_scan="fast")


# -- the encoder: once per process, thread-safe, LRU-cached queries ----------------------------


def test_a_settings_change_forgets_the_cached_serving_version(db, settings):
    """Rows are stored with the serving version and searches match on it: a version cached
    under the settings before (here another document prompt, so another base version) must
    not outlive them, or rows embedded under it stop matching once the cache expires."""
    settings.SBERT = {**settings.SBERT, "VERSION_CACHE_SECONDS": 60}
    before = serving.encoder_version("default")
    encoders = settings.SBERT["ENCODERS"]
    prompted = {**encoders["default"], "DOCUMENT_PROMPT": "passage: "}
    settings.SBERT = {**settings.SBERT, "ENCODERS": {**encoders, "default": prompted}}
    after = serving.encoder_version("default")
    assert after != before and after == serving.base_version("default")


def test_encoder_is_loaded_once_across_threads(db, settings):
    settings.SBERT = {**settings.SBERT, "VERSION_CACHE_SECONDS": 60}
    serving.reset_encoders()
    # read here: the threads use the cached answer, not the database
    serving.serving_record("default")
    seen: list[object] = []
    barrier = threading.Barrier(6)

    def load():
        barrier.wait()
        seen.append(get_encoder("default"))

    threads = [threading.Thread(target=load) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(seen) == 6 and all(enc is seen[0] for enc in seen)


def test_encoder_threads_setting_is_applied(db):
    import torch

    get_encoder("default")
    assert settings.SBERT["ENCODERS"]["default"]["THREADS"] == 1
    assert torch.get_num_threads() == 1


def test_query_vectors_are_cached_and_bounded(db, monkeypatch):
    monkeypatch.setattr(serving.cache, "QUERY_CACHE_SIZE", 2)
    first = encode_query("rates rise")
    assert encode_query("rates rise") is first  # cache hit: no second forward pass
    assert not first.flags.writeable
    assert np.allclose(first, encode_texts(["rates rise"])[0], atol=1e-6)
    encode_query("cats")
    encode_query("dogs")
    assert serving.query_cache_info() == {"entries": 2, "size": 2}
    assert encode_query("rates rise") is not first  # evicted, least recently used


def test_forked_child_loads_its_own_encoder(db):
    parent = get_encoder("default")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: nothing inherited, so torch state from the parent is never reused
        os.close(read)
        os.write(write, b"empty" if not serving.cache._encoders else b"inherited")
        os._exit(0)
    os.close(write)
    message = os.read(read, 32)
    os.waitpid(pid, 0)
    assert message == b"empty"
    assert get_encoder("default") is parent


def test_explicit_ordering_after_similar_to_is_respected(articles):
    by_title = list(Article.objects.similar_to("prices").order_by("title"))
    assert [a.title for a in by_title] == sorted(a.title for a in by_title)
    farthest_first = [a.similarity for a in Article.objects.similar_to("prices").reverse()]
    assert farthest_first == sorted(farthest_first) and len(farthest_first) == 5


def test_vector_column_is_deferred_unless_asked_for(articles):
    row = Article.objects.similar_to("prices").first()
    assert "embedding" in row.get_deferred_fields()
    assert len(row.embedding) == DIM  # loaded on access
    only = Article.objects.only("title", "embedding").similar_to("prices").first()
    assert only.get_deferred_fields() >= {"body"} and "embedding" not in only.get_deferred_fields()


def test_concurrent_queries_from_threads_agree_with_sequential_ones(db, settings):
    settings.SBERT = {**settings.SBERT, "VERSION_CACHE_SECONDS": 60}
    # read here: the threads use the cached answer, not the database
    serving.serving_record("default")
    texts = [f"interest rates rise {i}" for i in range(12)]
    expected = {t: encode_texts([t])[0] for t in texts}
    results: dict[str, np.ndarray] = {}
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(texts))

    def search(text):
        try:
            barrier.wait()
            results[text] = encode_query(text)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=search, args=(t,)) for t in texts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    for text in texts:
        assert np.allclose(results[text], expected[text], atol=1e-6)


def test_query_text_is_encoded_with_query_threads(db, settings):
    """QUERY_THREADS applies while one query is encoded; the process setting is restored."""
    import torch

    from django_sbert.serving import encode_query, get_encoder

    seen: list[int] = []
    hook = get_encoder().pooling.register_forward_hook(
        lambda *args: seen.append(torch.get_num_threads())
    )
    before = torch.get_num_threads()
    try:
        encode_query("interest rates rise")
        assert seen == [1] and torch.get_num_threads() == before
        default = settings.SBERT["ENCODERS"]["default"]
        settings.SBERT = {**settings.SBERT, "ENCODERS": {"default": {**default, "THREADS": 2}}}
        serving.cache.QUERY_THREADS = None
        hook.remove()
        hook = get_encoder().pooling.register_forward_hook(
            lambda *args: seen.append(torch.get_num_threads())
        )
        encode_query("interest rates fall")
        assert seen[-1] == 2  # None: the process setting, as THREADS set it
    finally:
        serving.cache.QUERY_THREADS = 1
        hook.remove()


def test_searches_never_compare_vectors_of_two_encoder_versions(articles):
    """Rows whose vector another encoder version wrote (a promotion switching) are left out
    of searches by text and by instance of the serving version, and vice versa."""
    old = articles[3]
    Article.objects.filter(pk=old.pk).update(embedding_version="other-model:0123456789abcdef")
    query = "Market falls\nPrices fall as the market is slow."
    by_text = list(Article.objects.similar_to(query))
    assert old not in by_text and len(by_text) == 4
    assert old not in Article.objects.similar_to(articles[0])
    # More like a row of the other version: only rows of that version qualify (none here).
    old.refresh_from_db()
    assert list(Article.objects.similar_to(old)) == []
    # A vector passed in carries no version: the caller decides what it compares with.
    assert old in Article.objects.similar_to(encode_query(query))[:10]
    hybrid = {row.pk: row for row in Article.objects.hybrid_search("market falls")}
    assert old.pk in hybrid  # found by its words...
    assert hybrid[old.pk].similarity is None and hybrid[old.pk].vector_rank is None  # ...only
