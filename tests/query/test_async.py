"""The async searches: ``asimilar_to()``, ``ahybrid_search()``, ``akeyword_search()``, and
search querysets evaluated with ``async for``, ``aiterator()``, ``acount()``, ``afirst()``.

Run with ``asyncio.run`` as an async view runs: the database work goes through
``sync_to_async`` to another thread, so the rows are committed (``transaction=True``) and that
thread's connection is closed at the end of each run. The event-loop test uses the real
all-MiniLM-L6-v2, whose encodes are long enough to see.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

import pytest
from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.exceptions import SynchronousOnlyOperation
from django.db import connection, connections, models
from django.db.models.expressions import RawSQL
from django.test import override_settings
from django.test.utils import isolate_apps

from django_sbert.conf import SEARCH_DEFAULTS
from django_sbert.fields import EmbeddingField
from django_sbert.query import SearchTimeout, SemanticManager
from django_sbert.query.aio import ENCODE_THREADS
from django_sbert.serving import encode_query, encoder_version
from tests.query.test_query import search_settings
from tests.query.test_search_bounds import slow
from tests.testapp.models import Article

T = TypeVar("T")

SETTINGS_IN_EFFECT = {  # read by the search statement itself, inside its transaction
    "ef": RawSQL("current_setting('hnsw.ef_search', true)", []),
    "scan": RawSQL("current_setting('hnsw.iterative_scan', true)", []),
    "timeout": RawSQL("current_setting('statement_timeout')", []),
}


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)``, closing the connection of the thread that ran its queries."""

    async def wrapper() -> T:
        try:
            return await main
        finally:
            await sync_to_async(connections.close_all)()

    return asyncio.run(wrapper())


@pytest.fixture
def committed_articles(transactional_db, embed) -> list[Article]:
    rows = Article.objects.bulk_create(  # no signals: nothing is queued to a broker
        Article(title=title, body=body, category=category)
        for title, body, category in [
            ("central banks raise interest rates", "the economy is slow", "economy"),
            ("interest rates fall", "money is cheap and the market is high", "economy"),
            ("tax and the government", "the minister and the tax on prices", "economy"),
            ("cats and dogs", "a cat and a dog in the city", "pets"),
            ("the dog runs fast", "a big dog is running in the country", "pets"),
            ("guitar music", "a man is playing the guitar", "music"),
            ("the election vote", "people vote for a new president", "politics"),
            ("court and law", "the court and the new law", "politics"),
        ]
    )
    return list(embed(*rows))


def ranked(rows: list[Any]) -> list[tuple[int, float | None]]:
    return [(row.pk, round(getattr(row, "similarity", None) or 0.0, 5)) for row in rows]


def test_async_searches_return_what_the_sync_ones_do(committed_articles):
    text = "interest rates and the economy"
    row = committed_articles[3]
    expected = {
        "text": ranked(list(Article.objects.similar_to(text, k=4))),
        "filtered": ranked(list(Article.objects.filter(category="pets").similar_to(text))),
        "instance": ranked(list(Article.objects.similar_to(row, k=3))),
        "vector": ranked(list(Article.objects.similar_to(list(row.embedding), k=3))),
        "hybrid": [a.pk for a in Article.objects.hybrid_search(text, k=5)],
        "keyword": [a.pk for a in Article.objects.keyword_search("rates")],
        "count": Article.objects.similar_to(text, k=4).count(),
    }

    async def searches() -> dict[str, Any]:
        objects = Article.objects
        found = await objects.asimilar_to(text, k=4)
        pets = await objects.filter(category="pets").asimilar_to(text)
        return {
            "text": ranked([a async for a in found]),
            "aiterator": ranked([a async for a in found.aiterator()]),
            "filtered": ranked([a async for a in pets]),
            "instance": ranked([a async for a in await objects.asimilar_to(row, k=3)]),
            "vector": ranked([a async for a in await objects.asimilar_to(row.embedding, k=3)]),
            "hybrid": [a.pk async for a in await objects.ahybrid_search(text, k=5)],
            "keyword": [a.pk async for a in await objects.akeyword_search("rates")],
            "count": await (await objects.asimilar_to(text, k=4)).acount(),
            "first": (await (await objects.asimilar_to(text)).afirst()).pk,
        }

    found = run(searches())
    assert found.pop("aiterator") == expected["text"]
    assert found.pop("first") == expected["text"][0][0]
    assert found == expected
    assert len(found["text"]) == 4 and len(found["filtered"]) == 2


def test_k_the_index_settings_and_the_timeout_apply_under_async_for_and_aiterator(
    committed_articles,
):
    async def settings_seen(**options: Any) -> dict[str, list[Any]]:
        found = await Article.objects.asimilar_to("the dog", **options)
        rows = found.annotate(**SETTINGS_IN_EFFECT)
        hybrid = (await Article.objects.ahybrid_search("the dog", k=2, ef_search=55)).annotate(
            **SETTINGS_IN_EFFECT
        )
        return {
            "async for": [(r.ef, r.scan, r.timeout) async for r in rows],
            "aiterator": [(r.ef, r.scan, r.timeout) async for r in rows.aiterator()],
            "hybrid": [(r.ef, r.scan, r.timeout) async for r in hybrid],
        }

    with search_settings(STATEMENT_TIMEOUT=2.5):
        seen = run(settings_seen(k=3, ef_search=77, iterative_scan="strict_order"))
        default = run(settings_seen(k=2))
    assert seen["async for"] == seen["aiterator"] == [("77", "strict_order", "2500ms")] * 3
    ef = str(SEARCH_DEFAULTS["EF_SEARCH"])
    assert default["async for"] == default["aiterator"] == [(ef, "relaxed_order", "2500ms")] * 2
    assert seen["hybrid"] == [("55", "relaxed_order", "2500ms")] * 2


def test_a_search_timeout_reaches_async_code(committed_articles):
    async def search() -> list[Article]:
        return [a async for a in await slow(Article.objects.all()).asimilar_to("the dog")]

    with search_settings(STATEMENT_TIMEOUT=0.02), pytest.raises(SearchTimeout):
        run(search())


def test_a_text_search_built_on_the_event_loop_is_refused(db):
    """It would encode the text on the loop's thread (and read the serving version there)."""

    async def build(search: Callable[[], Any]) -> Any:
        return search()

    for search in (
        lambda: Article.objects.similar_to("the dog"),
        lambda: Article.objects.hybrid_search("the dog"),
    ):
        with pytest.raises(SynchronousOnlyOperation, match="asimilar_to"):
            asyncio.run(build(search))
    # what encodes nothing is built as usual
    width = Article._meta.get_field("embedding").get_dimensions()
    assert asyncio.run(build(lambda: Article.objects.similar_to([0.5] * width)))._search


def test_concurrent_async_searches_encode_in_a_bounded_pool(committed_articles):
    texts = [f"the dog and the cat {n}" for n in range(12)]
    expected = [[a.pk for a in Article.objects.similar_to(t, k=3)] for t in texts]

    async def search(text: str) -> list[int]:
        return [a.pk async for a in await Article.objects.asimilar_to(text, k=3)]

    async def all_at_once() -> tuple[list[list[int]], set[str]]:
        found = await asyncio.gather(*(search(t) for t in texts))
        return list(found), {t.name for t in threading.enumerate()}

    from django_sbert.serving import clear_query_cache

    clear_query_cache()  # every text is encoded, none comes from the cache
    found, threads = run(all_at_once())
    assert found == expected
    pool = [name for name in threads if name.startswith("sbert-query")]
    assert 1 <= len(pool) <= ENCODE_THREADS


# -- the event loop is not blocked while a query encodes ------------------------------------

SENTENCE = (
    "the central bank raised interest rates again as inflation kept rising across the economy "
    "while markets fell and investors looked for safer places to keep their money"
)


def long_text(seed: int) -> str:
    """About 900 words: four windows of all-MiniLM-L6-v2 with LONG_TEXT="chunk"."""
    words = SENTENCE.split(" ")
    pick = random.Random(seed).choice
    return " ".join(pick(words) for _ in range(900))


async def ticking_while(work: Awaitable[Any], interval: float = 0.002) -> list[float]:
    """The gaps between the ticks of a coroutine that sleeps ``interval`` while ``work`` runs."""
    gaps: list[float] = []
    done = asyncio.Event()

    async def ticker() -> None:
        last = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(interval)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    ticks = asyncio.create_task(ticker())
    await asyncio.sleep(interval * 5)  # the ticker runs before the work starts
    try:
        await work
    finally:
        done.set()
        await ticks
    return gaps


@pytest.mark.slow
@isolate_apps("tests.testapp")
@pytest.mark.django_db(transaction=True)
def test_the_event_loop_keeps_ticking_while_queries_encode(minilm):
    class Paper(models.Model):
        title = models.CharField(max_length=200)
        embedding = EmbeddingField(source=("title",), dimensions=384)

        objects = SemanticManager()

        class Meta:
            app_label = "testapp"

    titles = ["Interest rates rise", "A cat on a mat", "Markets fall", "Rain tomorrow"]
    model = {"MODEL": "all-MiniLM-L6-v2", "THREADS": 1, "LONG_TEXT": "chunk", "COMPILE": False}
    with connection.schema_editor() as editor:
        editor.create_model(Paper)
    try:
        with override_settings(SBERT={**settings.SBERT, "ENCODERS": {"default": model}}):
            version = encoder_version()
            Paper.objects.bulk_create(
                Paper(title=title, embedding=vector, embedding_version=version)
                for title, vector in zip(titles, minilm.encode(titles), strict=True)
            )
            encode_query("warm up")  # the model loads once per process: not what is measured
            one_encode = statistics.median(timed(encode_query, long_text(n)) for n in range(3))

            async def on_the_loop() -> None:  # what a text search in an async view must not do
                for n in range(3, 5):
                    minilm.encode(long_text(n), long_text="chunk", threads=1)

            async def searches() -> list[list[str]]:
                async def search(text: str) -> list[str]:
                    return [p.title async for p in await Paper.objects.asimilar_to(text, k=2)]

                return await asyncio.gather(*(search(long_text(n)) for n in range(5, 11)))

            async def measure() -> tuple[list[float], list[float], float, list[list[str]]]:
                blocked = await ticking_while(on_the_loop())
                started = time.perf_counter()
                results: list[list[str]] = []

                async def collect() -> None:
                    results.extend(await searches())

                free = await ticking_while(collect())
                return blocked, free, time.perf_counter() - started, results

            blocked, free, elapsed, results = run(measure())
    finally:
        with connection.schema_editor() as editor:
            editor.delete_model(Paper)
    assert all(len(titles) == 2 for titles in results) and len(results) == 6
    # The ticker sees a loop that encodes: one gap as long as the encodes...
    assert max(blocked) >= 1.5 * one_encode
    # ...and none while six searches encode for about six encodes' time in the pool.
    assert elapsed >= 3 * one_encode
    assert max(free) < 0.5 * one_encode, (max(free), one_encode)
    print(
        f"\none encode {one_encode * 1000:.0f} ms; six async searches {elapsed * 1000:.0f} ms; "
        f"ticks every 2 ms: max gap {max(free) * 1000:.1f} ms, median "
        f"{statistics.median(free) * 1000:.1f} ms, p99 "
        f"{sorted(free)[int(len(free) * 0.99)] * 1000:.1f} ms ({len(free)} ticks); "
        f"encoding on the loop instead: max gap {max(blocked) * 1000:.0f} ms"
    )


def timed(function: Callable[..., Any], *args: Any) -> float:
    started = time.perf_counter()
    function(*args)
    return time.perf_counter() - started
