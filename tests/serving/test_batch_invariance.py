"""Same text, same vector on every query path of the serving layer, with the tiny model and the
test database: a visitor's search (``encode_query``, the text alone), the query server's encode
of a batch (``encode_queries``), ``sbert_evaluate``'s queries (``encode_texts(role="query")``),
the embed API's query prompt, and async searches several at a time (``aio.encode_text``) give
each text the same vector, bit for bit, whatever the other texts of the batch. Documents keep
their batches. The real query server process: tests/serving/test_query_server.py."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from django_sbert.query import aio
from django_sbert.serving import (
    clear_query_cache,
    encode_query,
    encode_texts,
    serving_record,
)
from django_sbert.serving.cache import encode_queries
from tests.encoder.test_encode import sentences

pytestmark = pytest.mark.django_db

TEXTS = sentences(30, seed=11) + ["a", "interest rates " * 30]  # 1 to 60 tokens


def visitors(texts: list[str]) -> np.ndarray:
    """Each text's vector as a visitor's search encodes it: alone, cache emptied first."""
    vectors = []
    for text in texts:
        clear_query_cache()
        vectors.append(np.array(encode_query(text)))
    return np.stack(vectors)


@pytest.fixture
def reference() -> np.ndarray:
    return visitors(TEXTS)


def compositions(seed: int = 0):
    """The texts in shuffled batches of several sizes: (indexes, texts) per batch."""
    rng = np.random.default_rng(seed)
    for size in (2, 5, 16, len(TEXTS)):
        order = rng.permutation(len(TEXTS))
        for start in range(0, len(order), size):
            index = order[start : start + size]
            yield index, [TEXTS[i] for i in index]


def test_the_query_servers_batches_give_each_text_its_visitors_vector(reference):
    current = serving_record("default")
    for index, batch in compositions():
        vectors = encode_queries(batch, current.encoder, current.version, current.directory)
        np.testing.assert_array_equal(vectors, reference[index])


def test_evaluation_and_embed_api_queries_give_each_text_its_visitors_vector(reference):
    for index, batch in compositions(seed=1):
        np.testing.assert_array_equal(encode_texts(batch, role="query"), reference[index])
    raw = encode_texts(TEXTS, role="query", normalize=False, threads=2)  # threads: unused
    np.testing.assert_allclose(raw / np.linalg.norm(raw, axis=1, keepdims=True), reference)


def test_async_searches_in_flight_together_give_each_text_its_visitors_vector(
    reference, monkeypatch
):
    monkeypatch.setattr(aio, "ENCODE_THREADS", 2)
    clear_query_cache()

    async def all_at_once() -> list[np.ndarray]:
        encoded = await asyncio.gather(*(aio.encode_text(t, "default") for t in TEXTS))
        return [text.vector for text in encoded]

    np.testing.assert_array_equal(np.stack(asyncio.run(all_at_once())), reference)


def test_documents_keep_their_batches():
    """Rows are encoded in batches (the indexing worker's throughput): within float32 rounding
    of the text alone, not bit for bit (docs/encoder.md, "Same text, same vector")."""
    alone = np.stack([encode_texts([text], role="document")[0] for text in TEXTS])
    batched = encode_texts(TEXTS, role="document")
    np.testing.assert_allclose(batched, alone, atol=1e-6)
