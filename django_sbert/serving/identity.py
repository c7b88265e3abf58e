"""What a version of an encoder *is*: a stable id derived from its files.

::

    model_fingerprint("/models/x")   # sha256 hex of the config files and sampled weights
    base_version("default")          # "all-MiniLM-L6-v2:1a2b3c4d5e6f7a8b", the settings' model
                                     # (and its DOCUMENT_PROMPT setting, when one is set)
    base_label("default")            # "all-MiniLM-L6-v2"

The id never depends on where the files live, so every host holding the same model agrees on
it; rows store it in ``<field>_version``.
"""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path
from typing import Any

from django.core.signals import setting_changed

from ..conf import SETTING_NAME, encoder_config
from ..encoder import resolve_model_path
from ..encoder.fingerprint import model_fingerprint

_lock = threading.Lock()
_base_versions: dict[str, str] = {}


def base_version(name: str = "default") -> str:
    """A short stable id of the settings' model, e.g. ``all-MiniLM-L6-v2:1a2b3c...``.

    It does not depend on where the model lives on disk. Computed once per process. Rows are
    encoded with the document prompt, so a ``DOCUMENT_PROMPT`` setting is part of the id (a
    new prompt makes every row stale); without that setting the id is the files' alone, as
    before prompts could be set (prompts the model's own config declares are in its files).
    """
    version = _base_versions.get(name)
    if version is None:
        config = encoder_config(name)
        fingerprint = model_fingerprint(resolve_model_path(str(config["MODEL"])))
        prompt = config["DOCUMENT_PROMPT"]
        if prompt is not None:
            tagged = f"{fingerprint}\0DOCUMENT_PROMPT\0{prompt}".encode()
            fingerprint = hashlib.sha256(tagged).hexdigest()
        version = f"{base_label(name)}:{fingerprint[:16]}"
        with _lock:
            _base_versions[name] = version
    return version


def base_label(name: str = "default") -> str:
    """The settings' model name without its directory, e.g. ``all-MiniLM-L6-v2``."""
    model = str(encoder_config(name)["MODEL"])
    return (Path(model.rstrip("/")).name or model)[:60]


def forget_base_versions() -> None:
    """Drop this process's computed base versions (the settings or the files changed)."""
    with _lock:
        _base_versions.clear()


def _on_setting_changed(*, setting: str, **kwargs: Any) -> None:
    if setting == SETTING_NAME:
        forget_base_versions()


setting_changed.connect(_on_setting_changed, dispatch_uid="django_sbert.serving.identity.reset")
