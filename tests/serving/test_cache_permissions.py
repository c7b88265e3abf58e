"""A host's verified copies get the modes the umask gives, like any file the process writes.

``tempfile.mkdtemp`` creates 0700 whatever the umask: a copy renamed from one could be read by
the user that fetched it alone, and a web process and a worker running as different users
could not share ``MODEL_CACHE``. With the usual umask 022 the copy is 0755 / 0644; with 002 (a
group that both users share) 0775 / 0664.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Iterator

import pytest
from django.core.files.storage import FileSystemStorage

from django_sbert import serving
from django_sbert.encoder.filemodes import current_umask, shared_mode
from django_sbert.serving.model_cache import local_directory
from tests.serving.failing_storage import use_storage


@pytest.fixture
def umask() -> Iterator[callable]:
    previous = os.umask(0o022)
    os.umask(previous)

    def set_umask(mask: int) -> None:
        os.umask(mask)

    yield set_umask
    os.umask(previous)


def modes(root) -> tuple[set[int], set[int]]:
    dirs, files = {stat.S_IMODE(root.stat().st_mode)}, set()
    for path in root.rglob("*"):
        (dirs if path.is_dir() else files).add(stat.S_IMODE(path.stat().st_mode))
    return dirs, files


@pytest.mark.parametrize(
    ("mask", "dir_mode", "file_mode"), [(0o022, 0o755, 0o644), (0o002, 0o775, 0o664)]
)
def test_a_fetched_copy_follows_the_umask(
    settings, tmp_path, tiny_encoder, umask, mask, dir_mode, file_mode
):
    umask(mask)
    use_storage(settings, tmp_path / "store", FileSystemStorage, tmp_path / "host-cache")
    key, version = serving.save_encoder(tiny_encoder, "default", "tiny")

    local = local_directory("default", version, key)
    assert modes(local) == ({dir_mode}, {file_mode})
    assert current_umask() == mask
    serving.reset_encoders()


def test_a_temporary_file_renamed_into_a_cache_gets_the_umask_mode(tmp_path, umask):
    """What the compile cache does with each compiled package (``encoder/aot.py``)."""
    umask(0o022)
    handle, name = tempfile.mkstemp(dir=tmp_path)
    os.close(handle)
    assert stat.S_IMODE(os.stat(name).st_mode) == 0o600
    shared_mode(name)
    assert stat.S_IMODE(os.stat(name).st_mode) == 0o644
