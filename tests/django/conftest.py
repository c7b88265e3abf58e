"""Fixtures for the Django tests: real PostgreSQL + pgvector, the tiny random encoder."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _fresh_encoder_caches():
    """Each test starts with an empty query cache (encoders themselves stay loaded)."""
    from django_sbert.encoders import clear_query_cache

    clear_query_cache()
    yield


@pytest.fixture
def embed():
    """Embed rows synchronously in the test process, the way the indexing task stores them."""
    from django.utils import timezone

    from django_sbert.encoders import encode_texts, encoder_version
    from django_sbert.fields import embedding_fields

    def _embed(*objs):
        for obj in objs:
            for field in embedding_fields(type(obj)):
                text = field.get_source_text(obj)
                vector = encode_texts([text], field.encoder)[0]
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
