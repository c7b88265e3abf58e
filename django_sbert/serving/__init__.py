"""Which model encodes now: versions, where their files are, and the per-process encoders.

The rest of the Django layer reaches the ML core (``django_sbert.encoder``) only through
these names::

    get_encoder("default")          # the serving SentenceEncoder, loaded once per process
    encode_texts(texts, "default")  # (n, dim) float32 unit vectors
    query_vector("central banks")   # (vector, version), LRU-cached per process
    role_prompt("default", "query", model)   # the prompt queries (or documents) get
    encoder_version("default")      # the version string rows store in <field>_version
    serving_record("default")       # Serving(encoder, version, directory)

The public interface is ``__all__``: ``Serving``, ``serving_record``, ``serving_version``,
``serving_changed``, ``get_encoder``, ``encode_texts``, ``encode_query``, ``query_vector``,
``peek_query_cache``, ``clear_query_cache``, ``query_cache_info``, ``role_prompt``,
``encoder_version``, ``encoder_dimensions`` and ``path_report``. The other names imported here
are the wing's internals, kept importable for the other wings and the tests; new code imports
them from their modules.

Modules: ``identity`` (what a version is), ``storage`` (where its files live: a Django storage
backend), ``model_cache`` (each host's verified copy of them), ``versions``
(which one serves, the switch lock), ``cache`` (loaded encoders, query vectors), ``paths``
(which inference path each encoder takes here, and why), ``warmup``
(warming them before traffic), ``worker`` (Celery worker process set-up), ``web`` (web process
set-up and the version watcher), ``health`` (is this process ready for traffic: the health
view and ``sbert_health``), ``query_server`` and ``query_client`` (one query encoder per host,
shared by its web processes: ``sbert_query_server``).
"""

from __future__ import annotations

from ..fields.dimensions import encoder_dimensions
from .cache import (
    clear_query_cache,
    encode_query,
    encode_texts,
    encoder_version,
    get_encoder,
    peek_query_cache,
    query_cache_info,
    query_vector,
    role_prompt,
)
from .paths import path_report
from .versions import Serving, serving_changed, serving_record, serving_version

# isort: split
# The wing's internals, not in __all__: importable here for the other wings and the tests.
from .cache import encode_query_for, encoder_for, reset_encoders, trainable_encoder  # noqa: F401
from .identity import base_label, base_version, model_fingerprint  # noqa: F401
from .model_cache import local_directory, unavailable_reason  # noqa: F401
from .paths import encoder_path  # noqa: F401
from .storage import model_root, resolve_directory, save_encoder  # noqa: F401
from .versions import FUSION_KEYS, FUSIONS, forget_serving, promoting_version, switch_lock  # noqa: F401

__all__ = [
    "Serving",
    "clear_query_cache",
    "encode_query",
    "encode_texts",
    "encoder_dimensions",
    "encoder_version",
    "get_encoder",
    "path_report",
    "peek_query_cache",
    "query_cache_info",
    "query_vector",
    "role_prompt",
    "serving_changed",
    "serving_record",
    "serving_version",
]
