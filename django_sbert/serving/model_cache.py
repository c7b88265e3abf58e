"""Each host's verified copy of the versions it serves: ``SBERT["MODEL_CACHE"]``.

::

    local_directory("default", "tiny-ft:1a2b...", "default/1a2b...")   # Path, fetched once
    cache_root()                      # SBERT["MODEL_CACHE"], else <MODEL_DIR>/.cache
    compile_cache()                   # SBERT["COMPILE_CACHE"], else <cache_root()>/.compiled
    fetch_failures()                  # versions this process failed to fetch, and when it retries

On first need a host copies the version from the model storage (``storage.py``) into a
temporary directory inside its cache, checks the manifest's own sha256 against the database's
and every file against the manifest, and renames the directory into place; before each use
the copy is checked against its marker (``storage.MARKER``), so a damaged copy is fetched
again, never served. Processes of one host share the cache and download once (an ``fcntl``
lock per version); docs/security.md ("Model files: what a host trusts").

A host that cannot fetch or verify the version raises ``VersionUnavailable`` naming the version
and the storage, whatever the storage raised (botocore's errors are not ``OSError``): it never
encodes with another version instead. Each storage call runs under
``STORAGE_TIMEOUT`` seconds; a failed fetch is remembered and not tried again for
``FETCH_BACKOFF`` seconds (doubling per failure, to at most 16 times as long),
so a corrupt version costs one download per back-off, not one per search.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.core.signals import setting_changed

from ..conf import SETTING_NAME, sbert_settings
from ..encoder.filemodes import shared_mode
from ..exceptions import VersionUnavailable
from .storage import (
    CHUNK,
    MARKER,
    ManifestError,
    TimedStorage,
    describe_storage,
    load_manifest,
    manifest_digest,
    missing_spec_files,
    missing_version_files,
    model_root,
    model_storage,
    parse_manifest,
)
from .versions import recorded_manifest_digest

logger = logging.getLogger(__name__)

ABANDONED_SECONDS = 24 * 3600  # temporary copies older than this were left by a crash
MAX_BACKOFF_DOUBLINGS = 4  # a failing version is retried at most every 16 back-offs
# Seconds each call to the model storage may take while a host fetches a version (exists,
# open, each 1 MiB read): past it the version is unavailable on that host for now.
STORAGE_TIMEOUT = 30.0
# Seconds a process waits before fetching again a version it failed to fetch or verify,
# doubling per failure (MAX_BACKOFF_DOUBLINGS); meanwhile it answers VersionUnavailable.
FETCH_BACKOFF = 60.0


@dataclass(frozen=True)
class FetchFailure:
    """A version this process could not fetch: why, how often in a row, when it retries."""

    version: str
    error: str
    failures: int
    retry_at: float  # time.monotonic()

    def as_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "error": self.error,
            "failures": self.failures,
            "retry_in": max(0.0, round(self.retry_at - time.monotonic(), 1)),
        }


_failures_lock = threading.Lock()
_failures: dict[str, FetchFailure] = {}  # storage key -> the last failed fetch


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


def local_directory(name: str, version: str, key: str, manifest_sha256: str | None = None) -> Path:
    """A local, verified directory of ``version`` of encoder ``name``, stored under ``key``.

    ``key`` is what ``EncoderVersion.directory`` holds: a storage prefix, or (rows saved
    before MODEL_STORAGE) an absolute local directory, used in place. ``manifest_sha256``: the
    digest the version's row records; by default what this process last read with the version
    (``versions.recorded_manifest_digest``), so no database is read here. Any failure raises
    ``VersionUnavailable``.
    """
    if Path(key).is_absolute():
        problem = missing_version_files(key)
        if problem is not None:
            raise VersionUnavailable(_message(name, version, problem, legacy=True))
        return Path(key)
    parts = key.split("/")
    if "\0" in key or any(part in ("", ".", "..") for part in parts):
        raise VersionUnavailable(
            _message(name, version, f"its storage key {key!r} leaves the cache")
        )
    expected = manifest_sha256 if manifest_sha256 is not None else recorded_manifest_digest(version)
    target = cached_path(key)
    if _copy_problem(target, expected) is None:
        return target
    failure = _failures.get(key)
    if failure is not None and failure.retry_at > time.monotonic():
        raise VersionUnavailable(
            f"{failure.error} (fetch failed {failure.failures} time(s); next try in "
            f"{failure.retry_at - time.monotonic():.0f} s, doubling from {FETCH_BACKOFF:g} s)"
        )
    try:
        # A MODEL_STORAGE missing from STORAGES fails before any disk write.
        storage = TimedStorage(model_storage(), STORAGE_TIMEOUT)
        root = cache_root()
        root.mkdir(parents=True, exist_ok=True)
        with _host_lock(root, key):
            problem = _copy_problem(target, expected)  # another process may have fetched it
            if problem is not None:
                if target.exists():
                    logger.warning(
                        "django-sbert: the cached copy %s of version %s %s; fetching it again.",
                        target,
                        version,
                        problem,
                    )
                    _discard(root, target)
                _fetch(name, version, key, target, storage, expected)
    except Exception as exc:  # any storage's errors: OSError, botocore's, a bad setting...
        error = exc if isinstance(exc, VersionUnavailable) else None
        if error is None:
            error = VersionUnavailable(_message(name, version, f"{type(exc).__name__}: {exc}"))
        _remember_failure(key, version, str(error))
        if error is exc:
            raise
        raise error from exc
    with _failures_lock:
        _failures.pop(key, None)
    return target


def unavailable_reason(
    name: str, version: str, key: str, manifest_sha256: str | None = None
) -> str | None:
    """Why this host cannot serve the version (fetching it if needed), or None when it can."""
    try:
        local_directory(name, version, key, manifest_sha256)
    except VersionUnavailable as exc:
        return str(exc)
    return None


def fetch_failures() -> list[dict[str, Any]]:
    """The versions this process failed to fetch and has not fetched since: version, error,
    failures in a row, seconds until the next try. For the health report and ``sbert_status``."""
    with _failures_lock:
        return [failure.as_dict() for failure in _failures.values()]


def forget_fetch_failures() -> None:
    """Retry every failed version at its next use (the settings changed, or a test)."""
    with _failures_lock:
        _failures.clear()


def _remember_failure(key: str, version: str, error: str) -> None:
    backoff = FETCH_BACKOFF
    with _failures_lock:
        previous = _failures.get(key)
        count = previous.failures + 1 if previous is not None else 1
        wait = backoff * 2 ** min(count - 1, MAX_BACKOFF_DOUBLINGS)
        _failures[key] = FetchFailure(version, error, count, time.monotonic() + wait)


def _copy_problem(target: Path, expected: str | None) -> str | None:
    """What is wrong with the cached copy ``target``, or None when it may be used: its marker
    must be the manifest the database records (when it records one), and every file it lists
    present with its size. Stats only: sums were checked when the copy was made."""
    try:
        body = (target / MARKER).read_bytes()
    except FileNotFoundError:
        return "is absent" if not target.exists() else "has no marker (an older or partial copy)"
    except OSError as exc:
        return f"cannot be read ({exc})"
    if expected and manifest_digest(body) != expected:
        return "was verified against another manifest than the one the database records"
    try:
        files = parse_manifest(body, str(target / MARKER))["files"]
    except ManifestError as exc:
        return f"has a bad marker ({exc})"
    for relative, entry in files.items():
        try:
            size = (target / relative).stat().st_size
        except OSError:
            return f"lacks {relative}"
        if size != entry["size"]:
            return f"has {relative} of {size} bytes where its manifest says {entry['size']}"
    return None


def _discard(root: Path, target: Path) -> None:
    """Move a bad copy out of the way (atomic), then delete it: a process that has its files
    open keeps reading them."""
    aside = Path(tempfile.mkdtemp(prefix=".tmp-discard-", dir=root))
    os.rename(target, aside / "copy")
    shutil.rmtree(aside, ignore_errors=True)


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


def _fetch(
    name: str, version: str, key: str, target: Path, storage: Any, expected: str | None
) -> None:
    manifest, body = load_manifest(key, storage)
    if expected and manifest_digest(body) != expected:
        raise VersionUnavailable(
            _message(
                name,
                version,
                f"{key}/manifest.json has sha256 {manifest_digest(body)} where the database "
                f"recorded {expected} when the version was saved (the manifest was replaced "
                "after the version was saved)",
            )
        )
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
        modules = None
        if (staging / "modules.json").is_file():
            try:
                modules = json.loads((staging / "modules.json").read_text(encoding="utf-8"))
            except ValueError as exc:
                raise ManifestError(f"{key}/modules.json is not JSON: {exc}") from exc
        missing = missing_spec_files(manifest["files"], modules)
        if missing:
            raise VersionUnavailable(
                _message(
                    name,
                    version,
                    f"its manifest lacks {', '.join(missing)}, which its configuration names "
                    "(loading would fall back to other settings and serve another model)",
                )
            )
        (staging / MARKER).write_bytes(body)
        shared_mode(staging)  # mkdtemp made it 0700: other users of the cache read it too
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
    """Copy one file, hashing it on the way; what is wrong with it, or None.

    Reads at most the declared size plus one byte: an oversized object is refused without
    copying the rest of it.
    """
    destination.parent.mkdir(parents=True, exist_ok=True)
    declared = int(entry["size"])
    digest = hashlib.sha256()
    size = 0
    if not storage.exists(key):
        return "is missing from the storage"
    with storage.open(key, "rb") as source, destination.open("wb") as out:
        while size <= declared:
            chunk = source.read(min(CHUNK, declared + 1 - size))
            if not chunk:
                break
            digest.update(chunk)
            size += len(chunk)
            out.write(chunk)
    if size > declared:
        return f"is larger than the {declared} bytes the manifest says (a corrupt copy)"
    if size != declared:
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
        try:
            storage = describe_storage()
        except Exception:  # a MODEL_STORAGE that is not in STORAGES: the problem says so
            storage = f"STORAGES[{sbert_settings.MODEL_STORAGE!r}]"
        where = f"{storage} (SBERT['MODEL_STORAGE']), cached in {cache_root()}"
        fix = (
            "Make the model storage reachable from this host with the files the training worker "
            "saved; a corrupt file must be re-saved there (train again, or restore it)."
        )
    return (
        f"Encoder {name!r} must encode with version {version!r} (the database says it serves), "
        f"but this host cannot get it from {where}: {problem}. {fix} Nothing is encoded with "
        "another version meanwhile."
    )


def _on_setting_changed(*, setting: str, **kwargs: Any) -> None:
    if setting == SETTING_NAME:
        forget_fetch_failures()


setting_changed.connect(_on_setting_changed, dispatch_uid="django_sbert.serving.model_cache.reset")
