"""Where fine-tuned versions' files live: a Django storage backend, one manifest per version.

::

    model_storage()                       # the Storage named by SBERT["MODEL_STORAGE"]
    save_encoder(encoder, "default", "all-MiniLM-L6-v2")   # -> ("default/<fp>", "<label>-ft:<fp>")
    read_manifest("default/<fp>")         # {"files": {"config.json": {"size", "sha256"}, ...}}

A version is written once, by the training worker, under a content-addressed prefix
(``<encoder>/<fingerprint>/``): its files first, then ``manifest.json`` with each file's size
and sha256. A prefix without a manifest is an incomplete upload and is never served. Hosts
never load from the storage directly: each copies the serving version into its own cache and
verifies every sum first (``model_cache.local_directory``).

``SBERT["MODEL_STORAGE"]`` names a key of Django's ``STORAGES`` (S3 and friends through
django-storages); by default a ``FileSystemStorage`` under ``model_root()``
(``SBERT["MODEL_DIR"]``), so a one-host site needs no setting at all. Which version serves is
never read from here but from the database (``versions.py``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.files import File
from django.core.files.base import ContentFile
from django.core.files.storage import FileSystemStorage, Storage, storages
from django.core.files.storage.handler import InvalidStorageError

from ..conf import sbert_settings
from ..exceptions import ManifestError
from .identity import model_fingerprint

if TYPE_CHECKING:
    from ..encoder import SentenceEncoder

MANIFEST = "manifest.json"
MANIFEST_FORMAT = 1
CHUNK = 1024 * 1024  # bytes read at a time while hashing or copying


def model_root() -> Path:
    """``SBERT["MODEL_DIR"]``, else ``<BASE_DIR>/sbert_models``, else ``./sbert_models``."""
    configured = sbert_settings.MODEL_DIR
    if configured:
        return Path(configured)
    base = getattr(settings, "BASE_DIR", None)
    return Path(base or Path.cwd()) / "sbert_models"


def model_storage() -> Storage:
    """The storage versions are written to and fetched from (``SBERT["MODEL_STORAGE"]``)."""
    alias = sbert_settings.MODEL_STORAGE
    if not alias:
        return FileSystemStorage(location=model_root())
    try:
        return storages[alias]
    except InvalidStorageError as exc:
        raise InvalidStorageError(
            f"SBERT['MODEL_STORAGE'] is {alias!r}, which is not a key of settings.STORAGES. "
            f"Add STORAGES[{alias!r}] = {{'BACKEND': ...}} or set MODEL_STORAGE to None (files "
            "under SBERT['MODEL_DIR'])."
        ) from exc


def describe_storage(storage: Storage | None = None) -> str:
    """A short name of a storage for messages: its class and where it writes."""
    storage = storage or model_storage()
    alias = sbert_settings.MODEL_STORAGE
    where = [f"STORAGES[{alias!r}]"] if alias else []
    for attribute in ("bucket_name", "location", "base_location"):
        value = getattr(storage, attribute, None)
        if value:
            where.append(f"{attribute}={value}")
            break
    return f"{type(storage).__name__}({', '.join(where)})"


def resolve_directory(stored: str) -> Path:
    """A legacy local directory: relative ones under ``model_root()``. Kept for callers that
    read files saved before MODEL_STORAGE; versions now resolve through the host cache."""
    path = Path(stored)
    return path if path.is_absolute() else model_root() / path


def missing_version_files(directory: str | os.PathLike[str]) -> str | None:
    """Why the model files at local ``directory`` are not usable, or None when they are."""
    path = Path(directory)
    if not path.is_dir():
        return f"{path} does not exist on this host"
    if not (path / "config.json").is_file():
        return f"{path} has no config.json (an incomplete copy?)"
    return None


def file_digest(path: Path) -> tuple[int, str]:
    """(size, sha256 hex) of a local file, read in chunks."""
    digest = hashlib.sha256()
    size = 0
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return size, digest.hexdigest()


def build_manifest(directory: Path, *, encoder: str, version: str) -> dict[str, Any]:
    """The manifest of a local model directory: every file's size and sha256."""
    files = {}
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        size, sha = file_digest(path)
        files[path.relative_to(directory).as_posix()] = {"size": size, "sha256": sha}
    return {"format": MANIFEST_FORMAT, "encoder": encoder, "version": version, "files": files}


def save_encoder(encoder: SentenceEncoder, name: str, label: str) -> tuple[str, str]:
    """Write ``encoder`` to the model storage once; return (storage prefix, version).

    The model is saved to a local temporary directory, fingerprinted, uploaded file by file
    under ``<name>/<fingerprint>/`` and sealed by its manifest, written last: a crash leaves a
    prefix without a manifest, which no host serves and the next save of the same weights
    overwrites. ``version`` is ``<label>-ft:<fingerprint>``.
    """
    staging = Path(tempfile.mkdtemp(prefix="django-sbert-save-"))
    try:
        encoder.save(staging)
        fingerprint = model_fingerprint(staging)[:16]
        prefix = f"{name}/{fingerprint}"
        version = f"{label[:60]}-ft:{fingerprint}"
        storage = model_storage()
        if not _has_manifest(storage, prefix):  # else the same weights were saved before
            publish_directory(
                staging, prefix, build_manifest(staging, encoder=name, version=version)
            )
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return prefix, version


def publish_directory(
    directory: Path, prefix: str, manifest: dict[str, Any], storage: Storage | None = None
) -> None:
    """Upload every file the manifest lists from ``directory`` under ``prefix``, then the
    manifest itself."""
    storage = storage or model_storage()
    for relative in manifest["files"]:
        with (directory / relative).open("rb") as handle:
            _put(storage, f"{prefix}/{relative}", File(handle))
    body = json.dumps(manifest, indent=1, sort_keys=True).encode()
    _put(storage, f"{prefix}/{MANIFEST}", ContentFile(body))


def _put(storage: Storage, key: str, content: File) -> None:
    # Storage.save() picks another name when the key exists (FileSystemStorage adds a suffix);
    # a file left by an interrupted upload is replaced instead.
    if storage.exists(key):
        storage.delete(key)
    saved = storage.save(key, content)
    if saved != key:
        raise OSError(f"{describe_storage(storage)} stored {key!r} as {saved!r}; expected {key!r}.")


def _has_manifest(storage: Storage, prefix: str) -> bool:
    return bool(storage.exists(f"{prefix}/{MANIFEST}"))


def read_manifest(prefix: str, storage: Storage | None = None) -> dict[str, Any]:
    """The manifest of the version under ``prefix``; ``ManifestError`` says what is wrong."""
    storage = storage or model_storage()
    key = f"{prefix}/{MANIFEST}"
    if not storage.exists(key):
        raise ManifestError(
            f"{describe_storage(storage)} has no {key} (an upload that did not finish, the wrong "
            "storage, or a version saved before manifests existed: `manage.py sbert_manifest` "
            "writes one from the files the storage holds)"
        )
    with storage.open(key, "rb") as handle:
        try:
            manifest = json.loads(handle.read())
        except ValueError as exc:
            raise ManifestError(f"{key} in {describe_storage(storage)} is not JSON: {exc}") from exc
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, dict) or not files:
        raise ManifestError(f"{key} in {describe_storage(storage)} lists no files")
    for relative, entry in files.items():
        parts = PurePosixPath(relative).parts
        unsafe = relative.startswith("/") or ".." in parts or not parts
        if unsafe or not isinstance(entry, dict) or {"size", "sha256"} - set(entry):
            raise ManifestError(f"{key} in {describe_storage(storage)}: bad entry {relative!r}")
    return manifest


def write_manifest(
    prefix: str, *, encoder: str, version: str, storage: Storage | None = None
) -> dict[str, Any]:
    """Hash the files already under ``prefix`` in the storage and write their manifest.

    For versions saved before manifests existed (``manage.py sbert_manifest``): it trusts the
    files as they are now.
    """
    storage = storage or model_storage()
    files: dict[str, dict[str, Any]] = {}
    for relative in _walk(storage, prefix):
        if relative == MANIFEST:
            continue
        digest = hashlib.sha256()
        size = 0
        with storage.open(f"{prefix}/{relative}", "rb") as handle:
            while chunk := handle.read(CHUNK):
                digest.update(chunk)
                size += len(chunk)
        files[relative] = {"size": size, "sha256": digest.hexdigest()}
    if "config.json" not in files:
        raise ManifestError(f"{describe_storage(storage)} holds no model under {prefix}/")
    manifest = {"format": MANIFEST_FORMAT, "encoder": encoder, "version": version, "files": files}
    body = json.dumps(manifest, indent=1, sort_keys=True).encode()
    _put(storage, f"{prefix}/{MANIFEST}", ContentFile(body))
    return manifest


def _walk(storage: Storage, prefix: str, below: str = "") -> list[str]:
    """Every file under ``prefix`` (relative, POSIX separators), through ``Storage.listdir``."""
    path = f"{prefix}/{below}".rstrip("/")
    try:
        folders, files = storage.listdir(path)
    except FileNotFoundError:
        return []
    found = [f"{below}{name}" for name in files]
    for folder in folders:
        found.extend(_walk(storage, prefix, f"{below}{folder}/"))
    return sorted(found)
