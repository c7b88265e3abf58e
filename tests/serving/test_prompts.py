"""Query and document prompts (e5's "query: " / "passage: "): read from the model directory's
config_sentence_transformers.json as sentence-transformers reads them, or set by
SBERT["ENCODERS"][name]["QUERY_PROMPT"] / ["DOCUMENT_PROMPT"]; applied by indexing to row
texts and by searches to query texts; the document prompt is part of the version identity.

The model is the tiny test model copied with a config that declares prompts, so every path
loads real files and runs the real encoder.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings
from rest_framework.test import APIClient

from django_sbert.checks import check_settings
from django_sbert.conf import encoder_config
from django_sbert.encoder import SentenceEncoder
from django_sbert.indexing import count_stale, embed_pks, get_ref
from django_sbert.serving import base_label, base_version, model_fingerprint, query_vector
from tests.testapp.models import Article

QUERY = "query: "
PASSAGE = "passage: "
TEXT = "central banks raise interest rates"


def prompted_copy(directory: Path, prompts: dict[str, str]) -> Path:
    """A copy of the tiny test model whose config_sentence_transformers.json names ``prompts``."""
    shutil.copytree(settings.TINY_MODEL_DIR, directory)
    config = {"prompts": prompts, "default_prompt_name": None}
    (directory / "config_sentence_transformers.json").write_text(json.dumps(config))
    return directory


@pytest.fixture(scope="module")
def prompted_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny test model declaring e5's prompts, named "query" and "passage" as e5 does."""
    directory = tmp_path_factory.mktemp("prompted") / "tiny-prompted"
    return prompted_copy(directory, {"query": QUERY, "passage": PASSAGE})


@pytest.fixture(scope="module")
def plain(prompted_model: Path) -> SentenceEncoder:
    """The same model, for encoding "prompt + text" by hand (no prompt is applied by default)."""
    return SentenceEncoder.load(prompted_model)


@contextmanager
def encoder(model: Path, **options: Any) -> Iterator[None]:
    """The "default" encoder is ``model``, with ``options`` (QUERY_PROMPT, ...)."""
    default = {**settings.SBERT["ENCODERS"]["default"], "MODEL": str(model), **options}
    with override_settings(SBERT={**settings.SBERT, "ENCODERS": {"default": default}}):
        yield


def stored_vector(article: Article) -> np.ndarray:
    values = Article.objects.filter(pk=article.pk).values_list("embedding", flat=True)
    return np.asarray(values.get(), dtype=np.float32)


def index(*articles: Article) -> None:
    """Embed the rows through the indexing path the worker runs (read, encode, write)."""
    embed_pks(get_ref("testapp.Article", "embedding"), [a.pk for a in articles])


def test_the_model_config_prompts_are_applied_to_documents_and_queries(db, prompted_model, plain):
    article = Article.objects.create(title="Central bank", body="rates rise")
    with encoder(prompted_model):
        index(article)
        document = stored_vector(article)
        query, _ = query_vector(TEXT)
        # the row was encoded as "passage: <text>", the query as "query: <text>"
        expected = plain.encode([PASSAGE + "Central bank\nrates rise", QUERY + TEXT])
        np.testing.assert_allclose(document, expected[0], atol=1e-5)
        np.testing.assert_allclose(query, expected[1], atol=1e-5)
        # and not as the bare texts
        bare = plain.encode(["Central bank\nrates rise", TEXT])
        assert np.abs(document - bare[0]).max() > 1e-3
        assert np.abs(query - bare[1]).max() > 1e-3
        # a search by text ranks with the prompted query vector
        found = Article.objects.similar_to(TEXT).get()
        assert found.similarity == pytest.approx(float(expected[1] @ expected[0]), abs=1e-5)


@pytest.mark.heavy
def test_prompts_are_read_as_sentence_transformers_reads_them(db, tmp_path):
    # Named "query" and "document": sentence-transformers 6 fills in an empty "document"
    # prompt when a model names only "passage", so its encode_document() would apply none.
    model = prompted_copy(tmp_path / "tiny-prompted", {"query": QUERY, "document": PASSAGE})
    sentence_transformers = pytest.importorskip("sentence_transformers")
    reference = sentence_transformers.SentenceTransformer(str(model), device="cpu")
    article = Article.objects.create(title="Cats and dogs", body="a cat plays with a dog")
    with encoder(model):
        index(article)
        query, _ = query_vector(TEXT)
        document = stored_vector(article)
    np.testing.assert_allclose(query, reference.encode_query(TEXT), atol=1e-5)
    text = "Cats and dogs\na cat plays with a dog"
    np.testing.assert_allclose(document, reference.encode_document(text), atol=1e-5)


def test_settings_override_the_model_prompts(db, prompted_model, plain):
    article = Article.objects.create(title="Guitar music", body="a man plays")
    with encoder(prompted_model, QUERY_PROMPT="search query: ", DOCUMENT_PROMPT=""):
        index(article)
        query, _ = query_vector(TEXT)
        document = stored_vector(article)
    np.testing.assert_allclose(query, plain.encode("search query: " + TEXT), atol=1e-5)
    # "" means no prompt, although the model declares one for passages
    np.testing.assert_allclose(document, plain.encode("Guitar music\na man plays"), atol=1e-5)


def test_the_document_prompt_is_part_of_the_version_and_makes_rows_stale(db, prompted_model, plain):
    tiny = Path(settings.TINY_MODEL_DIR)
    ref = get_ref("testapp.Article", "embedding")
    article = Article.objects.create(title="Election", body="people vote")
    with encoder(tiny):
        # no prompt setting: the version is the files' alone, as before prompts existed
        unprompted = base_version()
        assert unprompted == f"{base_label()}:{model_fingerprint(tiny)[:16]}"
        index(article)
        assert count_stale(ref) == 0
    with encoder(tiny, QUERY_PROMPT="query: "):
        assert base_version() == unprompted  # query vectors are never stored
        assert count_stale(ref) == 0
    with encoder(tiny, DOCUMENT_PROMPT="passage: "):
        passage = base_version()
        assert passage != unprompted
        assert count_stale(ref) == 1  # encoded without the prompt: stale
        index(article)
        assert count_stale(ref) == 0
        np.testing.assert_allclose(
            stored_vector(article), plain.encode("passage: Election\npeople vote"), atol=1e-5
        )
    with encoder(tiny, DOCUMENT_PROMPT="document: "):
        assert base_version() not in (unprompted, passage)
        assert count_stale(ref) == 1
    with encoder(tiny, DOCUMENT_PROMPT="passage: "):
        assert base_version() == passage  # stable: the same prompt gives the same id
    # prompts the model's files declare are part of its fingerprint already
    with encoder(prompted_model):
        assert base_version() not in (unprompted, passage)


def test_a_search_finds_rows_indexed_with_the_document_prompt(db, prompted_model):
    rows = [
        Article.objects.create(title="Central bank", body="interest rates rise"),
        Article.objects.create(title="Cats and dogs", body="a cat plays with a dog"),
        Article.objects.create(title="Guitar music", body="a man plays the guitar"),
    ]
    with encoder(prompted_model):
        index(*rows)
        # every row carries the version, and the query's version matches it
        _, version = query_vector(TEXT)
        assert set(Article.objects.values_list("embedding_version", flat=True)) == {version}
        assert len(Article.objects.similar_to(TEXT, k=3)) == 3


@pytest.mark.urls("tests.api.urls")
def test_the_embed_api_applies_a_prompt_when_asked(db, prompted_model, plain):
    from django.contrib.auth.models import User

    client = APIClient()
    client.force_authenticate(User.objects.create_user("embedder"))

    def embed(**options: Any) -> Any:
        body = {"texts": [TEXT], **options}
        response = client.post("/api/sbert/embed/", body, format="json")
        return response

    with encoder(prompted_model):
        as_given = np.asarray(embed().json()["vectors"][0])
        as_query = np.asarray(embed(prompt="query").json()["vectors"][0])
        as_document = np.asarray(embed(prompt="document").json()["vectors"][0])
        bad = embed(prompt="title")
    np.testing.assert_allclose(as_given, plain.encode(TEXT), atol=1e-5)
    np.testing.assert_allclose(as_query, plain.encode(QUERY + TEXT), atol=1e-5)
    np.testing.assert_allclose(as_document, plain.encode(PASSAGE + TEXT), atol=1e-5)
    assert bad.status_code == 400 and "prompt" in bad.json()


def test_a_prompt_must_be_a_string_or_none(db):
    for value in (5, ["query: "]):
        default = {**settings.SBERT["ENCODERS"]["default"], "QUERY_PROMPT": value}
        with override_settings(SBERT={**settings.SBERT, "ENCODERS": {"default": default}}):
            with pytest.raises(ImproperlyConfigured, match="QUERY_PROMPT.*must be a string"):
                encoder_config("default")
            assert [e.id for e in check_settings()] == ["django_sbert.E005"]
