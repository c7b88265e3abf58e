"""Encoders by settings name, loaded once per process, and the per-process query cache.

The Django layer reaches the ML core only through this module (re-exported by
``django_sbert.serving``, whose docstring shows each call).

Queries and documents may take different prompts (e5's ``query: `` / ``passage: ``):
``QUERY_PROMPT`` and ``DOCUMENT_PROMPT`` in the encoder's settings, else the prompts the model
directory names ``query`` and ``document`` / ``passage`` / ``corpus``, as sentence-transformers'
``encode_query`` / ``encode_document`` read them (``role_prompt``).

Each version is loaded once per process: the first caller loads it and the others that want
the same version wait for that load (a future per version), while searches with versions
already loaded go on. The module's lock guards only its dictionaries, for a moment at a time:
it is never held while a version is fetched, verified, loaded or encoding, so a promotion being
pre-loaded (the version watcher), the compare page or the gate never stalls the searches of the
serving version, and a slow model storage delays only the callers of the version it holds.
Up to ``MAX_TUNED_LOADED`` fine-tuned versions stay loaded, the least recently used dropped
first, never the one serving now. Loaded encoders are dropped when ``settings.SBERT`` changes
and in the child after ``fork()``: torch state inherited from a parent (Celery prefork,
gunicorn --preload) can hang or oversubscribe cores, so each child loads its own copy with its
own thread count.

``get_encoder(name)`` returns the serving version (``versions.serving_record``), so processes
switch to a promoted one without a restart; ``get_encoder(name, version)`` a given one.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Literal
from weakref import WeakKeyDictionary

import numpy as np
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed

from ..conf import SETTING_NAME, encoder_config
from ..exceptions import VersionUnavailable
from ..passages import config as passage_config
from .identity import base_version, forget_base_versions
from .model_cache import compile_cache, local_directory
from .paths import encoder_path
from .query_client import layout, light, remote_query_vector
from .versions import Serving, serving_record, serving_version, version_directory

if TYPE_CHECKING:
    from ..encoder import SentenceEncoder

# Guards the dictionaries below for a moment at a time; never held while a version is
# fetched, loaded or encoding (see the module docstring).
_lock = threading.Lock()
_generation = 0  # bumped by every reset: a load that began before it is not kept
_encoders: dict[str, SentenceEncoder] = {}  # the settings' model of each encoder name
# (name, version) -> fine-tuned model, least recently used first.
_tuned: OrderedDict[tuple[str, str], SentenceEncoder] = OrderedDict()
# Fine-tuned versions kept loaded per process (the serving one and a candidate being promoted).
MAX_TUNED_LOADED = 2
# (name, version or None for the settings' model) -> the load under way, which others wait on.
_loading: dict[tuple[str, str | None], Future[SentenceEncoder]] = {}
# name -> the version this process last used as the serving one: never evicted.
_serving_now: dict[str, str] = {}
_query_cache: OrderedDict[tuple[str, str, str], np.ndarray] = OrderedDict()
QUERY_CACHE_SIZE = 256  # query texts whose vectors each process keeps (LRU); 0: none
# torch threads while a web process encodes one search query: one short text gains little from
# more, and threads that spin after the forward pass slow a PostgreSQL on the same cores.
QUERY_THREADS: int | None = 1  # None: the process setting (THREADS)
# One torch forward pass at a time per loaded model: torch already uses every configured
# thread inside one pass, and its thread count is process-wide. Per model, not per encoder
# name, so that the first pass of a version being pre-loaded (compiling, perhaps) never holds
# up the serving one. Queries on an ONNX Runtime graph take no lock (``_side_by_side``).
_encode_locks: WeakKeyDictionary[SentenceEncoder, threading.Lock] = WeakKeyDictionary()

Role = Literal["query", "document"]
# The model's own prompt names for each role, in the order sentence-transformers tries them.
PROMPT_NAMES: dict[str, tuple[str, ...]] = {
    "query": ("query",),
    "document": ("document", "passage", "corpus"),
}


def get_encoder(name: str = "default", version: str | None = None) -> SentenceEncoder:
    """Return the serving model of encoder ``name`` (or its ``version``), loading it once."""
    if version is None:
        return encoder_for(serving_record(name))
    return _model(Serving(name, version, version_directory(name, version)), serving=False)


def encoder_for(current: Serving) -> SentenceEncoder:
    """The model of the serving version, already looked up (``serving_record()``), loading it
    once; it is kept loaded while it serves (``MAX_TUNED_LOADED``).

    Reads no database, so it may run in any thread (the async searches encode in a pool).
    """
    return _model(current, serving=True)


def encodes_outside_gil(current: Serving) -> bool:
    """Whether encoding a query of ``current`` waits outside Python's GIL nearly all the time:
    on the query server's socket, or in ONNX Runtime's one call. A torch forward pass runs
    Python between its kernels, so a thread running it and the caller's Python slow each other
    (``hybrid_search()`` starts such an encode only once its keyword statement is compiled)."""
    if layout()[0] is not None:
        return True
    name, version, directory = current.encoder, current.version, current.directory
    with _lock:  # a loaded model only: this never loads one
        model = _encoders.get(name) if directory is None else _tuned.get((name, version))
    return model is not None and _side_by_side(model)


def _side_by_side(model: SentenceEncoder) -> bool:
    """Whether ``model``'s queries go through an ONNX Runtime graph, which runs concurrent calls
    of one session each on its caller's thread (``QUERY_THREADS`` each), outside the GIL: two
    queries then take two cores, where torch's passes take turns."""
    return (
        getattr(model, "query_runtime", "torch") != "torch"  # an ONNX Runtime graph
        and model.query_runtime_failure is None  # else the graph failed and torch serves
    )


def _model(current: Serving, *, serving: bool) -> SentenceEncoder:
    """The loaded model of ``current``: from this process's cache, from the load under way
    (waiting for that version's load only), or loaded here, with no lock held meanwhile."""
    name, version, directory = current.encoder, current.version, current.directory
    key = (name, None if directory is None else version)
    with _lock:
        if serving:
            _serving_now[name] = version
        if directory is None:
            encoder = _encoders.get(name)
        else:
            encoder = _tuned.get((name, version))
            if encoder is not None:
                _tuned.move_to_end((name, version))  # the most recently used
        if encoder is not None:
            return encoder
        future = _loading.get(key)
        if future is None:  # nobody loads it yet: this thread does
            future = _loading[key] = Future()
            generation, loads_here = _generation, True
        else:
            loads_here = False
    if not loads_here:
        return future.result()  # that load's model, or its error raised here too
    try:
        encoder = _load(name) if directory is None else _load_version(name, version, directory)
    except BaseException as exc:
        with _lock:
            if _loading.get(key) is future:
                del _loading[key]
        future.set_exception(exc)
        raise
    with _lock:
        if _loading.get(key) is future:
            del _loading[key]
        if generation == _generation:  # not reset (settings changed) while it loaded
            if directory is None:
                _encoders[name] = encoder
            else:
                _tuned[(name, version)] = encoder
                _evict(keep=(name, version))
    future.set_result(encoder)
    return encoder


def _evict(keep: tuple[str, str]) -> None:
    """Drop the least recently used fine-tuned versions beyond ``MAX_TUNED_LOADED``, never
    ``keep`` (just loaded) nor a version serving now; the caller holds ``_lock``."""
    while len(_tuned) > MAX_TUNED_LOADED:
        victim = next(
            (
                key
                for key in _tuned  # least recently used first
                if key != keep and _serving_now.get(key[0]) != key[1]
            ),
            None,
        )
        if victim is None:  # every one serves (several encoder names): keep them all
            return
        del _tuned[victim]


def trainable_encoder(current: Serving) -> SentenceEncoder:
    """A fresh float32, eager copy of a version (``serving_record()``'s answer), for fine-tuning.

    Not cached, and without the settings' inference path (``PRECISION``, ``QUANTIZE``,
    ``COMPILE``): the serving copy may hold bf16-rounded or int8 weights, and a run starts
    from the version's own float32 weights. On the encoder's ``DEVICE``.
    """
    from ..encoder import SentenceEncoder  # imports torch: only when a model is loaded

    name, version, directory = current.encoder, current.version, current.directory
    config = encoder_config(name)
    local = config["MODEL"] if directory is None else local_directory(name, version, directory)
    return SentenceEncoder.load(str(local), device=config["DEVICE"])


def _load_version(name: str, version: str, directory: str) -> SentenceEncoder:
    """Load a fine-tuned version from this host's verified copy, or say why this host cannot.

    ``directory`` is the version's storage key (``EncoderVersion.directory``); the files come
    through ``model_cache.local_directory``, fetched and checked once per host. Never falls back
    to another version: a host that encoded with the base model while the database says a
    fine-tuned version serves would write (and search) vectors of the wrong version.
    """
    local = local_directory(name, version, directory)  # VersionUnavailable says why not
    try:
        return _load(name, str(local))
    except (OSError, ValueError) as exc:  # files that verified but do not load
        raise VersionUnavailable(
            f"Encoder {name!r} must encode with version {version!r} (the database says it "
            f"serves), but loading its verified copy {local} failed: {type(exc).__name__}: "
            f"{exc}. Nothing is encoded with another version meanwhile."
        ) from exc


def _load(name: str, directory: str | None = None) -> SentenceEncoder:
    config = encoder_config(name)
    try:
        from ..encoder import SentenceEncoder  # imports torch: only when a model is loaded
    except ImportError as exc:  # pragma: no cover - torch is a hard dependency
        raise ImproperlyConfigured(
            "django-sbert needs torch to encode text: pip install torch "
            "(the CPU build: pip install torch --index-url https://download.pytorch.org/whl/cpu)."
        ) from exc
    # COMPILE / PRECISION / QUANTIZE, applied to this host's CPU and compiler (paths.py).
    path = encoder_path(name)
    # THREADS sets torch.set_num_threads() for this process: each forked worker loads its own
    # encoder after fork (see _reset_after_fork) and so sets its own thread count.
    return SentenceEncoder.load(
        directory or config["MODEL"],
        device=config["DEVICE"],
        quantize=path.quantize,
        dtype=None if path.dtype == "float32" else path.dtype,
        compile=path.compile,
        compile_cache=compile_cache() if path.compile or path.query_runtime != "torch" else None,
        threads=int(config["THREADS"]) if config["THREADS"] else None,
        query_runtime=path.query_runtime,
        # ONNX Runtime's threads are fixed per session: the ones a web process's query gets.
        query_threads=int(QUERY_THREADS or config["THREADS"] or 1),
    )


def role_prompt(name: str, role: Role | None, model: SentenceEncoder) -> str | None:
    """The prompt put before a query's (``"query"``) or a document's (``"document"``) text.

    ``QUERY_PROMPT`` / ``DOCUMENT_PROMPT`` of encoder ``name`` when set (``""``: none), else
    the prompt ``model``'s directory names for the role (``config_sentence_transformers.json``:
    ``query``; ``document``, ``passage`` or ``corpus``). None when neither: ``encode()`` then
    applies the model's ``default_prompt_name``, if it declares one, as sentence-transformers
    does. ``role=None`` is a plain ``encode()`` too.
    """
    if role is None:
        return None
    if role not in PROMPT_NAMES:
        raise ValueError(f"role must be 'query', 'document' or None, got {role!r}.")
    configured = encoder_config(name)[f"{role.upper()}_PROMPT"]
    if configured is not None:
        return configured
    prompts = getattr(model, "prompts", None) or {}
    return next((prompts[key] for key in PROMPT_NAMES[role] if key in prompts), None)


def encode_texts(
    texts: Sequence[str],
    encoder: str = "default",
    version: str | None = None,
    *,
    threads: int | None = None,
    normalize: bool = True,
    role: Role | None = None,
) -> np.ndarray:
    """Encode ``texts`` with the named encoder's batch size: unit vectors, (n, dim) float32.

    ``version`` picks a version of the encoder; by default the serving one. ``threads`` sets
    torch's threads for this call only. ``normalize=False`` returns the vectors as pooled
    (the embed API's option); every encode, either way, holds the encoder's lock. ``role``
    puts the query or the document prompt before each text (``role_prompt``); None encodes
    the texts as given (the model's default prompt, if it declares one, still applies).
    ``role="query"`` encodes each text alone on ``QUERY_THREADS`` (``threads`` unused): the
    vector a search for that text gets, in any list; on an ONNX Runtime graph without the
    lock, so that queries of several threads run side by side.
    """
    return _encode(get_encoder(encoder, version), encoder, texts, threads, normalize, role)


def _encode(
    model: SentenceEncoder,
    encoder: str,
    texts: Sequence[str],
    threads: int | None,
    normalize: bool,
    role: Role | None,
) -> np.ndarray:
    config = encoder_config(encoder)
    max_chunks = passage_config.MAX_CHUNKS  # with LONG_TEXT="chunk": windows per text
    with _lock:
        lock = _encode_locks.get(model)
        if lock is None:
            lock = _encode_locks[model] = threading.Lock()
    # Every query is encoded alone on QUERY_THREADS, whatever list it comes in (the query
    # server's batch, sbert_evaluate's queries): its vector is the one a visitor's search gets,
    # bit for bit, where a batch's kernels would move it (docs/encoder.md, "Same text, same
    # vector"). Documents keep their batches.
    alone = role == "query"
    # A query on an ONNX Runtime graph needs no lock: the session's threads are its own (no
    # torch thread count to set) and the tokenizers are never reconfigured after loading.
    side_by_side = alone and _side_by_side(model)
    with contextlib.nullcontext() if side_by_side else lock:
        return model.encode(
            list(texts),
            batch_size=int(config["BATCH_SIZE"]),
            normalize=normalize,
            long_text=config["LONG_TEXT"],
            threads=None if side_by_side else QUERY_THREADS if alone else threads,
            max_chunks=int(max_chunks) if max_chunks is not None else None,
            prompt=role_prompt(encoder, role, model),
            alone=alone,
        )


def encode_query(text: str, encoder: str = "default", version: str | None = None) -> np.ndarray:
    """Encode one search query, remembering the last ``QUERY_CACHE_SIZE`` queries per process.

    The text gets the encoder's query prompt (``role_prompt``). The returned array is
    read-only because it is shared with later callers. Searches should use ``query_vector``,
    which also says which version encoded the text.
    """
    if version is None:
        return encode_query_for(text, serving_record(encoder))
    cached = _cached_query(encoder, version, text)
    if cached is not None:
        return cached
    if light():  # the query server encodes it (this process loads no model)
        directory = version_directory(encoder, version)
        return encode_query_for(text, Serving(encoder, version, directory))
    return _encode_query(get_encoder(encoder, version), encoder, version, text)


def encode_query_for(text: str, current: Serving) -> np.ndarray:
    """``encode_query`` with a version already looked up (``serving_record()``): reads no database,
    so it may run in any thread (the async searches' encoding pool)."""
    cached = _cached_query(current.encoder, current.version, text)
    if cached is not None:
        return cached
    vector = remote_query_vector(text, current)  # None: no query server, or it is away
    if vector is not None:
        _remember_query(current.encoder, current.version, text, vector)
        return vector
    return _encode_query(encoder_for(current), current.encoder, current.version, text)


def encode_queries(
    texts: Sequence[str], encoder: str, version: str, directory: str | None
) -> np.ndarray:
    """Encode several search queries with one version: (n, dim) unit vectors with the query
    prompt, each text alone (the vector a web process would encode for it). The query
    server's encode (``query_server``); reads the database only to check, once per process,
    that a base-model version is this host's model."""
    if directory is None and version != base_version(encoder):
        raise VersionUnavailable(
            f"Encoder {encoder!r} here is {base_version(encoder)}, not the {version} asked for: "
            "this host's query server and web processes must share their SBERT settings."
        )
    model = encoder_for(Serving(encoder, version, directory))
    return _encode(model, encoder, texts, None, True, "query")


def peek_query_cache(text: str, current: Serving) -> np.ndarray | None:
    """The cached vector of a query, if any, without ever waiting: None when the cache's lock
    is busy this instant. For an event loop, which must not block."""
    if not _lock.acquire(blocking=False):
        return None
    try:
        cached = _query_cache.get((current.encoder, current.version, text))
        if cached is not None:
            _query_cache.move_to_end((current.encoder, current.version, text))
        return cached
    finally:
        _lock.release()


def _cached_query(encoder: str, version: str, text: str) -> np.ndarray | None:
    key = (encoder, version, text)
    with _lock:
        cached = _query_cache.get(key)
        if cached is not None:
            _query_cache.move_to_end(key)
        return cached


def _encode_query(model: SentenceEncoder, encoder: str, version: str, text: str) -> np.ndarray:
    vector = _encode(model, encoder, [text], QUERY_THREADS, True, "query")[0]
    vector.flags.writeable = False
    _remember_query(encoder, version, text, vector)
    return vector


def _remember_query(encoder: str, version: str, text: str, vector: np.ndarray) -> None:
    size = QUERY_CACHE_SIZE
    if size > 0:
        with _lock:
            _query_cache[(encoder, version, text)] = vector
            while len(_query_cache) > size:
                _query_cache.popitem(last=False)


def query_vector(
    text: str, encoder: str = "default", using: str | None = None
) -> tuple[np.ndarray, str]:
    """Encode a search query with the serving version; return ``(vector, version)``.

    A search compares the vector only with rows whose ``<field>_version`` equals ``version``,
    so it never mixes two versions' vectors (see docs/fine-tuning.md). ``using``: the database
    the search reads its rows from, which also says which version serves (a read replica
    answers with its own; ``versions.serving_record``).
    """
    current = serving_record(encoder, using=using)
    return encode_query_for(text, current), current.version


def clear_query_cache() -> None:
    """Forget this process's cached query vectors (the encoders stay loaded)."""
    with _lock:
        _query_cache.clear()


def query_cache_info() -> dict[str, int]:
    """Entries in this process's query cache and its configured size (for tests and status)."""
    return {"entries": len(_query_cache), "size": QUERY_CACHE_SIZE}


def loaded_versions() -> list[tuple[str, str]]:
    """(encoder, version) of the fine-tuned versions loaded in this process, least recently
    used first: the next to be dropped (never one serving now). For status and tests."""
    with _lock:
        return list(_tuned)


def encoder_version(name: str = "default") -> str:
    """The version string of the named encoder's serving model (``versions.serving_record``).

    Stored beside each vector (``<field>_version``) so rows encoded by another model are found
    stale. It changes only when a promotion's switch commits.
    """
    return serving_version(name)


def reset_encoders() -> None:
    """Forget loaded encoders, cached query vectors and base versions in this process.

    A load under way still answers its callers, but its model is not kept: the next caller
    loads afresh (with the settings of now).
    """
    global _generation
    with _lock:
        _generation += 1
        _encoders.clear()
        _tuned.clear()
        _loading.clear()
        _serving_now.clear()
        _query_cache.clear()
    forget_base_versions()


def _reset_after_fork() -> None:
    # The parent's lock may have been held at fork time, and its loads run in threads the
    # child does not have: give the child a fresh lock and nothing loaded.
    global _lock, _encode_locks, _generation
    _lock = threading.Lock()
    _generation += 1
    _encode_locks = WeakKeyDictionary()
    _encoders.clear()
    _tuned.clear()
    _loading.clear()
    _serving_now.clear()
    _query_cache.clear()


def _on_setting_changed(*, setting: str, **kwargs: Any) -> None:
    if setting == SETTING_NAME:
        reset_encoders()


setting_changed.connect(_on_setting_changed, dispatch_uid="django_sbert.serving.cache.reset")
os.register_at_fork(after_in_child=_reset_after_fork)
