"""Publish, edit, unpublish and delete of a page, indexed through a real Celery worker."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator

import pytest

pytest.importorskip("wagtail")  # collected only with its apps (conftest.py)

from django_sbert.contrib.wagtail.models import SearchEntry  # noqa: E402
from tests.celery_app import app  # noqa: E402
from tests.wagtail.conftest import page_text  # noqa: E402
from tests.wagtail.newsapp.models import NewsPage  # noqa: E402
from tests.worker_process import Worker  # noqa: E402

pytestmark = pytest.mark.django_db(transaction=True)

QUEUE = f"sbert-wagtail-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def worker(settings, tmp_path) -> Iterator[Worker]:
    settings.SBERT = {**settings.SBERT, "QUEUE": QUEUE}
    started = Worker(tmp_path / "worker.log", QUEUE)
    yield started
    started.stop()
    with app.connection_for_write() as conn:
        conn.default_channel.queue_purge(QUEUE)


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting until {what}")
        time.sleep(0.05)


def current(page: NewsPage) -> bool:
    """The page's row has the vector of its present text."""
    entry = SearchEntry.objects.filter(object_id=str(page.pk)).first()
    field = SearchEntry._meta.get_field("embedding")
    return (
        entry is not None
        and entry.embedding is not None
        and entry.embedding_hash == field.text_hash(f"{entry.title}\n{entry.body}")
    )


@pytest.mark.heavy
def test_publish_unpublish_and_delete_reindex_through_the_worker(worker, site, add_news):
    draft = add_news(site.world, "Volcano erupts", "Ash closed the airport.", live=False)
    wait_until(lambda: current(draft), 120, "the worker embedded the draft")
    assert draft not in list(NewsPage.objects.live().search(page_text(draft)))

    draft.title = "Volcano erupts again"
    draft.save_revision().publish()
    wait_until(lambda: current(draft), 60, "the worker embedded the published text")
    assert SearchEntry.objects.get(object_id=str(draft.pk)).title == "Volcano erupts again"
    assert list(NewsPage.objects.live().search(page_text(draft)))[0] == draft

    draft.refresh_from_db()  # publish() saved another instance of the page
    draft.unpublish()
    assert not NewsPage.objects.get(pk=draft.pk).live
    assert draft not in list(NewsPage.objects.live().search(page_text(draft)))

    pk = str(draft.pk)
    draft.delete()
    assert not SearchEntry.objects.filter(object_id=pk).exists()


def test_a_page_published_while_the_broker_is_away_is_embedded_by_the_sweep(site, add_news, caplog):
    """Nothing lost: the save succeeds, its row waits without a vector, the sweep embeds it."""
    from celery import Celery

    from django_sbert.indexing import tasks

    down = Celery("broker-down", broker="redis://127.0.0.1:1/15", set_as_current=False)
    down.conf.broker_connection_retry = False
    down.set_current()
    try:
        page = add_news(site.world, "Storm warning", "Gales closed the harbour.")
    finally:
        app.set_current()  # the broker is back
    assert "left for the sweep" in caplog.text
    assert not current(page)
    app.conf.task_always_eager = True
    try:
        sent = tasks.sweep.delay().get()
    finally:
        app.conf.task_always_eager = False
    assert sent.get("sbert_wagtail.SearchEntry.embedding", 0) >= 1
    assert current(page)
    assert list(NewsPage.objects.live().search(page_text(page)))[0] == page
