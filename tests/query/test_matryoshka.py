"""Matryoshka fields (``EmbeddingField(dimensions=16)`` on the tiny 32-dimensional encoder),
against real PostgreSQL + pgvector: the column is ``vector(16)``, every write stores the
encoder's vector cut to 16 dimensions and re-normalized, and every search path (text,
instance, vector, hybrid, passages, the API, the admin) ranks as an exact numpy search over
those cut vectors does, through the column's HNSW index.
"""

from __future__ import annotations

import numpy as np
import pytest
from django.contrib import admin
from django.contrib.auth.models import User
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import include, path

from django_sbert import indexing
from django_sbert.admin import EmbeddingAdminMixin
from django_sbert.api import registry
from django_sbert.encoder.matryoshka import truncate
from django_sbert.fields import vector_literal
from django_sbert.indexing import bulk_load
from django_sbert.query.vectors import QuerySource
from django_sbert.serving import encode_query, encode_texts
from tests.scaleapp.models import MatryoshkaArticle, MatryoshkaReport

pytestmark = [pytest.mark.django_db, pytest.mark.urls(__name__)]

FULL, CUT = 32, 16  # the tiny model's width, and the fields' dimensions
INDEX = "matryoshkaarticle_hnsw"
WORDS = ["bank", "rates", "dog", "music", "vote", "court", "tax", "market", "river", "song"]

site = admin.AdminSite(name="matryoshka_admin")
site.register(MatryoshkaArticle, type("MAdmin", (EmbeddingAdminMixin, admin.ModelAdmin), {}))
urlpatterns = [path("admin/", site.urls), path("api/sbert/", include("django_sbert.api.urls"))]


def titles(n: int) -> list[str]:
    return [f"{WORDS[i % 10]} {WORDS[i // 10 % 10]} {i}" for i in range(n)]


def full_document_vectors(texts: list[str]) -> np.ndarray:
    """The encoder's own 32-dimensional vectors of ``texts``, as rows are encoded."""
    return encode_texts(texts, "default", role="document")


@pytest.fixture
def articles(db) -> list[MatryoshkaArticle]:
    """60 rows embedded through the indexing path (what the Celery task runs)."""
    rows = MatryoshkaArticle.objects.bulk_create(
        MatryoshkaArticle(title=t, category="" if i % 5 else "rare")
        for i, t in enumerate(titles(60))
    )
    outcome = indexing.embed_pks(
        indexing.get_ref("scaleapp.MatryoshkaArticle", "embedding"), [r.pk for r in rows]
    )
    assert outcome.embedded == len(rows)
    return list(MatryoshkaArticle.objects.order_by("pk"))


def stored(model=MatryoshkaArticle) -> tuple[list[int], np.ndarray]:
    pks, vectors = zip(*model.objects.order_by("pk").values_list("pk", "embedding"), strict=True)
    return list(pks), np.stack([np.asarray(v, dtype=np.float32) for v in vectors])


def exact_order(query: np.ndarray, exclude: int | None = None, k: int = 10) -> list[int]:
    """Primary keys of the ``k`` nearest rows by an exact numpy search of the stored vectors."""
    pks, vectors = stored()
    scores = vectors @ query
    order = [pks[i] for i in np.argsort(-scores, kind="stable") if pks[i] != exclude]
    return order[:k]


def similarities(query: np.ndarray) -> dict[int, float]:
    pks, vectors = stored()
    return dict(zip(pks, (vectors @ query).tolist(), strict=True))


def query_vector(text: str) -> np.ndarray:
    return truncate(encode_query(text, "default"), CUT)


def uses_index(run) -> bool:
    """Whether the plan of any vector statement ``run()`` sends uses the HNSW index."""
    with CaptureQueriesContext(connection) as queries:
        run()
    plans = []
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {MatryoshkaArticle._meta.db_table}")
        cursor.execute("SET LOCAL enable_seqscan = off")  # a small table: can the index serve?
        for query in queries.captured_queries:
            if "<=>" in query["sql"]:
                cursor.execute("EXPLAIN " + query["sql"])
                plans.append("\n".join(row[0] for row in cursor.fetchall()))
    assert plans, "no vector query was sent"
    return any(INDEX in plan for plan in plans)


# -- the column and the writes -------------------------------------------------------------


def test_the_column_is_vector_16():
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
            "WHERE attrelid = 'scaleapp_matryoshkaarticle'::regclass AND attname = 'embedding'"
        )
        assert cursor.fetchone()[0] == f"vector({CUT})"
    field = MatryoshkaArticle._meta.get_field("embedding")
    assert field.db_type(connection) == f"vector({CUT})" and field.truncates
    assert field.deconstruct()[3]["dimensions"] == CUT  # what the migration records


def test_rows_store_the_cut_and_renormalized_full_vectors(articles):
    _, vectors = stored()
    full = full_document_vectors([a.title for a in articles])
    assert full.shape[1] == FULL and vectors.shape[1] == CUT
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(vectors, truncate(full, CUT), atol=1e-6)
    assert not np.allclose(vectors, full[:, :CUT], atol=1e-3)  # re-normalized, not just cut


def test_bulk_load_takes_full_vectors_and_cuts_them():
    texts = titles(6)
    full = full_document_vectors(texts)
    bulk_load([MatryoshkaArticle(title=t) for t in texts[:3]], full[:3])  # the encoder's width
    bulk_load([MatryoshkaArticle(title=t) for t in texts[3:]], truncate(full[3:], CUT))  # cut
    _, vectors = stored()
    np.testing.assert_allclose(vectors, truncate(full, CUT), atol=1e-6)
    with pytest.raises(
        ValueError, match=r"holds 16 \(or 32, cut to 16\)-dimensional vectors, not 20"
    ):
        bulk_load([MatryoshkaArticle(title="x")], np.ones((1, 20)))


def test_passages_and_the_row_vector_are_cut_too():
    report = MatryoshkaReport.objects.create(title=" ".join(WORDS * 3))
    ref = indexing.get_ref("scaleapp.MatryoshkaReport", "embedding")
    assert indexing.embed_pks(ref, [report.pk]).embedded == 1
    passage_model = MatryoshkaReport._meta.get_field("embedding").passage_model
    rows = list(passage_model.objects.filter(row=report).order_by("ordinal"))
    assert len(rows) > 1
    passage_vectors = np.stack([np.asarray(p.vector, dtype=np.float32) for p in rows])
    full = encode_texts([p.text for p in rows], "default", role="document")
    np.testing.assert_allclose(passage_vectors, truncate(full, CUT), atol=1e-5)
    _, row_vector = stored(MatryoshkaReport)
    mean = passage_vectors.mean(axis=0)
    np.testing.assert_allclose(row_vector[0], mean / np.linalg.norm(mean), atol=1e-5)
    results = list(MatryoshkaReport.objects.similar_to("bank rates")[:1])
    assert [r.pk for r in results] == [report.pk]


# -- the searches ------------------------------------------------------------------------------


def test_text_search_ranks_as_an_exact_search_of_the_cut_vectors(articles):
    query = query_vector("bank music")
    results = list(MatryoshkaArticle.objects.similar_to("bank music")[:10])
    assert [r.pk for r in results] == exact_order(query)
    sims = similarities(query)
    for r in results:
        assert r.similarity == pytest.approx(sims[r.pk], abs=1e-5)


def test_a_full_vector_given_is_cut_like_the_stored_ones(articles):
    full = encode_query("court tax", "default")
    cut = truncate(full, CUT)
    by_full = [r.pk for r in MatryoshkaArticle.objects.similar_to(full)[:10]]
    by_cut = [r.pk for r in MatryoshkaArticle.objects.similar_to(cut)[:10]]
    assert by_full == by_cut == exact_order(cut)
    with pytest.raises(ValueError, match="has 20 dimensions but .* holds 16 \\(or its encoder"):
        MatryoshkaArticle.objects.similar_to(np.ones(20))  # neither 16 nor 32 (nor 8 < 16)
    with pytest.raises(ValueError, match="has 8 dimensions"):
        MatryoshkaArticle.objects.similar_to(truncate(full, 8))


def test_instance_search_ranks_as_an_exact_search(articles):
    row = articles[7]
    results = [r.pk for r in MatryoshkaArticle.objects.similar_to(row)[:10]]
    _, vectors = stored()
    assert results == exact_order(vectors[7], exclude=row.pk)


def test_filtered_search_returns_k_rows_in_exact_order(articles):
    query = query_vector("vote river")
    results = list(MatryoshkaArticle.objects.filter(category="rare").similar_to("vote river")[:5])
    pks, vectors = stored()
    rare = {a.pk for a in articles if a.category == "rare"}
    order = [pks[i] for i in np.argsort(-(vectors @ query), kind="stable") if pks[i] in rare]
    assert [r.pk for r in results] == order[:5]


def test_hybrid_vector_side_ranks_as_an_exact_search(articles):
    query = query_vector("dog song")
    results = list(MatryoshkaArticle.objects.hybrid_search("dog song", k=60))
    by_vector = sorted((r for r in results if r.vector_rank), key=lambda r: r.vector_rank)
    assert [r.pk for r in by_vector[:10]] == exact_order(query)
    sims = similarities(query)
    for r in by_vector:
        assert r.similarity == pytest.approx(sims[r.pk], abs=1e-5)


def test_every_path_uses_the_hnsw_index(articles):
    row = articles[3]
    assert uses_index(lambda: list(MatryoshkaArticle.objects.similar_to("bank")[:10]))
    assert uses_index(lambda: list(MatryoshkaArticle.objects.similar_to(row)[:10]))
    assert uses_index(lambda: list(MatryoshkaArticle.objects.hybrid_search("bank")[:10]))
    sql = str(MatryoshkaArticle.objects.similar_to("bank")[:10].query)
    assert f"::vector({CUT})" in sql


def test_api_search_and_similar_rank_as_an_exact_search(articles, client):
    registry.register(MatryoshkaArticle, fields=["id", "title"])
    try:
        client.force_login(User.objects.create_superuser("root"))
        response = client.get(
            "/api/sbert/search/", {"model": "scaleapp.matryoshkaarticle", "q": "tax market"}
        )
        assert response.status_code == 200, response.content
        found = [r["id"] for r in response.json()["results"]]
        assert found == exact_order(query_vector("tax market"))
        row = articles[11]
        response = client.get(f"/api/sbert/similar/scaleapp.matryoshkaarticle/{row.pk}/")
        assert response.status_code == 200, response.content
        found = [r["id"] for r in response.json()["results"]]
        _, vectors = stored()
        assert found == exact_order(vectors[11], exclude=row.pk)[: len(found)]
    finally:
        registry.unregister(MatryoshkaArticle)


def test_admin_search_and_similar_items(articles, client):
    client.force_login(User.objects.create_superuser("root"))
    response = client.get("/admin/scaleapp/matryoshkaarticle/", {"q": "bank rates"})
    assert response.status_code == 200
    page = response.content.decode()
    # The change list shows the rows in the order of an exact search of the cut vectors.
    links = [
        page.find(f"matryoshkaarticle/{pk}/change/")
        for pk in exact_order(query_vector("bank rates"))[:5]
    ]
    assert -1 not in links and links == sorted(links)
    response = client.get(f"/admin/scaleapp/matryoshkaarticle/{articles[2].pk}/change/")
    assert response.status_code == 200


def test_a_search_run_again_after_a_switch_cuts_its_new_vector():
    source = QuerySource(encoder="default", version="v", text="bank", dimensions=CUT)
    full = encode_query("bank", "default")
    np.testing.assert_allclose(source.fitted(full), truncate(full, CUT))
    assert vector_literal(source.fitted(truncate(full, CUT))) == vector_literal(truncate(full, CUT))
