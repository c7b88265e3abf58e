"""Where fine-tuned versions' files live: ``SBERT["MODEL_DIR"]`` and atomic saves into it.

::

    model_root()                          # Path of SBERT["MODEL_DIR"] (or <BASE_DIR>/sbert_models)
    save_encoder(encoder, "default", "all-MiniLM-L6-v2")   # -> ("default/<fp>", "<label>-ft:<fp>")
    resolve_directory("default/<fp>")     # absolute Path under model_root()

Stored directories are relative to ``model_root()``, so the same database rows work on every
host that mounts the models at its own ``MODEL_DIR``. Which version serves is never read from
here but from the database (``versions.py``); a host missing the serving version's directory
refuses to encode (``missing_version_files``, ``cache.get_encoder``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from django.conf import settings

from ..conf import sbert_settings
from .identity import model_fingerprint

if TYPE_CHECKING:
    from ..encoder import SentenceEncoder


def model_root() -> Path:
    """``SBERT["MODEL_DIR"]``, else ``<BASE_DIR>/sbert_models``, else ``./sbert_models``."""
    configured = sbert_settings.MODEL_DIR
    if configured:
        return Path(configured)
    base = getattr(settings, "BASE_DIR", None)
    return Path(base or Path.cwd()) / "sbert_models"


def resolve_directory(stored: str) -> Path:
    """A stored directory: relative ones are under ``model_root()`` (portable across hosts)."""
    path = Path(stored)
    return path if path.is_absolute() else model_root() / path


def missing_version_files(directory: str | os.PathLike[str]) -> str | None:
    """Why the model files of a version are not usable at ``directory``, or None when they are.

    Cheap (two ``stat()`` calls): used before loading and by the start-up check.
    """
    path = Path(directory)
    if not path.is_dir():
        return f"{path} does not exist on this host"
    if not (path / "config.json").is_file():
        return f"{path} has no config.json (an incomplete copy?)"
    return None


def save_encoder(encoder: SentenceEncoder, name: str, label: str) -> tuple[str, str]:
    """Save ``encoder`` under ``model_root()/name/`` atomically; return (directory, version).

    The model is written to a hidden temporary directory and renamed into place, so a crash
    never leaves a half-written model where a version points. ``directory`` is relative to
    ``model_root()``; ``version`` is ``<label>-ft:<fingerprint>``.
    """
    parent = model_root() / name
    parent.mkdir(parents=True, exist_ok=True)
    _remove_abandoned(parent)
    staging = Path(tempfile.mkdtemp(prefix=".tmp-", dir=parent))
    try:
        encoder.save(staging)
        fingerprint = model_fingerprint(staging)[:16]
        final = parent / fingerprint
        if final.exists():  # the same weights were saved before
            shutil.rmtree(staging)
        else:
            os.rename(staging, final)  # atomic on one filesystem
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return f"{name}/{fingerprint}", f"{label[:60]}-ft:{fingerprint}"


def _remove_abandoned(parent: Path, older_than: float = 24 * 3600) -> None:
    """Delete temporary directories left by crashed saves (a day old or more)."""
    for path in parent.glob(".tmp-*"):
        try:
            if time.time() - path.stat().st_mtime > older_than:
                shutil.rmtree(path, ignore_errors=True)
        except OSError:
            continue
