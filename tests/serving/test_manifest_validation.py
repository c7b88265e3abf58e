"""A malformed manifest is refused with a clear ``VersionUnavailable``; an oversized object is
not copied past its declared size.

A size of ``"12x"`` or ``1e999`` (JSON's infinity) or a path with a NUL or ``..`` used to
escape as ``ValueError`` / ``OverflowError``: a 500 from the API, a crash of ``manage.py
check``. And a stored object larger than its manifest says was copied whole before its size
was compared.
"""

from __future__ import annotations

import json

import pytest

from django_sbert import serving
from django_sbert.checks import check_local_files
from django_sbert.exceptions import VersionUnavailable
from django_sbert.models import EncoderVersion, VersionStatus
from django_sbert.serving.model_cache import cached_path, local_directory
from django_sbert.serving.storage import MANIFEST
from tests.serving.failing_storage import MeteredStorage, use_storage

SHA = "0" * 64
MALFORMED = {
    "size 12x": ("config.json", {"size": "12x", "sha256": SHA}),
    "size 1e999": ("config.json", {"size": "1e999", "sha256": SHA}),
    "negative size": ("config.json", {"size": -1, "sha256": SHA}),
    "boolean size": ("config.json", {"size": True, "sha256": SHA}),
    "NUL in path": ("config\x00.json", {"size": 1, "sha256": SHA}),
    "dot-dot path": ("../../outside.json", {"size": 1, "sha256": SHA}),
    "absolute path": ("/etc/passwd", {"size": 1, "sha256": SHA}),
    "empty part": ("1_Pooling//config.json", {"size": 1, "sha256": SHA}),
    "bad sha256": ("config.json", {"size": 1, "sha256": "not-hex"}),
}


@pytest.fixture
def saved(settings, tmp_path, tiny_encoder):
    location = tmp_path / "store"
    use_storage(settings, location, MeteredStorage, tmp_path / "host-cache")
    key, version = serving.save_encoder(tiny_encoder, "default", "tiny")
    yield key, version, location
    serving.reset_encoders()


def replace_entry(location, key, name, entry) -> None:
    """Rewrite the manifest with one entry as given; "1e999" is written as a bare number."""
    path = location / key / MANIFEST
    manifest = json.loads(path.read_text())
    manifest["files"][name] = entry
    text = json.dumps(manifest)
    path.write_text(text.replace('"1e999"', "1e999"))


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_each_malformed_manifest_makes_the_version_unavailable(saved, case):
    key, version, location = saved
    replace_entry(location, key, *MALFORMED[case])
    with pytest.raises(VersionUnavailable, match="bad entry") as info:
        local_directory("default", version, key, "")
    assert version in str(info.value)
    assert not cached_path(key).exists()
    assert not (location.parent / "outside.json").exists()


@pytest.mark.django_db
def test_the_start_up_check_reports_a_malformed_manifest(saved):
    key, version, location = saved
    EncoderVersion.objects.create(
        encoder_name="default", version=version, directory=key, status=VersionStatus.ACTIVE
    )
    EncoderVersion.objects.filter(version=version).update(manifest_sha256="")
    replace_entry(location, key, *MALFORMED["size 1e999"])
    errors = check_local_files(databases=["default"])
    assert [e.id for e in errors] == ["django_sbert.E012"]
    assert "bad entry 'config.json'" in errors[0].msg


def test_an_oversized_object_is_read_no_further_than_its_declared_size(saved):
    key, version, location = saved
    weights = location / key / "model.safetensors"
    declared = weights.stat().st_size
    with weights.open("ab") as handle:
        handle.write(b"\0" * (8 << 20))  # 8 MiB the manifest does not declare
    MeteredStorage.reset()

    with pytest.raises(VersionUnavailable, match="is larger than the"):
        local_directory("default", version, key, "")
    assert MeteredStorage.read[f"{key}/model.safetensors"] == declared + 1


def test_a_well_formed_manifest_still_serves(saved):
    key, version, _ = saved
    assert local_directory("default", version, key).is_dir()
