"""POST embed/: vectors from the site's encoder, for authenticated clients, within limits."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest

from django_sbert.api.settings import APISettings
from django_sbert.serving import encode_texts, encoder_dimensions
from tests.request_bodies import CountingPayload

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.api.urls")]

URL = "/api/sbert/embed/"


@pytest.fixture
def user_client(client_as):
    return client_as("user")


def post(client, body, **kwargs):
    return client.post(URL, json.dumps(body), content_type="application/json", **kwargs)


def test_vectors_match_the_encoder(user_client):
    texts = ["central banks raise rates", "a cat and a dog"]
    response = post(user_client, {"texts": texts})
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["encoder"] == "default"
    assert body["dimensions"] == encoder_dimensions()
    vectors = np.asarray(body["vectors"], dtype=np.float32)
    assert vectors.shape == (2, encoder_dimensions())
    np.testing.assert_allclose(vectors, encode_texts(texts), atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_normalize_false_returns_raw_vectors(user_client):
    from django_sbert.serving import get_encoder

    body = post(user_client, {"texts": ["the dog runs"], "normalize": False}).json()
    raw = get_encoder().encode(["the dog runs"], normalize=False)
    np.testing.assert_allclose(np.asarray(body["vectors"]), raw, atol=1e-5)


class RecordingLock:
    """A lock that counts how often it is taken, standing in for the encoder's lock."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.taken = 0

    def __enter__(self) -> None:
        self.lock.acquire()
        self.taken += 1

    def __exit__(self, *exc_info: object) -> None:
        self.lock.release()


@pytest.mark.parametrize("normalize", [True, False])
def test_every_encode_takes_the_encoders_lock(user_client, monkeypatch, normalize):
    """normalize=false used to call the encoder directly, beside searches encoding at once."""
    import torch

    from django_sbert.serving import cache, get_encoder

    model = get_encoder()  # loaded before the thread count is read
    lock = RecordingLock()
    monkeypatch.setitem(cache._encode_locks, model, lock)  # a lock per loaded model
    threads = torch.get_num_threads()
    response = post(user_client, {"texts": ["the dog runs", "a cat"], "normalize": normalize})
    assert response.status_code == 200, response.json()
    assert lock.taken == 1
    assert not lock.lock.locked()
    assert torch.get_num_threads() == threads
    expected = get_encoder().encode(["the dog runs", "a cat"], normalize=normalize)
    np.testing.assert_allclose(np.asarray(response.json()["vectors"]), expected, atol=1e-5)


@pytest.mark.parametrize("normalize", [True, False])
def test_limits_are_settings(user_client, monkeypatch, normalize):
    monkeypatch.setattr(APISettings, "EMBED_MAX_TEXTS", 2)
    monkeypatch.setattr(APISettings, "EMBED_MAX_TEXT_LENGTH", 5)

    def embed(texts):
        return post(user_client, {"texts": texts, "normalize": normalize})

    assert embed(["abcde", "ab"]).status_code == 200
    too_many = embed(["a", "b", "c"])
    assert too_many.status_code == 400
    assert "At most 2 texts" in too_many.json()["texts"][0]
    too_long = embed(["abcdef"])
    assert too_long.status_code == 400
    assert "at most 5 characters" in str(too_long.json()["texts"])


def test_limits_are_checked_before_the_encoder_runs(user_client, settings, monkeypatch):
    from django_sbert.serving import cache, get_encoder

    monkeypatch.setattr(APISettings, "EMBED_MAX_TEXTS", 2)
    monkeypatch.setattr(APISettings, "EMBED_MAX_TEXT_LENGTH", 5)
    lock = RecordingLock()
    monkeypatch.setitem(cache._encode_locks, get_encoder(), lock)  # a lock per loaded model
    for texts in (["a", "b", "c"], ["abcdef"], ["ok", "abcdef"]):
        for normalize in (True, False):
            response = post(user_client, {"texts": texts, "normalize": normalize})
            assert response.status_code == 400, (texts, normalize)
    assert lock.taken == 0


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ({}, "texts", "required"),
        ({"texts": "one text"}, "texts", "list"),
        ({"texts": []}, "texts", "empty"),
        ({"texts": [1, 2]}, "texts", "Must be a string, not int"),
        ({"texts": [None]}, "texts", "null"),
        ({"texts": [["nested"]]}, "texts", "Must be a string, not list"),
        ({"texts": [""]}, "texts", "blank"),
        ({"texts": ["a\ud800b"]}, "texts", "Surrogate characters are not allowed"),
        ({"texts": ["a"] * 65}, "texts", "At most 64 texts"),
        ({"texts": ["a" * 5001]}, "texts", "at most 5000 characters"),
        ({"texts": ["ok"], "normalize": "yes"}, "normalize", "JSON boolean"),
        ({"texts": ["ok"], "normalize": 1}, "normalize", "JSON boolean"),
        ({"texts": ["ok"], "encoder": "nope"}, "encoder", "Unknown encoder 'nope'."),
        ({"texts": ["ok"], "text": "typo"}, "text", "Unknown field. Valid fields: texts"),
        ({"text": ["typo"]}, "text", "Unknown field"),
        ({"text": ["typo"]}, "texts", "required"),
        (["a", "b"], "non_field_errors", "Expected a dictionary"),
        ("just a string", "non_field_errors", "Expected a dictionary"),
    ],
)
def test_bad_bodies_are_400_with_a_message(user_client, body, field, message):
    response = post(user_client, body)
    assert response.status_code == 400, response.content
    errors = response.json()
    assert field in errors, errors
    assert message in str(errors[field])


def test_malformed_json_is_400(user_client):
    response = user_client.post(URL, "{texts: [", content_type="application/json")
    assert response.status_code == 400
    assert "JSON parse error" in response.json()["detail"]


def test_nan_is_not_json(user_client):
    response = user_client.post(
        URL, '{"texts": ["a"], "normalize": NaN}', content_type="application/json"
    )
    assert response.status_code == 400


def test_form_bodies_are_415(user_client):
    response = user_client.post(URL, {"texts": "a"})  # multipart
    assert response.status_code == 415


def test_oversized_body_is_413(user_client, monkeypatch):
    monkeypatch.setattr(APISettings, "MAX_BODY_BYTES", 100)
    response = post(user_client, {"texts": ["x" * 200]})
    assert response.status_code == 413
    assert "limit is 100 bytes" in response.json()["detail"]
    assert post(user_client, {"texts": ["x" * 10]}).status_code == 200


def test_oversized_body_without_content_length_is_413(user_client, monkeypatch):
    monkeypatch.setattr(APISettings, "MAX_BODY_BYTES", 100)
    body = json.dumps({"texts": ["x" * 200]})
    response = user_client.post(URL, body, content_type="application/json", CONTENT_LENGTH="")
    assert response.status_code in (400, 413)  # never read past the limit, never a 500


# 2.2: between the API's 2 MiB and Django's 2.5 MB; 3.0: over both
@pytest.mark.parametrize("megabytes", [2.2, 3.0])
def test_a_body_over_the_limit_is_a_json_413_before_any_of_it_is_read(
    user_client, megabytes, caplog
):
    body = json.dumps({"texts": ["x" * int(megabytes * 1024 * 1024)]}).encode()
    payload = CountingPayload(body)
    response = user_client.generic(
        "POST", URL, body, content_type="application/json", **{"wsgi.input": payload}
    )
    assert response.status_code == 413
    assert "limit is 2097152 bytes" in response.json()["detail"]
    assert payload.read_bytes == 0
    assert not [r for r in caplog.records if r.name.startswith("django.security")]


def test_a_lower_django_body_limit_is_kept(user_client, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    response = post(user_client, {"texts": ["x" * 2000]})
    assert response.status_code == 413 and "limit is 1000 bytes" in response.json()["detail"]
    assert post(user_client, {"texts": ["x" * 10]}).status_code == 200


def test_get_is_405(user_client):
    assert user_client.get(URL).status_code == 405


def test_unknown_encoder_names_the_configured_encoders_to_staff_only(client_as):
    """The encoders' names are the site's setup: an authenticated client learns only that
    the name is unknown; staff get the list, as they do for unknown models."""
    body = {"texts": ["a dog"], "encoder": "gpt-9"}
    answer = post(client_as("user"), body)
    assert answer.status_code == 400
    assert answer.json() == {"encoder": ["Unknown encoder 'gpt-9'."]}
    assert "default" not in answer.content.decode()
    staff = post(client_as("staff"), body)
    assert staff.status_code == 400
    assert "configured encoders: default" in staff.json()["encoder"][0]
