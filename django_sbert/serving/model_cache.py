"""Each host's verified copy of the versions it serves: ``SBERT["MODEL_CACHE"]``.

::

    local_directory("default", "tiny-ft:1a2b...", "default/1a2b...")   # Path, fetched once
    cache_root()                      # SBERT["MODEL_CACHE"], else <MODEL_DIR>/.cache
    compile_cache()                   # SBERT["COMPILE_CACHE"], else <cache_root()>/.compiled

On first need a host copies the version from the model storage (``storage.py``) into a
temporary directory inside its cache, checks every file's size and sha256 against the
version's manifest, and renames the directory into place: a directory under ``cache_root()``
is complete and verified, or absent. Processes of one host share the cache and download once
(an ``fcntl`` lock per version); hosts never share a cache. A host that cannot fetch or verify
the version raises ``VersionUnavailable`` naming the version and the storage: it never encodes
with another version instead.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from django.core.files.storage.handler import InvalidStorageError

from ..conf import sbert_settings
from ..exceptions import VersionUnavailable
from .storage import (
    CHUNK,
    ManifestError,
    describe_storage,
    missing_version_files,
    model_root,
    model_storage,
    read_manifest,
)

logger = logging.getLogger(__name__)

ABANDONED_SECONDS = 24 * 3600  # temporary copies older than this were left by a crash


def cache_root() -> Path:
    """``SBERT["MODEL_CACHE"]``, else ``<model_root()>/.cache``."""
    configured = sbert_settings.MODEL_CACHE
    return Path(configured) if configured else model_root() / ".cache"


def compile_cache() -> Path | None:
    """``SBERT["COMPILE_CACHE"]``, else ``<cache_root()>/.compiled``; None when set to False.

    Where compiled single-query graphs are kept (``encoder/aot.py``): per host, like the
    verified copies, since a graph is built for this host's CPU.
    """
    configured = sbert_settings.COMPILE_CACHE
    if configured is False:
        return None
    return Path(configured) if configured else cache_root() / ".compiled"


def cached_path(key: str) -> Path:
    """Where the version stored under ``key`` lives in this host's cache (present or not)."""
    return cache_root().joinpath(*key.split("/"))


def local_directory(name: str, version: str, key: str) -> Path:
    """A local, verified directory of ``version`` of encoder ``name``, stored under ``key``.

    ``key`` is what ``EncoderVersion.directory`` holds: a storage prefix, or (rows saved
    before MODEL_STORAGE) an absolute local directory, used in place.
    """
    if Path(key).is_absolute():
        problem = missing_version_files(key)
        if problem is not None:
            raise VersionUnavailable(_message(name, version, problem, legacy=True))
        return Path(key)
    if ".." in key.split("/"):
        raise VersionUnavailable(
            _message(name, version, f"its storage key {key!r} leaves the cache")
        )
    target = cached_path(key)
    if target.is_dir():
        return target
    storage = model_storage()  # a MODEL_STORAGE missing from STORAGES fails before any disk write
    root = cache_root()
    try:
        root.mkdir(parents=True, exist_ok=True)
        with _host_lock(root, key):
            if not target.is_dir():  # another process of this host may have fetched it
                _fetch(name, version, key, target, storage)
    except VersionUnavailable:
        raise
    except (OSError, ManifestError) as exc:
        raise VersionUnavailable(_message(name, version, f"{type(exc).__name__}: {exc}")) from exc
    return target


def unavailable_reason(name: str, version: str, key: str) -> str | None:
    """Why this host cannot serve the version (fetching it if needed), or None when it can."""
    try:
        local_directory(name, version, key)
    except (VersionUnavailable, InvalidStorageError) as exc:  # the latter: a bad MODEL_STORAGE
        return str(exc)
    return None


@contextmanager
def _host_lock(root: Path, key: str) -> Iterator[None]:
    """An exclusive lock per version among the processes of this host (``fcntl.flock``)."""
    locks = root / ".locks"
    locks.mkdir(exist_ok=True)
    path = locks / (hashlib.sha256(key.encode()).hexdigest()[:32] + ".lock")
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # released when the file closes, or the process dies
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _fetch(name: str, version: str, key: str, target: Path, storage: Any) -> None:
    manifest = read_manifest(key, storage)
    if manifest.get("version") not in (None, version):
        raise VersionUnavailable(
            _message(
                name, version, f"the manifest under {key}/ is of version {manifest['version']!r}"
            )
        )
    root = cache_root()
    _remove_abandoned(root)
    staging = Path(tempfile.mkdtemp(prefix=".tmp-", dir=root))
    started = time.perf_counter()
    try:
        for relative, entry in manifest["files"].items():
            problem = _copy_verified(storage, f"{key}/{relative}", staging / relative, entry)
            if problem is not None:
                raise VersionUnavailable(
                    _message(name, version, f"{key}/{relative} {problem}; nothing was cached")
                )
        target.parent.mkdir(parents=True, exist_ok=True)
        os.rename(staging, target)  # atomic: the cache holds a whole verified version or none
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    logger.info(
        "django-sbert: fetched version %s (%d files) from %s into %s in %.1f s.",
        version,
        len(manifest["files"]),
        describe_storage(storage),
        target,
        time.perf_counter() - started,
    )


def _copy_verified(storage: Any, key: str, destination: Path, entry: dict[str, Any]) -> str | None:
    """Copy one file, hashing it on the way; what is wrong with it, or None."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    size = 0
    if not storage.exists(key):
        return "is missing from the storage"
    with storage.open(key, "rb") as source, destination.open("wb") as out:
        while chunk := source.read(CHUNK):
            digest.update(chunk)
            size += len(chunk)
            out.write(chunk)
    if size != int(entry["size"]):
        return f"has {size} bytes where the manifest says {entry['size']} (a corrupt copy)"
    if digest.hexdigest() != entry["sha256"]:
        return (
            f"has sha256 {digest.hexdigest()} where the manifest says {entry['sha256']} "
            "(a corrupt copy)"
        )
    return None


def _remove_abandoned(root: Path) -> None:
    """Delete temporary copies left by crashed fetches (a day old or more)."""
    for path in root.glob(".tmp-*"):
        try:
            if time.time() - path.stat().st_mtime > ABANDONED_SECONDS:
                shutil.rmtree(path, ignore_errors=True)
        except OSError:
            continue


def _message(name: str, version: str, problem: str, *, legacy: bool = False) -> str:
    if legacy:
        where = (
            "the local directory this version was saved to (a version saved before "
            "SBERT['MODEL_STORAGE'])"
        )
        fix = "Mount that directory on this host, or re-save the version to the model storage."
    else:
        where = f"{describe_storage()} (SBERT['MODEL_STORAGE']), cached in {cache_root()}"
        fix = (
            "Make the model storage reachable from this host with the files the training worker "
            "saved; a corrupt file must be re-saved there (train again, or restore it)."
        )
    return (
        f"Encoder {name!r} must encode with version {version!r} (the database says it serves), "
        f"but this host cannot get it from {where}: {problem}. {fix} Nothing is encoded with "
        "another version meanwhile."
    )
