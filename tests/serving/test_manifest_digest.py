"""The manifest does not vouch for itself: its digest is recorded with the version's row.

A version's files and manifest live in the model storage, which more hands may write than the
database. The row records the manifest's sha256 when the version is saved; hosts refuse a
manifest that differs, ``sbert_manifest`` never re-seals such a version, and a version whose
files lack one its configuration names (pooling, max_seq_length, prompts) is refused.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil

import pytest
from django.core.files.storage import FileSystemStorage
from django.core.management import call_command
from django.core.management.base import CommandError

from django_sbert import serving
from django_sbert.exceptions import VersionUnavailable
from django_sbert.models import EncoderVersion, VersionStatus
from django_sbert.serving.model_cache import cached_path, forget_fetch_failures, local_directory
from django_sbert.serving.storage import MANIFEST, build_manifest, publish_directory
from tests.serving.failing_storage import use_storage

pytestmark = pytest.mark.django_db


@pytest.fixture
def store(settings, tmp_path):
    location = tmp_path / "store"
    use_storage(settings, location, FileSystemStorage, tmp_path / "host-cache")
    yield location
    serving.reset_encoders()
    serving.forget_serving()


def sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_row_records_the_digest_of_the_manifest_saved_with_it(store, tiny_encoder):
    key, version = serving.save_encoder(tiny_encoder, "default", "tiny")
    row = EncoderVersion.objects.create(encoder_name="default", version=version, directory=key)
    assert row.manifest_sha256 == sha256(store / key / MANIFEST)


def test_tampered_weights_resealed_without_the_database_are_refused(store, tiny_encoder):
    key, version = serving.save_encoder(tiny_encoder, "default", "tiny")
    EncoderVersion.objects.create(
        encoder_name="default", version=version, directory=key, status=VersionStatus.ACTIVE
    )
    weights = store / key / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one byte changed, the size kept
    weights.write_bytes(bytes(data))
    (store / key / MANIFEST).unlink()

    # sbert_manifest never seals a version whose row recorded its manifest.
    out = io.StringIO()
    with pytest.raises(CommandError, match="could not be sealed"):
        call_command("sbert_manifest", stdout=out)
    assert "the database recorded its manifest's digest" in out.getvalue()
    assert not (store / key / MANIFEST).exists()
    with pytest.raises(VersionUnavailable, match="has no"):
        serving.query_vector("central bank")

    # A manifest written over the tampered files some other way is refused by every host.
    local = store.parent / "tampered"
    shutil.copytree(store / key, local)
    publish_directory(local, key, build_manifest(local, encoder="default", version=version))
    forget_fetch_failures()  # else the failure above is answered until its back-off ends
    with pytest.raises(VersionUnavailable, match="where the database recorded") as info:
        serving.query_vector("central bank")
    assert version in str(info.value)
    assert not cached_path(key).exists()


def test_sbert_manifest_refuses_a_malformed_manifest_without_force(store, tiny_encoder):
    key, version = serving.save_encoder(tiny_encoder, "default", "tiny")
    EncoderVersion.objects.create(encoder_name="default", version=version, directory=key)
    EncoderVersion.objects.filter(version=version).update(manifest_sha256="")  # an older row
    (store / key / MANIFEST).write_text('{"files": {"config.json": {"size": "12x"')

    out = io.StringIO()
    with pytest.raises(CommandError):
        call_command("sbert_manifest", stdout=out)
    assert "not JSON" in out.getvalue() and "--force" in out.getvalue()
    assert (store / key / MANIFEST).read_text().startswith('{"files": {"config.json"')

    call_command("sbert_manifest", "--force", stdout=io.StringIO())
    recorded = EncoderVersion.objects.get(version=version).manifest_sha256
    assert recorded == sha256(store / key / MANIFEST)
    assert local_directory("default", version, key, recorded).is_dir()


@pytest.mark.parametrize("dropped", ["1_Pooling/config.json", "sentence_bert_config.json"])
def test_a_version_missing_a_file_its_configuration_names_is_refused(
    store, tiny_encoder, tmp_path, dropped
):
    """Without 1_Pooling/config.json the encoder would pool by mean, without
    sentence_bert_config.json cut at the tokenizer's length: another model, same version."""
    key, version = serving.save_encoder(tiny_encoder, "default", "tiny")
    EncoderVersion.objects.create(encoder_name="default", version=version, directory=key)
    EncoderVersion.objects.filter(version=version).update(manifest_sha256="")  # an older row
    (store / key / dropped).unlink()
    (store / key / MANIFEST).unlink()

    out = io.StringIO()
    with pytest.raises(CommandError):
        call_command("sbert_manifest", stdout=out)
    assert f"lacks {dropped}" in out.getvalue()

    # A manifest that leaves the file out, written by hand, is refused by the host.
    local = tmp_path / "partial"
    shutil.copytree(store / key, local)
    publish_directory(local, key, build_manifest(local, encoder="default", version=version))
    forget_fetch_failures()
    with pytest.raises(VersionUnavailable, match=f"its manifest lacks {dropped}"):
        local_directory("default", version, key, "")
    assert not cached_path(key).exists()
    assert json.loads((store / key / MANIFEST).read_text())["version"] == version
