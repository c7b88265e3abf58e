"""Which model encodes now: versions, where their files are, and the per-process encoders.

The rest of the Django layer reaches the ML core (``django_sbert.encoder``) only through
these names::

    get_encoder("default")          # the serving SentenceEncoder, loaded once per process
    encode_texts(texts, "default")  # (n, dim) float32 unit vectors
    query_vector("central banks")   # (vector, version), LRU-cached per process
    role_prompt("default", "query", model)   # the prompt queries (or documents) get
    encoder_version("default")      # the version string rows store in <field>_version
    serving("default")              # Serving(encoder, version, directory)

Modules: ``identity`` (what a version is), ``storage`` (where its files live), ``versions``
(which one serves, the switch lock), ``cache`` (loaded encoders, query vectors), ``paths``
(which inference path each encoder takes here, and why), ``worker`` (Celery worker process
set-up).
"""

from __future__ import annotations

from ..fields import encoder_dimensions
from .cache import (
    MAX_TUNED_LOADED,
    PROMPT_NAMES,
    Role,
    clear_query_cache,
    encode_query,
    encode_query_for,
    encode_texts,
    encoder_for,
    encoder_version,
    get_encoder,
    peek_query_cache,
    query_cache_info,
    query_vector,
    reset_encoders,
    role_prompt,
)
from .identity import base_label, base_version, model_fingerprint
from .paths import encoder_path, path_report
from .storage import missing_version_files, model_root, resolve_directory, save_encoder
from .versions import (
    Serving,
    forget_serving,
    promoting_version,
    serving,
    serving_changed,
    serving_version,
    switch_lock,
    version_directory,
)

__all__ = [
    "MAX_TUNED_LOADED",
    "PROMPT_NAMES",
    "Role",
    "Serving",
    "base_label",
    "base_version",
    "clear_query_cache",
    "encode_query",
    "encode_query_for",
    "encode_texts",
    "encoder_dimensions",
    "encoder_for",
    "encoder_path",
    "encoder_version",
    "forget_serving",
    "get_encoder",
    "missing_version_files",
    "model_fingerprint",
    "model_root",
    "path_report",
    "peek_query_cache",
    "promoting_version",
    "query_cache_info",
    "query_vector",
    "reset_encoders",
    "resolve_directory",
    "role_prompt",
    "save_encoder",
    "serving",
    "serving_changed",
    "serving_version",
    "switch_lock",
    "version_directory",
]
