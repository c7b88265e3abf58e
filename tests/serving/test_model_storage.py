"""Encoder versions travel through Django's storage API; each host serves a verified copy.

The training side writes a version once into a storage directory that only it writes
(``STORAGES["sbert_models"]``, a real ``FileSystemStorage``); every "host" has its own
``MODEL_CACHE``. Shown: the manifest lists every file's size and sha256; a host fetches the
version once, verifies it and loads it; the processes of two hosts fetching at the same time
download each file once per host; a corrupted file is refused with a message naming the
version and the storage, and nothing is cached; a version saved before manifests existed
gets one from ``manage.py sbert_manifest``.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from django.conf import global_settings
from django.core.management import call_command

from django_sbert import serving
from django_sbert.exceptions import VersionUnavailable
from django_sbert.serving.model_cache import cached_path, forget_fetch_failures, local_directory
from django_sbert.serving.storage import MANIFEST, model_storage, read_manifest

ROOT = Path(__file__).resolve().parents[2]
COUNTING = "tests.serving.counting_storage.CountingFileSystemStorage"


@pytest.fixture
def site(settings, tmp_path):
    """STORAGES["sbert_models"] in a directory only the training side writes, and this
    process's own cache: one host of a site."""
    store = tmp_path / "training-writes-here"
    settings.STORAGES = {
        **global_settings.STORAGES,
        "sbert_models": {
            "BACKEND": COUNTING,
            "OPTIONS": {"location": str(store), "open_log": str(tmp_path / "opens.log")},
        },
    }
    settings.SBERT = {
        **settings.SBERT,
        "MODEL_STORAGE": "sbert_models",
        "MODEL_CACHE": str(tmp_path / "host-a-cache"),
    }
    serving.reset_encoders()
    yield store
    serving.reset_encoders()


def use_cache(settings, directory: Path) -> None:
    settings.SBERT = {**settings.SBERT, "MODEL_CACHE": str(directory)}
    serving.reset_encoders()


def test_a_saved_version_is_sealed_by_a_manifest_of_sizes_and_sums(site, tiny_encoder):
    key, version = serving.save_encoder(tiny_encoder, "default", "tiny")

    fingerprint = version.rsplit(":", 1)[1]
    assert key == f"default/{fingerprint}" and version.startswith("tiny-ft:")
    manifest = json.loads((site / key / MANIFEST).read_text())
    assert manifest["version"] == version and manifest["encoder"] == "default"
    on_disk = {
        p.relative_to(site / key).as_posix(): p
        for p in (site / key).rglob("*")
        if p.is_file() and p.name != MANIFEST
    }
    assert set(manifest["files"]) == set(on_disk)
    assert {"config.json", "model.safetensors", "modules.json"} <= set(on_disk)
    for relative, path in on_disk.items():
        data = path.read_bytes()
        assert manifest["files"][relative] == {
            "size": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
        }
    # Saving the same weights again writes nothing new and names the same version.
    before = (site / key / MANIFEST).stat().st_mtime_ns
    assert serving.save_encoder(tiny_encoder, "default", "tiny") == (key, version)
    assert (site / key / MANIFEST).stat().st_mtime_ns == before


def test_a_host_fetches_verifies_and_loads_its_own_copy(site, tiny_encoder, tmp_path):
    key, version = serving.save_encoder(tiny_encoder, "default", "tiny")

    local = local_directory("default", version, key)
    assert local == cached_path(key) and local.is_relative_to(tmp_path / "host-a-cache")
    for relative in read_manifest(key)["files"]:
        assert (local / relative).read_bytes() == (site / key / relative).read_bytes()
    assert not list((tmp_path / "host-a-cache").glob(".tmp-*"))
    texts = ["central bank raises rates", "storm closes schools"]
    loaded = serving.encoder_for(serving.Serving("default", version, key))
    np.testing.assert_allclose(loaded.encode(texts), tiny_encoder.encode(texts), atol=1e-6)
    # A second need reads the cache, not the storage.
    opens = (tmp_path / "opens.log").read_text().splitlines()
    assert local_directory("default", version, key) == local
    assert (tmp_path / "opens.log").read_text().splitlines() == opens


def test_a_corrupted_file_is_refused_naming_the_version_and_the_storage(
    site, tiny_encoder, settings, tmp_path
):
    key, version = serving.save_encoder(tiny_encoder, "default", "tiny")
    weights = site / key / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, one byte changed
    weights.write_bytes(bytes(data))

    with pytest.raises(VersionUnavailable) as info:
        local_directory("default", version, key)
    message = str(info.value)
    assert version in message
    assert "CountingFileSystemStorage" in message and str(site) in message
    assert f"{key}/model.safetensors has sha256" in message
    assert not cached_path(key).exists()
    assert not list((tmp_path / "host-a-cache").glob(".tmp-*")), "a partial copy was left"
    # The encoder refuses too: no other version is loaded instead.
    with pytest.raises(VersionUnavailable, match="sha256"):
        serving.encoder_for(serving.Serving("default", version, key))

    # A truncated file is refused by its size (once the failure's back-off is over).
    weights.write_bytes(bytes(data[:100]))
    forget_fetch_failures()
    with pytest.raises(VersionUnavailable, match="has 100 bytes where the manifest says"):
        local_directory("default", version, key)


def test_an_unfinished_upload_is_never_served(site, tiny_encoder):
    key, version = serving.save_encoder(tiny_encoder, "default", "tiny")
    (site / key / MANIFEST).unlink()  # as a crash before the manifest was written leaves it

    with pytest.raises(VersionUnavailable, match=f"has no {key}/manifest.json"):
        local_directory("default", version, key)
    assert not cached_path(key).exists()


@pytest.mark.django_db
def test_sbert_manifest_seals_a_version_saved_before_manifests(site, tiny_encoder):
    from django_sbert.models import EncoderVersion

    key, version = serving.save_encoder(tiny_encoder, "default", "tiny")
    sealed = json.loads((site / key / MANIFEST).read_text())
    (site / key / MANIFEST).unlink()
    EncoderVersion.objects.create(encoder_name="default", version=version, directory=key)
    # A row saved before manifests existed records no manifest digest.
    EncoderVersion.objects.filter(version=version).update(manifest_sha256="")
    with pytest.raises(VersionUnavailable, match="sbert_manifest"):
        local_directory("default", version, key)

    out = io.StringIO()
    call_command("sbert_manifest", stdout=out)
    assert f"{version}: wrote {key}/manifest.json" in out.getvalue()
    assert json.loads((site / key / MANIFEST).read_text())["files"] == sealed["files"]
    recorded = EncoderVersion.objects.get(version=version).manifest_sha256
    assert recorded == hashlib.sha256((site / key / MANIFEST).read_bytes()).hexdigest()
    forget_fetch_failures()  # the failure above is remembered for a back-off
    assert local_directory("default", version, key, recorded).is_dir()


HOST_SCRIPT = """
import os, sys, time
import django
django.setup()
from django_sbert.serving.model_cache import local_directory
go = sys.argv[4]
while not os.path.exists(go):
    time.sleep(0.005)
print(local_directory(sys.argv[1], sys.argv[2], sys.argv[3]))
"""


@pytest.mark.heavy
def test_two_hosts_fetch_concurrently_once_each(site, tiny_encoder, tmp_path):
    """Four real processes, two per host (cache directory), start fetching at the same moment:
    each file is read from the storage once per host, and every process gets a whole copy."""
    key, version = serving.save_encoder(tiny_encoder, "default", "tiny")
    log = tmp_path / "opens.log"
    log.unlink(missing_ok=True)
    go = tmp_path / "go"
    options = json.dumps({"location": str(site), "open_log": str(log)})
    processes = []
    for host in ("host-1", "host-2"):
        for _ in range(2):
            env = {
                **os.environ,
                "DJANGO_SETTINGS_MODULE": "tests.host_settings",
                "SBERT_TEST_STORAGE_BACKEND": COUNTING,
                "SBERT_TEST_STORAGE_OPTIONS": options,
                "SBERT_TEST_MODEL_CACHE": str(tmp_path / host),
            }
            command = [sys.executable, "-c", HOST_SCRIPT, "default", version, key, str(go)]
            processes.append(
                subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
            )
    time.sleep(3)  # let every process import Django and wait for the signal
    go.touch()
    outputs = [p.communicate(timeout=120)[0].strip() for p in processes]
    assert all(p.returncode == 0 for p in processes), outputs

    assert outputs[:2] == [str(tmp_path / "host-1" / key)] * 2
    assert outputs[2:] == [str(tmp_path / "host-2" / key)] * 2
    opened = Counter(line.split(" ", 1)[1] for line in log.read_text().splitlines())
    files = [*read_manifest(key, model_storage())["files"], MANIFEST]
    assert opened == Counter({f"{key}/{name}": 2 for name in files}), opened
    for host in ("host-1", "host-2"):
        for name in files[:-1]:
            assert (tmp_path / host / key / name).read_bytes() == (site / key / name).read_bytes()
        assert not list((tmp_path / host).glob(".tmp-*"))


def test_a_storage_key_that_leaves_the_cache_is_refused(site, tmp_path):
    with pytest.raises(VersionUnavailable, match="leaves the cache"):
        local_directory("default", "tiny-ft:0123456789abcdef", "default/../../outside")
    assert not (tmp_path / "outside").exists()


@pytest.mark.django_db
def test_a_model_storage_that_is_not_in_storages_is_a_settings_error(settings, tmp_path):
    from django_sbert.checks import check_local_files, check_settings
    from django_sbert.models import EncoderVersion, VersionStatus

    cache = tmp_path / "cache"
    settings.SBERT = {
        **settings.SBERT,
        "MODEL_STORAGE": "no-such-storage",
        "MODEL_CACHE": str(cache),
    }
    errors = check_settings()
    assert [e.id for e in errors] == ["django_sbert.E005"]
    assert "'no-such-storage'" in errors[0].msg and "STORAGES" in errors[0].hint
    # The start-up check reports it for the serving version instead of crashing.
    EncoderVersion.objects.create(
        encoder_name="default",
        version="tiny-ft:0123456789abcdef",
        directory="default/0123456789abcdef",
        status=VersionStatus.ACTIVE,
    )
    errors = check_local_files(databases=["default"])
    assert [e.id for e in errors] == ["django_sbert.E012"]
    assert "'no-such-storage', which is not a key of settings.STORAGES" in errors[0].msg
    assert not cache.exists()  # refused before anything was written
