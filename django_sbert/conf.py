"""The ``SBERT`` settings dict, read through one object with documented defaults.

Modelled on Django REST framework's ``api_settings``::

    from django_sbert.conf import sbert_settings
    sbert_settings.QUEUE                 # "sbert" unless settings.SBERT["QUEUE"] says otherwise
    encoder_config("default")["MODEL"]   # one encoder's settings, inner defaults filled in

Attributes are read lazily on first access and cached; the cache is dropped when the ``SBERT``
setting changes (``override_settings`` in tests fires ``setting_changed``). Every key is
documented in docs/settings.md.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed

SETTING_NAME = "SBERT"

# What one entry of SBERT["ENCODERS"] may hold; missing keys fall back to these.
ENCODER_DEFAULTS: dict[str, Any] = {
    "MODEL": "all-MiniLM-L6-v2",  # packaged name, model directory, or Hugging Face Hub id
    "DEVICE": "cpu",  # "cpu", "cuda", "cuda:1", "mps"
    "BATCH_SIZE": 32,  # texts per forward pass when indexing rows
    "THREADS": None,  # torch.set_num_threads() in each process; None leaves torch's default
    "QUERY_THREADS": 1,  # torch threads while encoding one search query; None: as THREADS
    "QUANTIZE": None,  # None or "int8": dynamic int8 quantization of linear layers (CPU)
    # The inference path (docs/encoder.md, "Which path"): "auto" chooses per CPU and host;
    # explicit values are obeyed. COMPILE: "auto" | True | False (torch.compile, ~2x faster on
    # a CPU, same vectors); PRECISION: "auto" | "float32" | "bfloat16" ("auto": bf16 only on a
    # CPU with native bf16, for a model measured to keep its quality).
    "COMPILE": "auto",
    "PRECISION": "auto",
    "LONG_TEXT": "truncate",  # what encode() does with texts over max_seq_length
    "MAX_CHUNKS": 64,  # LONG_TEXT="chunk": windows encoded per text at most; None: no cap
    # Texts put before search queries and before indexed rows (e5's "query: " / "passage: ").
    # None: the model's named prompts ("query"; "document", "passage" or "corpus") from its
    # config_sentence_transformers.json; "": no prompt, whatever the model declares.
    "QUERY_PROMPT": None,
    "DOCUMENT_PROMPT": None,
    # Sizes the model was trained to serve truncated (the matryoshka loss's dims, e.g.
    # [256, 128]): an EmbeddingField(dimensions=d) below the model's width needs d listed here.
    # None: the model serves only its full width (docs/scale.md, "Matryoshka dimensions").
    "MATRYOSHKA_DIMS": None,
}

# Search defaults for SemanticQuerySet.similar_to().
SEARCH_DEFAULTS: dict[str, Any] = {
    "K": 10,  # rows returned when similar_to() is given no k and the queryset is not sliced
    # hnsw.ef_search: candidates an index search keeps; higher = better recall, slower. 100:
    # recall@10 0.99 at 100k rows. Past ~500k rows set 200 (recall 0.96 instead of 0.93 at a
    # million rows: docs/scale.md).
    "EF_SEARCH": 100,
    "ITERATIVE_SCAN": "relaxed_order",  # hnsw.iterative_scan: off | strict_order | relaxed_order
    "MAX_SCAN_TUPLES": 20000,  # hnsw.max_scan_tuples: stop an iterative scan after this many
    "STATEMENT_TIMEOUT": 5.0,  # seconds one search statement may run; None: no cap
    # enable_seqscan during a vector search. PostgreSQL's planner does not count reading
    # vectors stored out of line (TOAST), so on tables of a few thousand rows it chose to read
    # every row (24 ms) over the HNSW index (3 ms, same top 10): False turns sequential scans
    # off for the search's own transaction, as pgvector's README advises; True leaves the
    # planner as configured (docs/search.md#how-it-uses-the-index)
    "ENABLE_SEQSCAN": False,
    # hybrid_search() and keyword_search() (docs/hybrid.md)
    # "rrf": reciprocal rank fusion of the two lists; "linear": weighted sum of the two sides'
    # scores, each normalised within its list (docs/hybrid.md)
    "FUSION": "rrf",
    "RRF_K": 60,  # k of reciprocal rank fusion: larger flattens the weight of the top ranks
    "CANDIDATES": 100,  # rows taken from each side (vector top-N, keyword top-N) before fusing
    "VECTOR_WEIGHT": 1.0,  # weight of the vector side's 1 / (k + rank), or of its score
    "KEYWORD_WEIGHT": 1.0,  # weight of the keyword side's 1 / (k + rank), or of its score
    # hybrid_search() uses the fusion a fine-tuning run chose for the serving version on its
    # eval split (docs/hybrid.md); False: always the four settings above
    "TUNED_FUSION": True,
    "KEYWORD_MATCH": "any",  # keyword side of hybrid_search: "any" word or "all" words
    "KEYWORD_MAX_DF": 0.2,  # match="any" leaves out words found in more than this share of rows
    "KEYWORD_MAX_ROWS": 10000,  # a keyword search ranks at most this many matching rows
    # Statistics target of each keyword column, set after migrate: ANALYZE then counts the rows
    # of about 10x this many words, which match="any" weighs words by (PostgreSQL's default,
    # 100, leaves every word past the 1,000 commonest with one weight). None: leave it.
    "KEYWORD_STATISTICS": 1000,
    # Fields with passages= (docs/passages.md): passages the HNSW scan fetches per row asked for
    "PASSAGES_PER_ROW": 4,
    # Fields with binary_index=True (docs/scale.md): rows taken by Hamming distance per row
    # asked for, then re-ranked by exact cosine; 0 searches the float vectors instead
    "BINARY_OVERSAMPLE": 4,
}

DEFAULTS: dict[str, Any] = {
    "ENCODERS": {"default": dict(ENCODER_DEFAULTS)},
    "QUEUE": "sbert",  # Celery queue of the embedding tasks
    "TRAINING_QUEUE": "sbert-train",  # Celery queue of fine-tuning runs
    "AUTO_EMBED": True,  # post_save schedules embedding; False leaves rows to sbert_reindex
    "SEARCH": dict(SEARCH_DEFAULTS),
    "QUERY_CACHE_SIZE": 256,  # query texts whose vectors each process keeps (LRU); 0 disables
    "SWEEP_BATCH_SIZE": 500,  # rows per task when the periodic sweep re-embeds stale rows
    "SKIPPED_RETRY_SECONDS": 3600,  # the sweep retries an unchanged skipped row after this,
    "SKIPPED_RETRY_MAX_SECONDS": 7 * 86400,  # doubling per failure up to this
    "LARGE_TABLE_ROWS": 10000,  # check W001: tables this large should have an HNSW index
    "API": {},  # the REST API's settings, read by django_sbert.api.settings (docs/api.md)
    # Fine-tuning (docs/fine-tuning.md)
    "MODEL_DIR": None,  # where fine-tuned versions are saved; None: <BASE_DIR>/sbert_models
    # Several hosts (docs/deployment.md): the STORAGES key versions are written to (None: a
    # FileSystemStorage under MODEL_DIR) and this host's verified copies (None: MODEL_DIR/.cache)
    "MODEL_STORAGE": None,
    "MODEL_CACHE": None,
    # This host's compiled single-query graphs (docs/encoder.md, "Cold start"): a new process
    # loads them instead of compiling. None: <MODEL_CACHE>/.compiled; False: none kept
    "COMPILE_CACHE": None,
    "VERSION_CACHE_SECONDS": 2.0,  # how long a process trusts its idea of the serving version
    "TRAINING_PROGRESS_SECONDS": 2.0,  # at most one progress write per run this often
    "TRAINING_STALLED_SECONDS": 600,  # a running run silent this long lost its worker
    "EVAL_GATE_TOLERANCE": 0.0,  # promote refuses a candidate worse than active by more than this
    # Rows (texts and stored vectors) a run mines hard negatives from, at most
    "TRAINING_MINING_ROWS": 50000,
    # Texts (a seeded sample of the encoder's rows and the train pairs' positives) the eval
    # split's queries are ranked against besides its own positives, by early stopping and the
    # gate: without them a small split is too easy to tell a better model from the base. Each
    # evaluation encodes them with the model measured; 0: the eval positives alone
    "TRAINING_EVAL_DISTRACTORS": 1000,
    # A small STS file (tab-separated) every run measures before and after; None: off
    "TRAINING_STS_FILE": None,
    # Precision of a run's forward passes: "auto" (bfloat16 autocast on a CPU with native bf16,
    # AVX-512 BF16 or AMX; float32 elsewhere), "float32" or "bfloat16". Weights stay float32.
    "TRAINING_PRECISION": "auto",
    "PAIRS_MAX_FILE_BYTES": 20 * 1024 * 1024,  # largest pairs file an import reads; None: any
    # "Adapt to our content" (docs/fine-tuning.md): a run on a field's text, without pairs
    "ADAPT": {
        # "margin_mse": pseudo-queries cut from the text, scored by a teacher fusing the
        # serving model with BM25; "mnrl": the same pseudo-queries as positive pairs;
        # "simcse". Only "margin_mse" improved SciFact retrieval from all-MiniLM-L6-v2
        # (docs/training.md, "Adapt to our content").
        "LOSS": "margin_mse",
        "METHOD": "ict",  # how pseudo-queries are cut: "ict" (a sentence vs the rest), "crop"
        "DOCUMENTS": 1000,  # rows (a seeded sample) cut into pseudo-queries; None: all
        # "margin_mse": the teacher's weight on the model's cosine, the rest on BM25; None:
        # encoder.distillation.DENSE_SHARE (0.5, measured)
        "DENSE_SHARE": None,
        "NEGATIVES": True,  # "mnrl": mine a hard negative per pseudo-query with the model
        "LEARNING_RATE": 5e-5,  # of "mnrl" (the one measured), when the caller gives none
        "HOLD_OUT": 0.1,  # share of pseudo-pairs (at most 200) held back when no eval split
    },
    # Read replicas (docs/deployment.md)
    "SEARCH_DATABASE": None,  # alias searches read rows and version from; None: Django's router
}

# Large tables (docs/scale.md): building vector indexes (manage.py sbert_index) and sizing them.
DEFAULTS.update(
    {
        # maintenance_work_mem of an index build (a PostgreSQL size); None: the server's
        "INDEX_MAINTENANCE_WORK_MEM": "1GB",
        # max_parallel_maintenance_workers of an index build; None: the server's
        "INDEX_PARALLEL_WORKERS": None,
        # check W022: bytes (or "12GB") the HNSW indexes should fit in; None: the server's
        # effective_cache_size (its estimate of shared_buffers + the OS cache)
        "INDEX_MEMORY": None,
    }
)

# Keys whose value is a dict merged over the default dict rather than replacing it: a project
# that adds an encoder keeps "default", SEARCH={"K": 5} keeps the other search defaults (and
# ADAPT the other adapt defaults).
MERGED_KEYS = ("ENCODERS", "SEARCH", "ADAPT")


class SbertSettings:
    """Lazy view of ``settings.SBERT`` over ``DEFAULTS``; ``reload()`` drops cached values.

    Subclasses view a part of ``SBERT`` (``django_sbert.api.settings``) by overriding
    ``read_user_settings()`` and ``convert()``.
    """

    label = SETTING_NAME  # how messages name the settings this object reads
    merged_keys: tuple[str, ...] = MERGED_KEYS

    def __init__(self, defaults: dict[str, Any] | None = None) -> None:
        self.defaults = defaults or DEFAULTS
        self._cached: set[str] = set()
        self._user: dict[str, Any] | None = None

    def read_user_settings(self) -> Any:
        return getattr(settings, SETTING_NAME, None) or {}

    def convert(self, attr: str, value: Any) -> Any:
        """Turn a merged setting value into what callers use (import strings, ...)."""
        return value

    @property
    def user_settings(self) -> dict[str, Any]:
        if self._user is None:
            value = self.read_user_settings()
            if not isinstance(value, dict):
                raise ImproperlyConfigured(
                    f"settings.{self.label} must be a dict, got {type(value).__name__}."
                )
            self._user = value
        return self._user

    def __getattr__(self, attr: str) -> Any:
        if attr not in self.defaults:
            known = ", ".join(sorted(self.defaults))
            raise AttributeError(
                f"Invalid {self.label} setting: {attr!r}. Known settings: {known}."
            )
        value = self.user_settings.get(attr, self.defaults[attr])
        if attr in self.merged_keys:
            value = {**self.defaults[attr], **(value or {})}
        value = self.convert(attr, value)
        self._cached.add(attr)
        setattr(self, attr, value)
        return value

    def reload(self) -> None:
        for attr in self._cached:
            delattr(self, attr)
        self._cached.clear()
        self._user = None


sbert_settings = SbertSettings()


def encoder_config(name: str = "default") -> dict[str, Any]:
    """Settings of the encoder called ``name``, with missing keys taken from ENCODER_DEFAULTS."""
    encoders = sbert_settings.ENCODERS or {}
    if name not in encoders:
        known = ", ".join(repr(n) for n in sorted(encoders)) or "none"
        raise ImproperlyConfigured(
            f"Unknown encoder {name!r}: settings.SBERT['ENCODERS'] defines {known}. Add "
            f"SBERT = {{'ENCODERS': {{{name!r}: {{'MODEL': 'all-MiniLM-L6-v2'}}}}}} to your "
            "settings, or pass one of the defined names as EmbeddingField(encoder=...)."
        )
    config = encoders[name] or {}
    unknown = set(config) - set(ENCODER_DEFAULTS)
    if unknown:
        raise ImproperlyConfigured(
            f"settings.SBERT['ENCODERS'][{name!r}] has unknown keys {sorted(unknown)}; "
            f"valid keys are {sorted(ENCODER_DEFAULTS)}."
        )
    merged = {**ENCODER_DEFAULTS, **config}
    if merged["COMPILE"] not in ("auto", True, False):
        raise ImproperlyConfigured(
            f"settings.SBERT['ENCODERS'][{name!r}]['COMPILE'] must be 'auto', True or False, "
            f"got {merged['COMPILE']!r}."
        )
    if merged["PRECISION"] not in ("auto", "float32", "bfloat16"):
        raise ImproperlyConfigured(
            f"settings.SBERT['ENCODERS'][{name!r}]['PRECISION'] must be 'auto', 'float32' or "
            f"'bfloat16', got {merged['PRECISION']!r}."
        )
    if merged["QUANTIZE"] and (merged["COMPILE"] is True or merged["PRECISION"] == "bfloat16"):
        raise ImproperlyConfigured(
            f"settings.SBERT['ENCODERS'][{name!r}] sets QUANTIZE with COMPILE=True or "
            "PRECISION='bfloat16'; choose one (COMPILE keeps float32 vectors, QUANTIZE trades "
            "a little accuracy for speed), or leave COMPILE and PRECISION at 'auto'."
        )
    for key in ("QUERY_PROMPT", "DOCUMENT_PROMPT"):
        if merged[key] is not None and not isinstance(merged[key], str):
            raise ImproperlyConfigured(
                f"settings.SBERT['ENCODERS'][{name!r}][{key!r}] must be a string (the text put "
                f"before each text, e.g. 'query: ') or None, got {type(merged[key]).__name__}."
            )
    dims = merged["MATRYOSHKA_DIMS"]
    if dims is not None and (
        not isinstance(dims, list | tuple)
        or not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in dims)
    ):
        raise ImproperlyConfigured(
            f"settings.SBERT['ENCODERS'][{name!r}]['MATRYOSHKA_DIMS'] must be None or a list of "
            f"positive integers (the sizes the model was trained for, e.g. [256, 128]), got "
            f"{dims!r}."
        )
    return merged


def reload_sbert_settings(*, setting: str, **kwargs: Any) -> None:
    if setting == SETTING_NAME:
        sbert_settings.reload()


setting_changed.connect(reload_sbert_settings, dispatch_uid="django_sbert.conf.reload")
