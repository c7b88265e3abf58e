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

The manifest cannot vouch for itself: the sha256 of its own bytes is recorded in
``EncoderVersion.manifest_sha256``, and hosts refuse a manifest whose digest differs.
Manifests are read strictly (``parse_manifest``), and each storage call of a fetch runs under a
timeout (``TimedStorage``), so a storage that hangs makes the version unavailable, not the
process.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from django.conf import settings
from django.core.files import File
from django.core.files.base import ContentFile
from django.core.files.storage import FileSystemStorage, Storage, storages
from django.core.files.storage.handler import InvalidStorageError
from django.db.models.signals import pre_save

from ..conf import sbert_settings
from ..exceptions import ManifestError
from .identity import model_fingerprint

if TYPE_CHECKING:
    from ..encoder import SentenceEncoder

MANIFEST = "manifest.json"
MANIFEST_FORMAT = 1
CHUNK = 1024 * 1024  # bytes read at a time while hashing or copying
MAX_MANIFEST_BYTES = 1 << 20  # a manifest lists files, it is never larger than this
MAX_FILE_BYTES = 1 << 40  # a declared size beyond 1 TiB is a malformed manifest
# A host's verified copy keeps the manifest it was verified against under this name: its
# sha256 is the copy's marker (model_cache checks it before every use).
MARKER = ".sbert-manifest.json"
SHA256 = re.compile(r"[0-9a-f]{64}")

T = TypeVar("T")

# Storage prefix -> sha256 of the manifest this process wrote or found there (save_encoder),
# for the EncoderVersion row saved next (``_record_manifest_digest``).
_sealed: dict[str, str] = {}


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


def describe_storage(storage: Any = None) -> str:
    """A short name of a storage for messages: its class and where it writes."""
    storage = storage or model_storage()
    storage = getattr(storage, "wrapped", storage)  # a TimedStorage: the storage it times
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
        if _has_manifest(storage, prefix):  # the same weights were saved before
            _sealed[prefix] = manifest_digest(load_manifest(prefix, storage)[1])
        else:
            body = publish_directory(
                staging, prefix, build_manifest(staging, encoder=name, version=version)
            )
            _sealed[prefix] = manifest_digest(body)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return prefix, version


def publish_directory(
    directory: Path, prefix: str, manifest: dict[str, Any], storage: Storage | None = None
) -> bytes:
    """Upload every file the manifest lists from ``directory`` under ``prefix``, then the
    manifest itself; return the manifest's bytes as written."""
    storage = storage or model_storage()
    for relative in manifest["files"]:
        with (directory / relative).open("rb") as handle:
            _put(storage, f"{prefix}/{relative}", File(handle))
    body = json.dumps(manifest, indent=1, sort_keys=True).encode()
    _put(storage, f"{prefix}/{MANIFEST}", ContentFile(body))
    return body


def manifest_digest(body: bytes) -> str:
    """The sha256 of a manifest's bytes: what ``EncoderVersion.manifest_sha256`` records."""
    return hashlib.sha256(body).hexdigest()


def sealed_digest(prefix: str) -> str | None:
    """The digest of the manifest this process wrote (or found) under ``prefix``, if any."""
    return _sealed.get(prefix)


def _record_manifest_digest(sender: Any, instance: Any, **kwargs: Any) -> None:
    """Fill ``EncoderVersion.manifest_sha256`` of a row saved right after ``save_encoder``
    sealed its files, so the training worker records it with the row in the same process."""
    if instance.manifest_sha256 or instance.is_base or not instance.directory:
        return
    digest = _sealed.get(instance.directory)
    if digest is not None:
        instance.manifest_sha256 = digest


pre_save.connect(
    _record_manifest_digest,
    sender="django_sbert.EncoderVersion",
    dispatch_uid="django_sbert.serving.storage.manifest_digest",
)


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


def read_manifest(prefix: str, storage: Any = None) -> dict[str, Any]:
    """The manifest of the version under ``prefix``; ``ManifestError`` says what is wrong."""
    return load_manifest(prefix, storage)[0]


def load_manifest(prefix: str, storage: Any = None) -> tuple[dict[str, Any], bytes]:
    """The manifest under ``prefix``, checked (``parse_manifest``), and its bytes as stored."""
    storage = storage or model_storage()
    key = f"{prefix}/{MANIFEST}"
    where = f"{key} in {describe_storage(storage)}"
    if not storage.exists(key):
        raise ManifestError(
            f"{describe_storage(storage)} has no {key} (an upload that did not finish, the wrong "
            "storage, or a version saved before manifests existed: `manage.py sbert_manifest` "
            "writes one from the files the storage holds)"
        )
    with storage.open(key, "rb") as handle:
        body = handle.read(MAX_MANIFEST_BYTES + 1)
    if len(body) > MAX_MANIFEST_BYTES:
        raise ManifestError(f"{where} is larger than {MAX_MANIFEST_BYTES} bytes")
    return parse_manifest(body, where), body


def parse_manifest(body: bytes, where: str = MANIFEST) -> dict[str, Any]:
    """A manifest's bytes as a dict, checked strictly; ``ManifestError`` names the first fault.

    Every entry must be ``{"size": <whole number 0..1 TiB>, "sha256": <64 hex digits>}`` under
    a plain relative path: no leading ``/``, no empty, ``.`` or ``..`` part, no backslash, no
    NUL. A manifest that fails here is never used to copy anything.
    """
    try:
        manifest = json.loads(body)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise ManifestError(f"{where} is not JSON: {exc}") from exc
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, dict) or not files:
        raise ManifestError(f"{where} lists no files")
    if manifest.get("version") is not None and not isinstance(manifest["version"], str):
        raise ManifestError(f"{where}: its version is not a string")
    for relative, entry in files.items():
        problem = _path_problem(relative)
        if problem is None:
            problem = _entry_problem(entry)
        if problem is not None:
            raise ManifestError(f"{where}: bad entry {relative!r}: {problem}")
    return manifest


def _path_problem(relative: Any) -> str | None:
    if not isinstance(relative, str) or not relative or len(relative) > 1000:
        return "not a file name"
    if "\0" in relative or "\\" in relative:
        return "a NUL or a backslash in its path"
    if relative.startswith("/") or any(part in ("", ".", "..") for part in relative.split("/")):
        return "not a plain relative path"
    if relative in (MANIFEST, MARKER):
        return "a reserved name"
    return None


def _entry_problem(entry: Any) -> str | None:
    if not isinstance(entry, dict):
        return "not an object"
    size, sha = entry.get("size"), entry.get("sha256")
    # bool is an int in Python; a float (1e999 is inf), a string ("12x") are refused.
    if type(size) is not int or not 0 <= size <= MAX_FILE_BYTES:
        return f"size {size!r} is not a whole number of bytes"
    if not isinstance(sha, str) or not SHA256.fullmatch(sha):
        return f"sha256 {sha!r} is not 64 lowercase hex digits"
    return None


def missing_spec_files(files: Iterable[str], modules: Any) -> list[str]:
    """Files a saved version's own configuration names but ``files`` lacks.

    Without them loading would fall back to other settings (``max_seq_length`` from the
    tokenizer, mean pooling, no prompts) and serve a different model under the same version:
    ``config.json``, the weights, and, for a sentence-transformers directory (``modules`` is
    the parsed ``modules.json``), its two configuration files and each module's config.
    """
    present = set(files)
    missing = [] if "config.json" in present else ["config.json"]
    weights = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")
    if not present.intersection(weights):
        missing.append("model.safetensors")
    if modules is None:
        return missing
    for name in ("sentence_bert_config.json", "config_sentence_transformers.json"):
        if name not in present:
            missing.append(name)
    entries = modules if isinstance(modules, list) else []
    for entry in entries:
        folder = str(entry.get("path") or "").strip("/") if isinstance(entry, dict) else ""
        kind = str(entry.get("type", "")) if isinstance(entry, dict) else ""
        if not folder:
            continue
        if kind.endswith(("Pooling", "Dense")) and f"{folder}/config.json" not in present:
            missing.append(f"{folder}/config.json")
        if kind.endswith("Dense") and not present.intersection(
            {f"{folder}/model.safetensors", f"{folder}/pytorch_model.bin"}
        ):
            missing.append(f"{folder}/model.safetensors")
    return missing


class StorageTimeout(TimeoutError):
    """A call to the model storage ran past ``model_cache.STORAGE_TIMEOUT``."""


def call_with_timeout(function: Callable[[], T], seconds: float | None, what: str) -> T:
    """``function()``, or ``StorageTimeout`` after ``seconds`` (None or 0: no limit).

    The call runs in a daemon thread: a storage that never answers keeps that thread, not the
    caller (nor the process's exit).
    """
    if not seconds:
        return function()
    outcome: dict[str, Any] = {}
    done = threading.Event()

    def run() -> None:
        try:
            outcome["value"] = function()
        except BaseException as exc:  # handed to the caller below
            outcome["error"] = exc
        finally:
            done.set()

    threading.Thread(target=run, name="sbert-storage", daemon=True).start()
    if not done.wait(seconds):
        raise StorageTimeout(f"{what} did not answer within STORAGE_TIMEOUT ({seconds:g} s)")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


class TimedStorage:
    """A storage whose ``exists``, ``open``, ``listdir`` and reads of opened files each run
    under a time limit (``call_with_timeout``); everything else is the wrapped storage's."""

    def __init__(self, storage: Storage, seconds: float | None) -> None:
        self.wrapped = storage
        self.seconds = seconds

    def __getattr__(self, name: str) -> Any:
        return getattr(self.wrapped, name)

    def call(self, function: Callable[[], T], what: str) -> T:
        return call_with_timeout(function, self.seconds, what)

    def exists(self, name: str) -> bool:
        return bool(self.call(lambda: self.wrapped.exists(name), f"exists({name!r})"))

    def open(self, name: str, mode: str = "rb") -> _TimedFile:
        handle = self.call(lambda: self.wrapped.open(name, mode), f"open({name!r})")
        return _TimedFile(handle, self, name)

    def listdir(self, path: str) -> tuple[list[str], list[str]]:
        return self.call(lambda: self.wrapped.listdir(path), f"listdir({path!r})")


class _TimedFile:
    def __init__(self, handle: Any, storage: TimedStorage, name: str) -> None:
        self.handle, self.storage, self.name = handle, storage, name

    def read(self, size: int = -1) -> bytes:
        return self.storage.call(lambda: self.handle.read(size), f"reading {self.name!r}")

    def close(self) -> None:
        self.storage.call(self.handle.close, f"closing {self.name!r}")

    def __enter__(self) -> _TimedFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_manifest(
    prefix: str, *, encoder: str, version: str, storage: Storage | None = None
) -> dict[str, Any]:
    """Hash the files already under ``prefix`` in the storage and write their manifest.

    For versions saved before manifests existed (``manage.py sbert_manifest``): it trusts the
    files as they are now, so it refuses a prefix missing a file the version's configuration
    names (``missing_spec_files``). ``sealed_digest(prefix)`` then gives the manifest's digest.
    """
    storage = storage or model_storage()
    files: dict[str, dict[str, Any]] = {}
    for relative in _walk(storage, prefix):
        if relative == MANIFEST or _path_problem(relative) is not None:
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
    modules = None
    if "modules.json" in files:
        with storage.open(f"{prefix}/modules.json", "rb") as handle:
            try:
                modules = json.loads(handle.read(MAX_MANIFEST_BYTES))
            except ValueError as exc:
                raise ManifestError(f"{prefix}/modules.json is not JSON: {exc}") from exc
    missing = missing_spec_files(files, modules)
    if missing:
        raise ManifestError(
            f"{describe_storage(storage)} lacks {', '.join(missing)} under {prefix}/, which "
            "the version's configuration names: sealing it would serve another model"
        )
    manifest = {"format": MANIFEST_FORMAT, "encoder": encoder, "version": version, "files": files}
    body = json.dumps(manifest, indent=1, sort_keys=True).encode()
    _put(storage, f"{prefix}/{MANIFEST}", ContentFile(body))
    _sealed[prefix] = manifest_digest(body)
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
