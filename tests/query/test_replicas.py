"""Searches on a read replica: a real PostgreSQL streaming replica of the test database.

The module starts a hot standby of the test server (``tests/replica.py``: pg_basebackup -R, then
pg_ctl) and registers it as the database alias ``"replica"``. Rows are written and promotions
switched on the primary (``"default"``); the standby replays them, or not while its replay is
paused (``pg_wal_replay_pause()``), which is how a lagging replica looks to a search.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured
from django.db import connections

from django_sbert import indexing, serving
from django_sbert.finetuning import promotion
from django_sbert.models import EncoderVersion, VersionStatus
from tests.replica import Standby, primary_lsn, start_standby
from tests.testapp.models import Article
from tests.tiny_model import moved_tiny_encoder

TEXT = "central bank raises interest rates"
TITLES = [
    "central bank raises interest rates",
    "football team wins the cup",
    "new phone has a better camera",
    "storm closes schools",
    "city opens a new library",
    "scientists find water on mars",
]
REPLICA = "replica"
BOTH = ["default", REPLICA]


@pytest.fixture(scope="module")
def standby(django_db_setup, django_db_blocker):
    """A hot standby of the test server, registered as the database alias "replica"."""
    default = connections["default"].settings_dict
    host, port, user = default["HOST"], int(default["PORT"] or 5432), default["USER"]
    with django_db_blocker.unblock():
        server = start_standby(
            host=host, port=port, user=user, directory=Path(tempfile.mkdtemp(prefix="sbert-sb-"))
        )
    # A test mirror: the test runner neither creates nor flushes it (the standby is read-only
    # and replays the primary's own flush).
    connections.settings[REPLICA] = {
        **default,
        "HOST": server.host,
        "TEST": {**default["TEST"], "MIRROR": "default"},
    }
    yield server
    connections[REPLICA].close()
    del connections[REPLICA]
    del connections.settings[REPLICA]
    server.stop()


@pytest.fixture
def replica(standby, settings, tmp_path):
    """The standby, caught up with the primary; replay resumed after the test."""
    settings.SBERT = {**settings.SBERT, "MODEL_DIR": str(tmp_path / "models")}
    serving.forget_serving()
    yield standby
    standby.resume_replay()
    serving.forget_serving()


def caught_up(standby: Standby) -> None:
    """Wait until the standby replayed every commit of the primary so far."""
    default = connections["default"].settings_dict
    standby.wait_for(primary_lsn(default["HOST"], int(default["PORT"] or 5432), default["USER"]))


@pytest.fixture(scope="module")
def tuned():
    """A second version of the serving model: the tiny model with its weights moved."""
    return moved_tiny_encoder(django_settings.TINY_MODEL_DIR, seed=7)


def embedded_rows(titles: list[str]) -> list[Article]:
    rows = Article.objects.bulk_create(Article(title=t, body="story") for t in titles)
    indexing.embed_stale(indexing.get_ref("testapp.Article", "embedding"))
    return rows


def promote(tuned) -> str:
    """Stage the tuned version's vectors and switch to it, on the primary; its version."""
    ref = indexing.get_ref("testapp.Article", "embedding")
    directory, version = serving.save_encoder(tuned, "default", serving.base_label("default"))
    target = EncoderVersion.objects.create(
        encoder_name="default",
        version=version,
        directory=directory,
        parent=serving.base_version("default"),
        status=VersionStatus.PROMOTING,
    )
    promotion.stage_field(ref, version)
    promotion.switch(target)
    return version


def assert_rows_of(rows: list[Article], version: str, alias: str) -> None:
    """Non-empty rows that all carry ``version``, ranked by that version's query vector."""
    assert rows
    query = serving.encode_query(TEXT, "default", version)
    stored = dict(Article.objects.using(alias).values_list("pk", "embedding"))
    for row in rows:
        assert row.embedding_version == version
        expected = float(np.dot(query, np.asarray(stored[row.pk])))
        assert row.similarity == pytest.approx(expected, abs=1e-5)


@pytest.mark.heavy
@pytest.mark.django_db(transaction=True, databases=BOTH)
def test_searches_routed_to_the_replica_read_the_replicas_rows(replica, settings):
    settings.SBERT = {**settings.SBERT, "SEARCH": {"DATABASE": REPLICA}}
    embedded_rows(TITLES[1:])
    caught_up(replica)
    replica.pause_replay()
    (newest,) = embedded_rows(TITLES[:1])  # committed on the primary, not replayed yet

    searches = {
        "similar_to": Article.objects.similar_to(TEXT, k=10),
        # max_df=1: the replica's pg_stats are the primary's, which earlier tests may have
        # filled (ANALYZE) with these words as common ones; routing is the point here.
        "keyword_search": Article.objects.keyword_search(
            "bank OR cup OR phone", match="any", max_df=1.0
        ),
        "hybrid_search": Article.objects.hybrid_search(TEXT, k=10),
    }
    for name, qs in searches.items():
        pks = {row.pk for row in qs}
        assert qs.db == REPLICA, name
        assert pks and newest.pk not in pks, name
    # .using() before the search names the database: the primary has the new row.
    assert newest.pk in {row.pk for row in Article.objects.using("default").similar_to(TEXT)}

    replica.resume_replay()
    caught_up(replica)
    assert Article.objects.similar_to(TEXT, k=1)[0].pk == newest.pk


@pytest.mark.heavy
@pytest.mark.django_db(transaction=True, databases=BOTH)
def test_search_database_holds_for_querysets_made_semantic(replica, settings):
    """A model's plain queryset made semantic (the API's registry, the admin, the filter
    backend do it for models without SemanticManager) searches SEARCH["DATABASE"] too, not
    the database the router named when it was converted."""
    from django.db import models
    from rest_framework.request import Request
    from rest_framework.test import APIRequestFactory
    from rest_framework.views import APIView

    from django_sbert.api.filters import SemanticSearchFilter
    from django_sbert.query import as_semantic

    settings.SBERT = {**settings.SBERT, "SEARCH": {"DATABASE": REPLICA}}
    embedded_rows(TITLES[1:])
    caught_up(replica)
    replica.pause_replay()
    (newest,) = embedded_rows(TITLES[:1])  # committed on the primary, not replayed yet

    plain = models.QuerySet(model=Article)  # what a model with a plain manager gives
    searched = as_semantic(plain).similar_to(TEXT, k=10)
    pks = {row.pk for row in searched}
    assert searched.db == REPLICA
    assert pks and newest.pk not in pks

    request = Request(APIRequestFactory().get("/articles/", {"semantic": TEXT}))
    filtered = SemanticSearchFilter().filter_queryset(request, plain.all(), APIView())
    pks = {row.pk for row in filtered}
    assert filtered.db == REPLICA
    assert pks and newest.pk not in pks
    # .using() on the queryset still names the database: the primary has the new row.
    assert newest.pk in {row.pk for row in as_semantic(plain.using("default")).similar_to(TEXT)}


@pytest.mark.django_db(transaction=True, databases=BOTH)
def test_a_promotion_not_yet_replayed_leaves_the_replica_consistent(replica, tuned):
    """The switch committed on the primary; the replica has not replayed it. A search there
    reads the old version with the old rows (before: the primary's new version, which no row
    of the replica carries, so no row at all); after the replay, the new version."""
    rows = embedded_rows(TITLES)
    base = serving.serving_version("default")
    caught_up(replica)
    replica.pause_replay()
    new = promote(tuned)

    on_primary = list(Article.objects.similar_to(TEXT, k=4))  # default alias: the primary
    assert_rows_of(on_primary, new, "default")
    # The version cache is per database: the primary's fresh answer is not the replica's.
    assert serving.serving_record("default").version == new
    assert serving.serving_record("default", using=REPLICA).version == base
    on_replica = list(Article.objects.using(REPLICA).similar_to(TEXT, k=4))
    assert_rows_of(on_replica, base, REPLICA)
    hybrid = list(Article.objects.using(REPLICA).hybrid_search(TEXT, k=4))
    assert hybrid and all(row.embedding_version == base for row in hybrid if row.vector_rank)
    assert hybrid[0].vector_rank is not None
    # More like this, from a row read on the replica: its vector and version are the replica's.
    row = Article.objects.using(REPLICA).get(pk=rows[0].pk)
    like = list(Article.objects.using(REPLICA).similar_to(row, k=3))
    assert like and all(other.embedding_version == base for other in like)

    replica.resume_replay()
    caught_up(replica)
    serving.forget_serving()  # or wait VERSION_CACHE_SECONDS
    assert_rows_of(list(Article.objects.using(REPLICA).similar_to(TEXT, k=4)), new, REPLICA)


class ReplicaRouter:
    """The documented recipe: reads go to the replica, writes to the primary."""

    def db_for_read(self, model, **hints):
        return REPLICA

    def db_for_write(self, model, **hints):
        return "default"


@pytest.mark.django_db(transaction=True, databases=BOTH)
def test_with_a_replica_router_indexing_and_the_switch_use_the_primary(replica, settings, tuned):
    """A router sending every read to the replica: the switch still runs (one database, the
    primary), writers check the primary's version, and searches read the replica's."""
    settings.DATABASE_ROUTERS = [f"{__name__}.ReplicaRouter"]
    embedded_rows(TITLES)
    caught_up(replica)
    base = serving.serving_version("default", using=REPLICA)
    replica.pause_replay()
    new = promote(tuned)  # refused before: EncoderVersion read on the replica, rows on default

    assert serving.serving_record("default").version == new  # writers' default: the primary
    assert_rows_of(list(Article.objects.similar_to(TEXT, k=4)), base, REPLICA)
    # A row saved now is embedded with the primary's version, though reads go to the replica.
    (added,) = embedded_rows(["interest rates rise again"])
    version = Article.objects.using("default").values_list("embedding_version", flat=True)
    assert version.get(pk=added.pk) == new


def test_an_unknown_search_database_is_refused_with_what_to_do(settings):
    settings.SBERT = {**settings.SBERT, "SEARCH": {"DATABASE": "replca"}}
    with pytest.raises(ImproperlyConfigured, match="not a key of DATABASES.*it has: default"):
        Article.objects.similar_to([0.1] * 32)
