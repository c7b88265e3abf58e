"""halfvec columns and the binary-quantized index (docs/scale.md), against real PostgreSQL +
pgvector: every search path uses the column's HNSW index, filtered searches still return k
rows, results agree with an exact scan, and a populated column migrates between types.

Every vector query a path sends is captured and EXPLAINed as it was sent, so the API and the
admin are checked the same way as the queryset methods.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from django.contrib import admin
from django.contrib.auth.models import User
from django.db import connection, models
from django.db.migrations.autodetector import MigrationAutodetector
from django.db.migrations.graph import MigrationGraph
from django.db.migrations.questioner import MigrationQuestioner
from django.db.migrations.state import ModelState, ProjectState
from django.test.utils import CaptureQueriesContext
from django.urls import include, path
from pgvector.django import HnswIndex

from django_sbert.admin import EmbeddingAdminMixin
from django_sbert.api import registry
from django_sbert.fields import EmbeddingField
from django_sbert.indexing import bulk_load
from django_sbert.serving import encoder_version
from tests.query.test_query import search_settings
from tests.scaleapp.models import BinaryArticle, HalfArticle, HalfReport

pytestmark = [pytest.mark.django_db, pytest.mark.urls(__name__)]

DIM = 32  # the tiny test model
ROWS = 2000
HALF_INDEX = "halfarticle_hnsw"
BINARY_INDEX = BinaryArticle._meta.get_field("embedding").binary_index_name
PASSAGE_INDEX = HalfReport._meta.get_field("embedding").passage_model._meta.indexes[0].name

site = admin.AdminSite(name="scale_admin")
site.register(HalfArticle, type("HalfAdmin", (EmbeddingAdminMixin, admin.ModelAdmin), {}))
site.register(HalfReport, type("ReportAdmin", (EmbeddingAdminMixin, admin.ModelAdmin), {}))
site.register(BinaryArticle, type("BinaryAdmin", (EmbeddingAdminMixin, admin.ModelAdmin), {}))
urlpatterns = [path("admin/", site.urls), path("api/sbert/", include("django_sbert.api.urls"))]


def unit_rows(n: int, seed: int) -> np.ndarray:
    vectors = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def load(model, vectors: np.ndarray) -> None:
    """``ROWS`` rows, 1% of them (every 100th) in category "rare", current for the serving
    encoder version (bulk_load(); a field with passages takes its bookkeeping by hand)."""
    words = ["bank", "rates", "dog", "music", "vote", "court", "tax", "market"]
    objs = [model(title=f"{words[i % 8]} {words[i // 8 % 8]}") for i in range(len(vectors))]
    for i, obj in enumerate(objs):
        if hasattr(obj, "category"):
            obj.category = "" if i % 100 else "rare"
    field = model._meta.get_field("embedding")
    if field.passage_config is None:
        bulk_load(objs, vectors)
    else:
        for obj, vector in zip(objs, vectors, strict=True):
            obj.embedding = vector
            obj.embedding_hash = field.text_hash(obj.title)
            obj.embedding_version = encoder_version()
        model.objects.bulk_create(objs)
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {model._meta.db_table}")
        # Small tables tempt the planner into a sequential scan; the point here is whether the
        # index CAN serve each path's query (it cannot when operator and opclass disagree).
        cursor.execute("SET LOCAL enable_seqscan = off")


@pytest.fixture
def half(db):
    vectors = unit_rows(ROWS, 1)
    load(HalfArticle, vectors)
    return vectors


@pytest.fixture
def report(db):
    """HalfReport rows, each with one passage (the whole title) of the row's vector."""
    vectors = unit_rows(ROWS, 4)
    load(HalfReport, vectors)
    passage = HalfReport._meta.get_field("embedding").passage_model
    passage.objects.bulk_create(
        passage(row=row, ordinal=0, start=0, end=len(row.title), text=row.title, vector=vector)
        for row, vector in zip(HalfReport.objects.order_by("pk"), vectors, strict=True)
    )
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {passage._meta.db_table}")
    return vectors


@pytest.fixture
def binary(db):
    vectors = unit_rows(ROWS, 2)
    load(BinaryArticle, vectors)
    return vectors


def vector_plans(run) -> list[str]:
    """EXPLAIN of every statement ``run()`` sends that compares vectors, as it was sent."""
    with CaptureQueriesContext(connection) as queries:
        run()
    plans = []
    for query in queries.captured_queries:
        sql = query["sql"]
        if "<=>" in sql or "<~>" in sql:
            with connection.cursor() as cursor:
                cursor.execute("EXPLAIN " + sql)
                plans.append("\n".join(row[0] for row in cursor.fetchall()))
    assert plans, "no vector query was sent"
    return plans


def uses(index: str, run) -> bool:
    return any(index in plan for plan in vector_plans(run))


# -- halfvec: every path casts the query to halfvec(n) and uses the halfvec index ------------


@pytest.mark.heavy
def test_halfvec_column_type_and_query_cast(half):
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
            "WHERE attrelid = 'scaleapp_halfarticle'::regclass AND attname = 'embedding'"
        )
        assert cursor.fetchone()[0] == f"halfvec({DIM})"
    sql = str(HalfArticle.objects.similar_to(half[0])[:10].query)
    assert f"::halfvec({DIM})" in sql


@pytest.mark.heavy
@pytest.mark.parametrize(
    "path",
    ["text", "instance", "vector", "hybrid", "passages", "vector filtered"],
)
def test_every_halfvec_path_uses_its_hnsw_index(half, report, path):
    row = HalfArticle.objects.first()
    searches = {
        "text": lambda: list(HalfArticle.objects.similar_to("bank rates")[:10]),
        "instance": lambda: list(HalfArticle.objects.similar_to(row)[:10]),
        "vector": lambda: list(HalfArticle.objects.similar_to(half[3])[:10]),
        "hybrid": lambda: list(HalfArticle.objects.hybrid_search("bank")[:10]),
        "vector filtered": lambda: list(
            HalfArticle.objects.filter(category="rare").similar_to(half[3])[:10]
        ),
    }
    if path == "passages":  # a halfvec field's passages keep float32 vectors, and their index
        assert uses(PASSAGE_INDEX, lambda: list(HalfReport.objects.similar_to(report[5])[:10]))
        assert uses(PASSAGE_INDEX, lambda: list(HalfReport.objects.similar_to("bank")[:10]))
        return
    assert uses(HALF_INDEX, searches[path])


@pytest.mark.heavy
def test_api_search_and_similar_use_the_index(half, report, binary, client):
    """search/ by the halfvec index, the passage index (a field with passages) or the binary
    index (binary_index=True); similar/ compares the row's own vector through its index."""
    for model in (HalfArticle, HalfReport, BinaryArticle):
        registry.register(model, fields=["id", "title"])
    try:
        client.force_login(User.objects.create_superuser("root"))
        row = HalfArticle.objects.first()
        search = "/api/sbert/search/"
        for url, params, index in [
            (search, {"model": "scaleapp.halfarticle", "q": "bank"}, HALF_INDEX),
            (search, {"model": "scaleapp.halfreport", "q": "bank"}, PASSAGE_INDEX),
            (search, {"model": "scaleapp.binaryarticle", "q": "bank"}, BINARY_INDEX),
            (f"/api/sbert/similar/scaleapp.halfarticle/{row.pk}/", {}, HALF_INDEX),
        ]:

            def request(url=url, params=params):
                response = client.get(url, params)
                assert response.status_code == 200 and response.json()["results"]

            assert uses(index, request), url
    finally:
        for model in (HalfArticle, HalfReport, BinaryArticle):
            registry.unregister(model)


@pytest.mark.heavy
def test_admin_search_and_similar_items_use_the_index(half, binary, client):
    client.force_login(User.objects.create_superuser("root"))
    row = HalfArticle.objects.first()
    admin_url = "/admin/scaleapp/"

    def get(url, **params):
        return lambda: client.get(url, params).status_code == 200 or pytest.fail(url)

    # The change list's search box, then the change page's similar items (the row's vector).
    # (A field with passages runs the queryset's passage search, checked above; for a page of
    # 100 rows over this small passage table the planner rightly prefers a sort.)
    assert uses(HALF_INDEX, get(f"{admin_url}halfarticle/", q="bank rates"))
    assert uses(BINARY_INDEX, get(f"{admin_url}binaryarticle/", q="bank rates"))
    assert uses(HALF_INDEX, get(f"{admin_url}halfarticle/{row.pk}/change/"))


def test_halfvec_results_agree_with_an_exact_scan(half):
    query = half[7] + 0.1 * half[8]
    found = [r.pk for r in HalfArticle.objects.similar_to(query)[:10]]
    pks = list(HalfArticle.objects.order_by("pk").values_list("pk", flat=True))
    exact = np.argsort(-(half @ (query / np.linalg.norm(query))))[:10]
    assert len(set(found) & {pks[i] for i in exact}) >= 9, (found, exact)


@pytest.mark.heavy
def test_halfvec_filtered_search_returns_k_rows(half):
    rare = HalfArticle.objects.filter(category="rare")
    results = list(rare.similar_to(half[11])[:10])
    assert len(results) == 10 and {r.category for r in results} == {"rare"}


# -- binary quantization with re-ranking -----------------------------------------------------


@pytest.mark.heavy
def test_binary_index_exists_on_the_codes(binary):
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = %s", [BINARY_INDEX])
        definition = cursor.fetchone()[0]
    assert "USING hnsw" in definition and "bit_hamming_ops" in definition
    assert f"binary_quantize(embedding))::bit({DIM})" in definition


@pytest.mark.heavy
@pytest.mark.parametrize("path", ["text", "instance", "vector", "hybrid", "filtered"])
def test_every_binary_path_uses_the_binary_index(binary, path):
    row = BinaryArticle.objects.first()
    searches = {
        "text": lambda: list(BinaryArticle.objects.similar_to("bank rates")[:10]),
        "instance": lambda: list(BinaryArticle.objects.similar_to(row)[:10]),
        "vector": lambda: list(BinaryArticle.objects.similar_to(binary[3])[:10]),
        "hybrid": lambda: list(BinaryArticle.objects.hybrid_search("bank")[:10]),
        "filtered": lambda: list(
            BinaryArticle.objects.filter(category="rare").similar_to(binary[3])[:10]
        ),
    }
    assert uses(BINARY_INDEX, searches[path])


def test_binary_search_sql_reranks_the_hamming_top_n_exactly(binary):
    sql = str(BinaryArticle.objects.similar_to(binary[0], oversample=5)[:10].query)
    assert "<~>" in sql and "binary_quantize" in sql
    assert "LIMIT 50" in sql  # k x oversample candidates ...
    assert "ORDER BY cosine_distance(" in sql  # ... re-ranked by exact cosine distance


@pytest.mark.heavy
def test_binary_search_is_exact_when_the_candidates_cover_the_table(binary):
    query = binary[21] + 0.2 * binary[22]
    results = list(BinaryArticle.objects.similar_to(query, oversample=ROWS // 10)[:10])
    pks = list(BinaryArticle.objects.order_by("pk").values_list("pk", flat=True))
    exact = np.argsort(-(binary @ (query / np.linalg.norm(query))))[:10]
    assert [r.pk for r in results] == [pks[i] for i in exact]
    sims = [r.similarity for r in results]
    assert sims == sorted(sims, reverse=True)


@pytest.mark.heavy
def test_binary_search_ranks_candidates_by_cosine_and_recalls_most(binary):
    query = binary[40]
    results = list(BinaryArticle.objects.similar_to(query, oversample=10)[:10])
    assert results[0].pk == BinaryArticle.objects.order_by("pk")[40].pk  # the row itself
    sims = [r.similarity for r in results]
    assert sims == sorted(sims, reverse=True)
    assert sims[0] == pytest.approx(1.0, abs=1e-3)  # halfvec keeps ~3 significant digits


@pytest.mark.heavy
def test_binary_filtered_search_returns_k_rows_with_iterative_scan(binary, settings):
    rare = BinaryArticle.objects.filter(category="rare")
    search = {"EF_SEARCH": 10, "BINARY_OVERSAMPLE": 2}
    with search_settings(**search, ITERATIVE_SCAN="off"):
        short = list(rare.similar_to(binary[5])[:10])
    with search_settings(**search, ITERATIVE_SCAN="relaxed_order"):
        results = list(rare.similar_to(binary[5])[:10])
    assert len(short) < 10  # the pitfall the iterative scan fixes (pgvector #259)
    assert len(results) == 10 and {r.category for r in results} == {"rare"}


@pytest.mark.heavy
def test_binary_count_and_min_similarity(binary):
    qs = BinaryArticle.objects.similar_to(binary[9], min_similarity=0.5)
    exact = int(((binary @ binary[9]) >= 0.5 - 1e-3).sum())
    assert abs(qs.count() - exact) <= 1  # halfvec rounding at the threshold


@pytest.mark.heavy
def test_oversample_needs_a_binary_index(half):
    with pytest.raises(ValueError, match="binary_index=True"):
        HalfArticle.objects.similar_to(half[0], oversample=4)
    with pytest.raises(ValueError, match="non-negative integer"):
        BinaryArticle.objects.similar_to(half[0], oversample=-1)


@pytest.mark.heavy
def test_oversample_zero_searches_the_float_vectors(binary):
    sql = str(BinaryArticle.objects.similar_to(binary[0], oversample=0)[:10].query)
    assert "<~>" not in sql and "<=>" in sql


# -- migrating a populated column between vector and halfvec ---------------------------------


def test_migration_from_vector_to_halfvec_on_a_populated_table(transactional_db):
    """makemigrations' operations for precision="float32" -> "float16" (index swapped with
    it), applied to a table with rows: the values survive and the new index serves searches."""

    def state(precision: str, opclass: str) -> ProjectState:
        fields = [
            ("id", models.BigAutoField(primary_key=True)),
            ("embedding", EmbeddingField(source=("id",), dimensions=DIM, precision=precision)),
        ]
        options = {
            "indexes": [HnswIndex(name="migrated_hnsw", fields=["embedding"], opclasses=[opclass])]
        }
        project = ProjectState()
        project.add_model(ModelState("scaleapp", "Migrated", fields, options))
        return project

    before = state("float32", "vector_cosine_ops")
    after = state("float16", "halfvec_cosine_ops")
    operations = (
        MigrationAutodetector(before, after, MigrationQuestioner(specified_apps={"scaleapp"}))
        .changes(graph=MigrationGraph())["scaleapp"][0]
        .operations
    )
    kinds = [type(op).__name__ for op in operations]
    assert kinds.index("AlterField") < kinds.index("AddIndex")
    assert kinds.index("RemoveIndex") < kinds.index("AlterField")

    vectors = unit_rows(50, 3)
    with connection.schema_editor() as editor:
        editor.create_model(before.apps.get_model("scaleapp", "Migrated"))
    try:
        with connection.cursor() as cursor:
            for vector in vectors:
                cursor.execute(
                    "INSERT INTO scaleapp_migrated (embedding) VALUES (%s)",
                    ["[" + ",".join(map(str, vector.tolist())) + "]"],
                )
        current = before
        for operation in operations:
            new = current.clone()
            operation.state_forwards("scaleapp", new)
            with connection.schema_editor() as editor:
                operation.database_forwards("scaleapp", editor, current, new)
            current = new
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
                "WHERE attrelid = 'scaleapp_migrated'::regclass AND attname = 'embedding'"
            )
            assert cursor.fetchone()[0] == f"halfvec({DIM})"
            cursor.execute("SELECT embedding::text FROM scaleapp_migrated ORDER BY id")
            stored = np.array([json.loads(r[0]) for r in cursor.fetchall()], dtype=np.float32)
            np.testing.assert_allclose(stored, vectors, atol=1e-3)  # float16 rounding only
            cursor.execute("SET enable_seqscan = off")
            cursor.execute(
                "EXPLAIN SELECT id FROM scaleapp_migrated "
                f"ORDER BY embedding <=> %s::halfvec({DIM}) LIMIT 5",
                ["[" + ",".join(map(str, vectors[0].tolist())) + "]"],
            )
            assert "migrated_hnsw" in "\n".join(r[0] for r in cursor.fetchall())
            cursor.execute("RESET enable_seqscan")
    finally:
        with connection.schema_editor() as editor:
            editor.execute("DROP TABLE IF EXISTS scaleapp_migrated")
