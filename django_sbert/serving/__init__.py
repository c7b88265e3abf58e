"""Which model encodes now: versions, where their files are, and the per-process encoders.

The rest of the Django layer reaches the ML core (``django_sbert.encoder``) only through
these names::

    get_encoder("default")          # the serving SentenceEncoder, loaded once per process
    encode_texts(texts, "default")  # (n, dim) float32 unit vectors
    query_vector("central banks")   # (vector, version), LRU-cached per process
    role_prompt("default", "query", model)   # the prompt queries (or documents) get
    encoder_version("default")      # the version string rows store in <field>_version
    serving_record("default")       # Serving(encoder, version, directory)

Modules: ``identity`` (what a version is), ``storage`` (where its files live: a Django storage
backend), ``model_cache`` (each host's verified copy of them), ``versions``
(which one serves, the switch lock), ``cache`` (loaded encoders, query vectors), ``paths``
(which inference path each encoder takes here, and why), ``warmup``
(warming them before traffic), ``worker`` (Celery worker process set-up), ``web`` (web process
set-up and the version watcher).
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
    trainable_encoder,
)
from .identity import base_label, base_version, model_fingerprint
from .model_cache import cache_root, local_directory, unavailable_reason
from .paths import encoder_path, path_report
from .storage import (
    missing_version_files,
    model_root,
    model_storage,
    read_manifest,
    resolve_directory,
    save_encoder,
)
from .versions import (
    FUSION_KEYS,
    FUSIONS,
    Serving,
    forget_serving,
    promoting_version,
    serving,
    serving_changed,
    serving_record,
    serving_version,
    switch_lock,
    version_directory,
)

__all__ = [
    "FUSION_KEYS",
    "FUSIONS",
    "MAX_TUNED_LOADED",
    "PROMPT_NAMES",
    "Role",
    "Serving",
    "base_label",
    "cache_root",
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
    "local_directory",
    "missing_version_files",
    "model_fingerprint",
    "model_root",
    "model_storage",
    "path_report",
    "peek_query_cache",
    "promoting_version",
    "query_cache_info",
    "query_vector",
    "read_manifest",
    "reset_encoders",
    "resolve_directory",
    "role_prompt",
    "trainable_encoder",
    "save_encoder",
    "serving",
    "serving_changed",
    "serving_record",
    "serving_version",
    "switch_lock",
    "unavailable_reason",
    "version_directory",
]
