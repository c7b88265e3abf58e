"""Loading a version never stalls the searches of the serving one, the async encoding queue is
bounded, and the loaded versions are kept least recently used first, never the serving one.

The model storage is real: a ``FileSystemStorage`` whose open of the weights sleeps 3 s
(``tests/serving/slow_storage.py``), as a large download from a distant bucket would, while
the version watcher pre-loads a version being promoted in a thread of its own.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.conf import global_settings
from django.db import connection, connections

from django_sbert import serving
from django_sbert.exceptions import ServiceUnavailable
from django_sbert.models import EncoderVersion, VersionStatus
from django_sbert.query import aio
from django_sbert.serving import cache
from django_sbert.serving.web import _prewarm_promotion
from tests.serving.slow_storage import opening
from tests.serving.test_health import perturbed

DELAY = 3.0  # seconds an open of a version's weights takes


@pytest.fixture
def slow_store(settings, tmp_path: Path) -> Iterator[Any]:
    """A model storage whose reads of the weights take DELAY seconds; ``make_slow()`` turns the
    delay on once the versions are saved (saving reads them back to seal the manifest)."""

    def configure(delay: float) -> None:
        settings.STORAGES = {
            **global_settings.STORAGES,
            "sbert_models": {
                "BACKEND": "tests.serving.slow_storage.SlowFileSystemStorage",
                "OPTIONS": {"location": str(tmp_path / "store"), "delay": delay},
            },
        }

    configure(0.0)
    settings.SBERT = {
        **settings.SBERT,
        "MODEL_STORAGE": "sbert_models",
        "MODEL_CACHE": str(tmp_path / "host-cache"),
    }
    serving.forget_serving()
    serving.reset_encoders()
    opening.clear()
    yield lambda: configure(DELAY)
    serving.forget_serving()
    serving.reset_encoders()


def save_version(encoder: Any, status: str = VersionStatus.CANDIDATE) -> EncoderVersion:
    key, version = serving.save_encoder(encoder, "default", "tiny")
    return EncoderVersion.objects.create(
        encoder_name="default", version=version, directory=key, status=status
    )


def in_thread(target: Any, *args: Any) -> threading.Thread:
    """Run ``target`` in a thread of its own that closes its database connection after."""

    def body() -> None:
        try:
            target(*args)
        finally:
            connection.close()

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    return thread


@pytest.mark.heavy
@pytest.mark.django_db(transaction=True)
def test_searches_of_the_serving_version_go_on_while_a_promoting_version_loads(
    slow_store, tiny_encoder, caplog
):
    promoting = save_version(perturbed(tiny_encoder, seed=31), VersionStatus.PROMOTING)
    slow_store()
    cached = serving.encode_query("central banks raise rates")  # the serving (settings') model

    caplog.set_level("INFO", logger="django_sbert")
    watcher = in_thread(_prewarm_promotion, "default", "query")  # as every web process does
    assert opening.wait(10), "the watcher never started fetching the promoting version"
    loaded: list[Any] = []
    waiter = in_thread(lambda: loaded.append(serving.get_encoder("default", promoting.version)))

    started = time.perf_counter()
    again = serving.encode_query("central banks raise rates")
    cached_seconds = time.perf_counter() - started
    started = time.perf_counter()
    serving.encode_query("storm closes the schools")  # not cached: a forward pass
    fresh_seconds = time.perf_counter() - started
    during_the_load = watcher.is_alive()

    watcher.join(30)
    waiter.join(30)
    assert again is cached
    assert cached_seconds < 0.25, f"a cached query waited {cached_seconds:.2f} s for the load"
    assert fresh_seconds < 1.0, f"a query encode waited {fresh_seconds:.2f} s for the load"
    assert during_the_load, "the searches above must have run while the version loaded"
    assert f"pre-loaded version {promoting.version} being promoted" in caplog.text
    # The second caller of the same version waited for that one load: one model, loaded once.
    assert loaded == [serving.get_encoder("default", promoting.version)]
    assert loaded[0] is serving.get_encoder("default", promoting.version)


@pytest.mark.heavy
@pytest.mark.django_db(transaction=True)
def test_a_full_encoding_queue_refuses_a_search_at_once(slow_store, tiny_encoder, monkeypatch):
    active = save_version(perturbed(tiny_encoder, seed=32), VersionStatus.ACTIVE)
    slow_store()
    monkeypatch.setattr(aio, "ENCODE_QUEUE", 1, raising=False)
    capacity = aio.ENCODE_THREADS + 1  # both threads busy (loading the version), one waiting

    async def main() -> tuple[float, list[Any]]:
        try:
            waiting = [
                asyncio.create_task(aio.encode_text(f"query number {n}", "default"))
                for n in range(capacity)
            ]
            while not opening.is_set():  # a pool thread fetches the serving version
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.5)  # the other texts reach the pool's queue
            started = time.perf_counter()
            with pytest.raises(ServiceUnavailable, match="ENCODE_QUEUE"):
                await aio.encode_text("one text too many", "default")
            refused_in = time.perf_counter() - started
            return refused_in, await asyncio.gather(*waiting)
        finally:
            await sync_to_async(connections.close_all)()

    refused_in, encoded = asyncio.run(main())
    assert refused_in < 0.5  # refused, not queued behind the load
    assert [text.version for text in encoded] == [active.version] * capacity
    assert aio.encodes_in_flight() == 0  # every slot given back


# --- which versions stay loaded ----------------------------------------------------------------


@pytest.fixture
def two_loaded(model_dir, monkeypatch) -> Iterator[None]:
    monkeypatch.setattr(cache, "MAX_TUNED_LOADED", 2)
    serving.reset_encoders()
    yield
    serving.reset_encoders()


@pytest.mark.django_db
def test_the_least_recently_used_version_is_dropped_first(two_loaded, tiny_encoder):
    versions = [save_version(perturbed(tiny_encoder, seed=40 + n)).version for n in range(4)]
    first = serving.get_encoder("default", versions[0])
    second = serving.get_encoder("default", versions[1])
    assert serving.get_encoder("default", versions[0]) is first  # used again: most recent
    third = serving.get_encoder("default", versions[2])  # drops the second, not the first

    assert serving.get_encoder("default", versions[0]) is first
    assert cache.loaded_versions() == [("default", versions[2]), ("default", versions[0])]
    fourth = serving.get_encoder("default", versions[3])  # drops the third
    assert cache.loaded_versions() == [("default", versions[0]), ("default", versions[3])]
    assert serving.get_encoder("default", versions[3]) is fourth
    assert serving.get_encoder("default", versions[2]) is not third  # loaded again
    assert serving.get_encoder("default", versions[1]) is not second


@pytest.mark.django_db
def test_the_serving_version_is_never_dropped(two_loaded, tiny_encoder):
    active = save_version(perturbed(tiny_encoder, seed=50), VersionStatus.ACTIVE)
    served = serving.get_encoder("default")  # loaded as the serving version
    assert serving.encode_query("central banks").shape  # searches use it (cached from now on)
    compared = [save_version(perturbed(tiny_encoder, seed=51 + n)).version for n in range(3)]
    for version in compared:  # the compare page, the gate: other versions, loaded after it
        serving.get_encoder("default", version)

    assert serving.get_encoder("default") is served
    assert ("default", active.version) in cache.loaded_versions()
    assert len(cache.loaded_versions()) == 2
