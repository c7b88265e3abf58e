"""What a version of an encoder *is*: a stable id derived from its files.

::

    model_fingerprint("/models/x")   # sha256 hex of the config files and sampled weights
    base_version("default")          # "all-MiniLM-L6-v2:1a2b3c4d5e6f7a8b", the settings' model
                                     # (and its DOCUMENT_PROMPT setting, when one is set)
    base_label("default")            # "all-MiniLM-L6-v2"

The id never depends on where the files live. The first host to serve the settings' model
records it in the database (``BaseVersion``: the fingerprint its version string is built from,
and a fingerprint of only the files the encoder reads); every host then serves that string,
and a host whose copy differs in a file the encoder reads (another Hub revision, a changed
weights file) raises ``VersionUnavailable`` instead of writing rows under another version.
Files the encoder never reads (a README, a NOTES.txt) do not matter. Rows store the id in
``<field>_version``.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from pathlib import Path
from typing import Any

from django.core.signals import setting_changed
from django.db import DatabaseError, IntegrityError, router, transaction

from ..conf import SETTING_NAME, encoder_config
from ..encoder import resolve_model_path
from ..encoder.fingerprint import files_fingerprint, model_fingerprint
from ..exceptions import VersionUnavailable
from ..models import BaseVersion

logger = logging.getLogger(__name__)

_lock = threading.Lock()
_base_versions: dict[str, str] = {}
_refusals: dict[str, str] = {}  # encoder -> why this host's copy of its model is refused


def base_version(name: str = "default") -> str:
    """A short stable id of the settings' model, e.g. ``all-MiniLM-L6-v2:1a2b3c...``.

    The id recorded in the database when the model first served (``BaseVersion``), checked
    against this host's files once per process: ``VersionUnavailable`` when they differ in a
    file the encoder reads. Rows are encoded with the document prompt, so a ``DOCUMENT_PROMPT``
    setting is part of the id (a new prompt makes every row stale); without that setting the
    id is the files' alone, as before prompts could be set.
    """
    version = _base_versions.get(name)
    if version is not None:
        return version
    refusal = _refusals.get(name)
    if refusal is not None:
        raise VersionUnavailable(refusal)
    config = encoder_config(name)
    directory = resolve_model_path(str(config["MODEL"]))
    fingerprint = model_fingerprint(directory)
    label = base_label(name)
    files = files_fingerprint(directory)
    recorded = _record(name, label, fingerprint, files)
    if recorded is not None:
        if recorded.files != files:
            refusal = (
                f"Encoder {name!r} serves {label}:{recorded.fingerprint[:16]}, recorded when it "
                f"first served on {recorded.recorded_at:%Y-%m-%d %H:%M} UTC, but this host's "
                f"copy of SBERT MODEL ({directory}) differs in a file the encoder reads "
                f"(fingerprint {files[:16]}, recorded {recorded.files[:16]}): another revision "
                "or changed files. Give every host the same model files. If the model was "
                f"changed on purpose on every host, `manage.py sbert_manifest --forget-base "
                f"{name}` records it anew (its rows are then re-encoded). Nothing is encoded "
                "with another version meanwhile."
            )
            with _lock:
                _refusals[name] = refusal
            raise VersionUnavailable(refusal)
        fingerprint = recorded.fingerprint
    prompt = config["DOCUMENT_PROMPT"]
    if prompt is not None:
        tagged = f"{fingerprint}\0DOCUMENT_PROMPT\0{prompt}".encode()
        fingerprint = hashlib.sha256(tagged).hexdigest()
    version = f"{label}:{fingerprint[:16]}"
    with _lock:
        _base_versions[name] = version
    return version


def base_unavailable_reason(name: str = "default") -> str | None:
    """Why this host cannot serve encoder ``name``'s settings' model, or None (check E012)."""
    try:
        base_version(name)
    except VersionUnavailable as exc:
        return str(exc)
    return None


def _record(name: str, label: str, fingerprint: str, files: str) -> BaseVersion | None:
    """The database's record of the settings' model, written now if this is the first host to
    serve it; None when it cannot be read or written (not migrated yet, a read-only database):
    this host's own fingerprint then serves."""
    alias = router.db_for_write(BaseVersion)
    records = BaseVersion.objects.using(alias)
    try:
        # A savepoint: a missing table or a read-only database must not break a caller's
        # transaction (a data migration, the promotion switch).
        with transaction.atomic(using=alias):
            found = records.filter(encoder_name=name, label=label).first()
        if found is not None:
            return found
        try:
            with transaction.atomic(using=alias):
                return records.create(
                    encoder_name=name, label=label, fingerprint=fingerprint, files=files
                )
        except IntegrityError:  # another process recorded it at the same moment
            return records.filter(encoder_name=name, label=label).first()
    except DatabaseError as exc:
        logger.warning(
            "django-sbert: the base version of encoder %r is not recorded (%s: %s); this "
            "host's own fingerprint serves.",
            name,
            type(exc).__name__,
            exc,
        )
        return None


def forget_base_record(name: str) -> int:
    """Delete the database's record of encoder ``name``'s settings' model: the next host to
    serve it records its own files (``sbert_manifest --forget-base``). Returns rows deleted."""
    alias = router.db_for_write(BaseVersion)
    deleted, _ = BaseVersion.objects.using(alias).filter(encoder_name=name).delete()
    forget_base_versions()
    return deleted


def base_label(name: str = "default") -> str:
    """The settings' model name without its directory, e.g. ``all-MiniLM-L6-v2``."""
    model = str(encoder_config(name)["MODEL"])
    return (Path(model.rstrip("/")).name or model)[:60]


def forget_base_versions() -> None:
    """Drop this process's computed base versions (the settings or the files changed)."""
    with _lock:
        _base_versions.clear()
        _refusals.clear()


def _on_setting_changed(*, setting: str, **kwargs: Any) -> None:
    if setting == SETTING_NAME:
        forget_base_versions()


setting_changed.connect(_on_setting_changed, dispatch_uid="django_sbert.serving.identity.reset")
