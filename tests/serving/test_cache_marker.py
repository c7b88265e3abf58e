"""A cached copy is checked against its marker before use: a partial copy is fetched again.

The host cache trusted any existing directory for ever: a copy someone partly deleted (a
cleanup script, a full disk) served a different model, or failed to load. Each copy keeps the
manifest it was verified against (its sha256 is the copy's marker); before each use every file
it lists must be there with its size, else the copy is fetched again.
"""

from __future__ import annotations

import pytest

from django_sbert import serving
from django_sbert.exceptions import VersionUnavailable
from django_sbert.serving.model_cache import local_directory
from django_sbert.serving.storage import MARKER
from tests.serving.failing_storage import MeteredStorage, use_storage


@pytest.fixture
def fetched(settings, tmp_path, tiny_encoder):
    location = tmp_path / "store"
    use_storage(settings, location, MeteredStorage, tmp_path / "host-cache")
    key, version = serving.save_encoder(tiny_encoder, "default", "tiny")
    MeteredStorage.reset()
    local = local_directory("default", version, key)
    assert MeteredStorage.opened[f"{key}/model.safetensors"] == 1
    yield key, version, local, location
    serving.reset_encoders()


@pytest.mark.parametrize("damage", ["delete", "truncate", "no marker"])
def test_a_damaged_cached_copy_is_fetched_again_never_served(fetched, damage):
    key, version, local, location = fetched
    if damage == "delete":
        (local / "1_Pooling" / "config.json").unlink()
    elif damage == "truncate":
        (local / "model.safetensors").write_bytes(b"")
    else:  # a copy cached by an older release, or a marker someone removed
        (local / MARKER).unlink()

    again = local_directory("default", version, key)
    assert again == local
    assert MeteredStorage.opened[f"{key}/model.safetensors"] == 2  # fetched again
    for name in ("1_Pooling/config.json", "model.safetensors"):
        assert (local / name).read_bytes() == (location / key / name).read_bytes()
    assert (local / MARKER).read_bytes() == (location / key / "manifest.json").read_bytes()


def test_an_intact_copy_is_used_without_the_storage(fetched):
    key, version, local, _ = fetched
    assert local_directory("default", version, key) == local
    assert MeteredStorage.opened[f"{key}/model.safetensors"] == 1
    assert MeteredStorage.opened[f"{key}/manifest.json"] == 1


def test_a_copy_verified_against_another_manifest_than_the_recorded_one_is_not_used(fetched):
    key, version, local, _ = fetched
    with pytest.raises(VersionUnavailable, match="where the database recorded"):
        local_directory("default", version, key, "0" * 64)
    assert not local.exists()
