"""A search at the moment of a switch (issue 14, item 12).

A search by a text or a row reads the encoder version of its query vector, then compares that
vector with the rows of that version. When a promotion's switch commits between the two, every
row already carries the new version: without a retry the search returns nothing. Here the
switch is real (``finetuning.promotion.switch`` on two EncoderVersion rows, the second a copy
of the tiny model with other weights, saved the way a training run saves a candidate), and it
commits after the search queryset was built (so after the version was read) and before it is
evaluated.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from django.conf import settings as django_settings
from django.core.paginator import Paginator
from django.db import connection, connections
from django.test.utils import CaptureQueriesContext

from django_sbert import indexing, serving
from django_sbert.finetuning import promotion
from django_sbert.models import EncoderVersion, VersionStatus
from django_sbert.query.vectors import REBOUND
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
    "film wins best picture",
    "train strike delays commuters",
]


@pytest.fixture(scope="module")
def tuned():
    """A second version of the serving model: the tiny model with its weights moved."""
    return moved_tiny_encoder(django_settings.TINY_MODEL_DIR, seed=11)


@pytest.fixture
def switch_ready(model_dir, tuned) -> Callable[[], EncoderVersion]:
    """Rows embedded by the serving model, and a second version being promoted whose vectors
    are staged: what ``promotion.run_promotion`` leaves just before it switches. Returns the
    switch itself, to be run when the test says."""
    Article.objects.bulk_create(Article(title=t, body=f"story {i}") for i, t in enumerate(TITLES))
    ref = indexing.get_ref("testapp.Article", "embedding")
    indexing.embed_stale(ref)
    directory, version = serving.save_encoder(tuned, "default", serving.base_label("default"))
    target = EncoderVersion.objects.create(
        encoder_name="default",
        version=version,
        directory=directory,
        parent=serving.base_version("default"),
        status=VersionStatus.PROMOTING,
    )
    promotion.stage_field(ref, version)

    def switch() -> EncoderVersion:
        promotion.switch(EncoderVersion.objects.get(pk=target.pk))
        return target

    return switch


def check_new_version(rows: list[Article], version: str, query: np.ndarray) -> None:
    """Rows of ``version``, ranked by their similarity to ``query`` (that version's vector)."""
    assert rows
    stored = dict(Article.objects.values_list("pk", "embedding"))
    for row in rows:
        assert row.embedding_version == version
        expected = float(np.dot(query, np.asarray(stored[row.pk])))
        assert row.similarity == pytest.approx(expected, abs=1e-5)


EVALUATIONS: dict[str, Callable[[Any], list[Any]]] = {
    "list": lambda qs: list(qs),
    "for loop": lambda qs: [row for row in qs],
    "slice": lambda qs: list(qs[2:5]),
    "index": lambda qs: [qs[0]],
    "first()": lambda qs: [qs.first()],
    "iterator()": lambda qs: list(qs.iterator()),
    "paginator page 2": lambda qs: list(Paginator(qs, 3).page(2).object_list),
}


@pytest.mark.django_db
@pytest.mark.parametrize("how", list(EVALUATIONS))
def test_a_text_search_read_before_the_switch_returns_the_new_versions_rows(switch_ready, how):
    """Item 12: the search read the old version, the switch committed, then the statement
    ran: the search notices that the version moved, encodes the text again with the new one
    and runs once more (before, it returned no row)."""
    qs = Article.objects.similar_to(TEXT, k=6)  # reads and encodes with the serving version
    sql_before = str(qs.query)
    target = switch_ready()
    rows = EVALUATIONS[how](qs)
    query = serving.encode_query(TEXT, "default", target.version)
    check_new_version(rows, target.version, query)
    expected = {"slice": 3, "index": 1, "first()": 1, "paginator page 2": 3}.get(how, 6)
    assert len(rows) == expected
    # the queryset itself was not changed: same SQL, and it can still be chained
    assert str(qs.query) == sql_before and not hasattr(qs.query, REBOUND)
    assert qs.filter(title__startswith="central").count() == 1


@pytest.mark.django_db
def test_count_exists_and_values_after_a_switch(switch_ready):
    searches = [Article.objects.similar_to(TEXT) for _ in range(3)]
    target = switch_ready()
    assert searches[0].count() == len(TITLES)
    assert searches[1].exists()
    pks = list(searches[2].values_list("pk", flat=True))
    assert len(pks) == len(TITLES)
    assert set(Article.objects.values_list("embedding_version", flat=True)) == {target.version}


@pytest.mark.django_db
def test_a_more_like_this_search_reads_the_rows_new_vector(switch_ready):
    source = Article.objects.defer(None).get(title=TITLES[0])
    qs = Article.objects.similar_to(source, k=4)  # the row's vector of the old version
    target = switch_ready()
    rows = list(qs)
    assert len(rows) == 4 and source not in rows
    new_vector = np.asarray(Article.objects.get(pk=source.pk).embedding)
    check_new_version(rows, target.version, new_vector)


@pytest.mark.django_db
def test_a_hybrid_search_gets_its_vector_side_back(switch_ready):
    """After the switch the keyword side alone would still find rows; the retry is needed
    because none of them came from the vector side."""
    qs = Article.objects.hybrid_search(TEXT, k=5)
    target = switch_ready()
    rows = list(qs)
    assert len(rows) == 5
    assert all(row.vector_rank is not None for row in rows)
    query = serving.encode_query(TEXT, "default", target.version)
    check_new_version(rows, target.version, query)


@pytest.mark.django_db
def test_a_short_result_without_a_switch_costs_one_version_read_and_no_second_search(
    switch_ready,
):
    qs = Article.objects.filter(title__startswith="storm").similar_to(TEXT)
    with CaptureQueriesContext(connection) as ctx:
        rows = list(qs)
    assert len(rows) == 1  # fewer than k: legitimately short
    searches = [q for q in ctx.captured_queries if "<=>" in q["sql"]]
    versions = [q for q in ctx.captured_queries if "sbert_encoderversion" in q["sql"]]
    assert len(searches) == 1 and len(versions) == 1


@pytest.mark.django_db(transaction=True)
def test_a_switch_committed_by_another_connection_between_read_and_search(switch_ready):
    """The real race: the queryset is built here (version read, text encoded), the switch
    commits on another connection in another thread, then the statement runs here."""
    qs = Article.objects.similar_to(TEXT, k=5)
    errors: list[BaseException] = []
    done: list[EncoderVersion] = []

    def switch() -> None:
        try:
            done.append(switch_ready())
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=switch)
    thread.start()
    thread.join(60)
    assert not errors, errors
    target = done[0]
    rows = list(qs)
    assert len(rows) == 5
    check_new_version(rows, target.version, serving.encode_query(TEXT, "default", target.version))
