"""The ``SBERT`` settings dict: declared once here, read through one object.

Every key is declared below with its default, the rule its value follows and one line on what
it does. That one declaration is what the settings object falls back to, what the start-up
check (``django_sbert.E005``) validates against, naming the closest known key for a typo, and
what docs/settings.md's tables are rendered from (``python -m django_sbert.conf`` prints them;
``python -m django_sbert.conf --write docs/settings.md`` updates the page)::

    from django_sbert.conf import sbert_settings
    sbert_settings.QUEUE                 # "sbert" unless settings.SBERT["QUEUE"] says otherwise
    sbert_settings.TRAINING["QUEUE"]     # a group: the project's dict merged over the defaults
    encoder_config("default")["MODEL"]   # one encoder's settings, inner defaults filled in

Attributes are read lazily on first access and cached; the cache is dropped when the ``SBERT``
setting changes (``override_settings`` in tests fires ``setting_changed``). Spellings of an
earlier release (``TRAINING_QUEUE``, ``INDEX_MEMORY``, ``SEARCH_DATABASE``...) are read into
their groups with a ``DeprecationWarning`` (and check ``django_sbert.W003``) for one release.
"""

from __future__ import annotations

import sys
import warnings
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed

from .settings_schema import (
    BOOLEAN,
    IMPORT_STRINGS,
    PATH,
    POSITIVE_INTEGERS,
    RATES,
    SIZE,
    TEXT,
    Group,
    PerName,
    Rule,
    Setting,
    group_problems,
    integer,
    markdown_table,
    number,
    one_of,
    optional,
    unknown_key,
    unknown_key_hint,
    value_problems,
)

SETTING_NAME = "SBERT"

_LETTERS = ("A", "B", "C", "D")
LETTER_NUMBERS = Rule(
    lambda v: (
        isinstance(v, dict)
        and set(v) <= set(_LETTERS)
        and all(
            isinstance(n, int | float) and not isinstance(n, bool) and n >= 0 for n in v.values()
        )
    ),
    "a dict of weight letter (A, B, C, D) -> number >= 0",
)
LETTER_NUMBERS_OR_FRACTION = Rule(
    lambda v: (
        (isinstance(v, int | float) and not isinstance(v, bool) and 0 <= v <= 1)
        or (
            isinstance(v, dict)
            and set(v) <= set(_LETTERS)
            and all(
                isinstance(n, int | float) and not isinstance(n, bool) and 0 <= n <= 1
                for n in v.values()
            )
        )
    ),
    "a number in [0, 1] or a dict of weight letter (A, B, C, D) -> number in [0, 1]",
)

ENCODER = Group(
    {
        "MODEL": Setting(
            "all-MiniLM-L6-v2",
            "A packaged model name, a model directory (sentence-transformers layout) or a "
            "Hugging Face Hub id, downloaded only when online and asked for "
            "([encoder.md](encoder.md)).",
            TEXT,
        ),
        "DEVICE": Setting(
            "cpu", 'Where the model runs: `"cpu"`, `"cuda"`, `"cuda:1"`, `"mps"`.', TEXT
        ),
        "BATCH_SIZE": Setting(32, "Texts per forward pass when rows are embedded.", integer(1)),
        "THREADS": Setting(
            None,
            "`torch.set_num_threads()` in each process that loads the encoder. `None`: the "
            "process's share of the CPUs: all of them in a Celery worker with `--pool solo` "
            "or `threads`; CPUs / N in each child of `--pool prefork -c N` and in each of N "
            "web processes (gunicorn's `workers`, uvicorn's `WEB_CONCURRENCY`); torch's "
            "default in other processes ([deployment.md](deployment.md)).",
            optional(integer(1)),
        ),
        "QUERY_THREADS": Setting(
            1,
            "torch threads while a web process encodes one search query (a short query gains "
            "little from more, and spinning threads take CPU from PostgreSQL). `None`: as "
            "`THREADS`.",
            optional(integer(1)),
        ),
        "QUANTIZE": Setting(
            None,
            '`"int8"`: dynamic int8 quantization of the linear layers (CPU; faster, slightly '
            "different vectors: give every process the same value and re-embed after a "
            "change).",
            one_of(None, "int8"),
        ),
        "COMPILE": Setting(
            "auto",
            '`torch.compile` for `encode`: `"auto"` where a C++ compiler is found on a CPU, '
            "`True` / `False` force it; same vectors either way "
            "([encoder.md](encoder.md#which-path-each-process-takes)).",
            one_of("auto", True, False),
        ),
        "PRECISION": Setting(
            "auto",
            '`"float32"` or `"bfloat16"`; `"auto"`: bfloat16 only on a CPU with native bf16 '
            "and for a model measured to keep its quality ([encoder.md](encoder.md)).",
            one_of("auto", "float32", "bfloat16"),
        ),
        "QUERY_RUNTIME": Setting(
            "auto",
            'What encodes one search query: `"onnxruntime"` (float32, faster for one short '
            'text), `"torch"` (the `COMPILE` / `PRECISION` path), or `"auto"`: ONNX Runtime '
            "where that path is float32 on a CPU, torch where it is bfloat16, int8 or a GPU "
            "([encoder.md](encoder.md#which-path-each-process-takes)).",
            one_of("auto", "torch", "onnxruntime"),
        ),
        "LONG_TEXT": Setting(
            "truncate",
            'Texts over the model\'s `max_seq_length`: `"truncate"` keeps the start, '
            '`"chunk"` averages the vectors of overlapping windows.',
            one_of("truncate", "chunk"),
        ),
        "MAX_CHUNKS": Setting(
            64,
            'With `LONG_TEXT="chunk"`, the most windows one row is encoded from (the rest is '
            "ignored, with a warning), so no row can exhaust a worker's memory. `None`: no "
            "cap.",
            optional(integer(1)),
        ),
        "QUERY_PROMPT": Setting(
            None,
            "Text put before every search query (e5's `\"query: \"`). `None`: the model's "
            '`"query"` prompt, if it names one; `""`: none '
            "([prompts](#prompts-for-queries-and-documents)).",
            optional(TEXT),
        ),
        "DOCUMENT_PROMPT": Setting(
            None,
            'Text put before every indexed row (e5\'s `"passage: "`); part of the encoder '
            "version, so changing it re-embeds every row. `None`: the model's document "
            'prompt, if any; `""`: none.',
            optional(TEXT),
        ),
        "MATRYOSHKA_DIMS": Setting(
            None,
            "Sizes below its width the model was trained to serve truncated, e.g. "
            "`[256, 128]`; an `EmbeddingField(dimensions=d)` below the width needs `d` here "
            "([scale.md](scale.md#matryoshka-dimensions)).",
            optional(POSITIVE_INTEGERS),
        ),
    },
    "One encoder, by name; fields choose theirs with `EmbeddingField(encoder=...)`.",
    anchor="encoders",
)

SEARCH = Group(
    {
        "K": Setting(
            10,
            "Rows `similar_to()` returns when the queryset is not sliced.",
            optional(integer(1)),
        ),
        "EF_SEARCH": Setting(
            100,
            "`hnsw.ef_search`: candidates an index search keeps; higher: better recall, "
            "slower. Past about 500k rows set 200 ([scale.md](scale.md)).",
            optional(integer(1)),
        ),
        "ITERATIVE_SCAN": Setting(
            "relaxed_order",
            "`hnsw.iterative_scan`: with a filter, keep scanning until k rows match "
            '(`"relaxed_order"`, `"strict_order"`, or `"off"`, which may return fewer).',
            one_of(None, "off", "strict_order", "relaxed_order"),
        ),
        "MAX_SCAN_TUPLES": Setting(
            20000,
            "`hnsw.max_scan_tuples`: where an iterative scan gives up.",
            optional(integer(1)),
        ),
        "STATEMENT_TIMEOUT": Setting(
            5.0,
            "Seconds one search statement may run; past it the search raises `SearchTimeout` "
            "instead of holding a worker. `None`: no cap.",
            optional(number(0, above=True)),
        ),
        "ENABLE_SEQSCAN": Setting(
            False,
            "`enable_seqscan` during a vector search: `False` keeps the planner on the HNSW "
            "index, which it undercounts on small tables of long rows "
            "([search.md](search.md#how-it-uses-the-index)).",
            BOOLEAN,
        ),
        "DATABASE": Setting(
            None,
            "The database alias searches read rows and the serving version from (a read "
            "replica); `None`: Django's router ([deployment.md](deployment.md#read-replicas)).",
            optional(TEXT),
        ),
        "FUSION": Setting(
            "rrf",
            '`hybrid_search()`: `"rrf"`, reciprocal rank fusion, or `"linear"`, a weighted '
            "sum of each side's normalised scores ([hybrid.md](hybrid.md#fusion)).",
            one_of("rrf", "linear"),
        ),
        "RRF_K": Setting(
            1,
            "k of reciprocal rank fusion, `w / (k + rank)` per side; chosen on SciFact with "
            "BM25 ([benchmarks.md](benchmarks.md#bm25-keyword-search)).",
            number(0),
        ),
        "CANDIDATES": Setting(
            100, "Rows taken from each side of a hybrid search before fusing.", integer(1)
        ),
        "VECTOR_WEIGHT": Setting(1.0, "Weight of the vector side in fusion.", number(0)),
        "KEYWORD_WEIGHT": Setting(1.0, "Weight of the keyword side in fusion.", number(0)),
        "TUNED_FUSION": Setting(
            True,
            "`hybrid_search()` uses the fusion a fine-tuning run chose for the serving version "
            "on its eval split; `False`: always the settings above.",
            BOOLEAN,
        ),
        "KEYWORD_RANK": Setting(
            "bm25",
            'How the keyword side ranks: `"bm25"` (Okapi BM25F from exact statistics) or '
            '`"ts_rank"` (deprecated: PostgreSQL\'s rank, removed in the next release) '
            "([hybrid.md](hybrid.md#keyword-ranking-bm25)).",
            one_of("bm25", "ts_rank"),
        ),
        "BM25_K1": Setting(
            1.2, "BM25 term-frequency saturation `k1` (0: a word counts once).", number(0)
        ),
        "BM25_B": Setting(
            0.75,
            "BM25 length normalisation `b` in [0, 1]: one number, or a dict of weight letter "
            '-> number (`{"A": 0.5, "B": 0.75}`).',
            LETTER_NUMBERS_OR_FRACTION,
        ),
        "BM25_WEIGHTS": Setting(
            {"A": 1.0, "B": 1.0, "C": 1.0, "D": 1.0},
            "BM25F weight of each weight letter's fields (`A`: the first source field unless "
            "`keyword_weights` says otherwise); 0 leaves a field out of the rank.",
            LETTER_NUMBERS,
        ),
        "BM25_RESCORE": Setting(
            100,
            "BM25: candidates ordered by a quick score (the idf of the words a row holds), "
            "then this many (at least `k` or `CANDIDATES`) given the exact score.",
            integer(1),
        ),
        "KEYWORD_CANDIDATE_ROWS": Setting(
            2000,
            'BM25 with `"any"`: a row must hold one of the query\'s rarest words, taken while '
            "together they are in at most this many rows; `None`: any word.",
            optional(integer(1)),
        ),
        "KEYWORD_MATCH": Setting(
            "any",
            'Keyword side: rows with `"any"` of the words or `"all"` of them.',
            one_of("any", "all"),
        ),
        "KEYWORD_MAX_DF": Setting(
            0.2,
            'With `"any"`, words found in more than this share of the rows are left out.',
            number(0, 1, above=True),
        ),
        "KEYWORD_MAX_ROWS": Setting(
            10000,
            "A keyword search ranks at most this many matching rows.",
            optional(integer(1)),
        ),
        "KEYWORD_STATISTICS": Setting(
            1000,
            "Statistics target `migrate` gives each keyword column, so ANALYZE counts enough "
            "words to weigh them. `None`: leave PostgreSQL's.",
            optional(integer(1, 10000)),
        ),
        "SUGGEST_K": Setting(
            5, "Suggestions `suggest()` returns when no `k` is given.", integer(1)
        ),
        "SUGGEST_MIN_CHARS": Setting(
            2,
            "`suggest()`: a text shorter than this (spaces aside) suggests nothing "
            "([hybrid.md](hybrid.md#search-as-you-type)).",
            integer(1),
        ),
        "SUGGEST_VECTOR_MIN_CHARS": Setting(
            4,
            "`suggest()`: a shorter text is answered by the prefix match alone, with no "
            "vector search.",
            integer(0),
        ),
        "SUGGEST_CANDIDATES": Setting(
            20, "`suggest()`: rows taken from each side before fusing.", integer(1)
        ),
        "SUGGEST_MAX_ROWS": Setting(
            1000, "`suggest()`: at most this many prefix matches are ranked.", integer(1)
        ),
        "MAX_QUERY_LENGTH": Setting(
            1000,
            "Characters of `q` a search page accepts (`SearchForm`, `SearchView`); a longer "
            "one is a form error ([howto/search-page.md](howto/search-page.md)).",
            integer(1),
        ),
        "PASSAGES_PER_ROW": Setting(
            4,
            "Fields with `passages=`: passages the index scan fetches per row asked for "
            "([passages.md](passages.md)).",
            optional(integer(1)),
        ),
        "BINARY_OVERSAMPLE": Setting(
            4,
            "Fields with `binary_index=True`: rows taken by Hamming distance per row asked "
            "for, then re-ranked by cosine; `0` searches the float vectors "
            "([scale.md](scale.md)).",
            integer(0),
        ),
        "SIMILAR_CACHE_SECONDS": Setting(
            300,
            "How long `{% sbert_similar %}` keeps a row's similar rows in Django's default "
            "cache (keyed by the serving version, so a promotion is seen at once); `0`: not "
            "cached ([search.md](search.md#template-tags)).",
            number(0),
        ),
    },
    "Defaults of `similar_to()`, `keyword_search()` and `hybrid_search()`; each can be "
    "overridden per query.",
    anchor="search",
)

INDEX = Group(
    {
        "MAINTENANCE_WORK_MEM": Setting(
            "1GB",
            "`maintenance_work_mem` of an index build by `sbert_index`; `None`: the server's "
            "([scale.md](scale.md#sizing-maintenance_work_mem)).",
            optional(SIZE),
        ),
        "PARALLEL_WORKERS": Setting(
            None,
            "`max_parallel_maintenance_workers` of an index build by `sbert_index`; `None`: "
            "the server's.",
            optional(integer(0)),
        ),
        "MEMORY": Setting(
            None,
            'Check `W022`: bytes (or `"12GB"`) the HNSW indexes should fit in; `None`: the '
            "server's `effective_cache_size`.",
            optional(SIZE),
        ),
    },
    "Building and sizing vector indexes (manage.py sbert_index, check W022).",
    anchor="index",
)

TRAINING = Group(
    {
        "QUEUE": Setting(
            "sbert-train",
            "Celery queue of fine-tuning runs and promotions; run a worker with "
            "`-Q sbert-train` so indexing never waits behind them.",
            TEXT,
        ),
        "PRECISION": Setting(
            "auto",
            'Forward passes of a run: `"auto"` (bfloat16 autocast where the CPU has native '
            'bf16, float32 elsewhere), `"float32"` or `"bfloat16"`; weights stay float32.',
            one_of("auto", "float32", "bfloat16"),
        ),
        "MINING_ROWS": Setting(
            50000, "Stored rows a run mines hard negatives from, at most.", integer(1)
        ),
        "EVAL_DISTRACTORS": Setting(
            1000,
            "Texts the eval queries are ranked against besides their positives, so a small "
            "eval split still tells a better model apart; `0`: the positives alone.",
            integer(0),
        ),
        "STS_FILE": Setting(
            None,
            "A small tab-separated STS file every run measures before and after (general "
            "quality); `None`: off.",
            optional(PATH),
        ),
        "GATE_TOLERANCE": Setting(
            0.0,
            "Promotion refuses a candidate worse than the active version by more than this "
            "(its primary eval metric).",
            number(0),
        ),
        "STALLED_SECONDS": Setting(
            600,
            "A running run whose heartbeat stopped this long ago lost its worker and is "
            "failed; a queued run silent this long is sent again.",
            number(0),
        ),
        "PROMOTION_RESENDS": Setting(
            3,
            "A promotion that made no progress for `STALLED_SECONDS` is sent again this many "
            "times at most; then it is given up (back to candidate, with the error).",
            integer(0),
        ),
        "PAIRS_MAX_FILE_BYTES": Setting(
            20 * 1024 * 1024,
            "The largest pairs file an import reads (it is held in memory); `None`: any.",
            optional(integer(1)),
            shown_default="`20971520` (20 MB)",
        ),
        "MAX_SEQ_LENGTH": Setting(
            128,
            "Tokens of each text a run's training steps read (its evaluations and the model it "
            "saves keep the model's own length); `None`: the model's own.",
            optional(integer(2)),
        ),
        "LENGTH_BUCKETS": Setting(
            True,
            "Batch in-batch-negative losses (`mnrl`...) by text length, so short pairs do not "
            "pay for the padding of long ones; `False`: random batches.",
            BOOLEAN,
        ),
    },
    "Fine-tuning runs, the gate and promotions ([fine-tuning.md](fine-tuning.md)).",
    anchor="training",
)

ADAPT = Group(
    {
        "LOSS": Setting(
            "margin_mse",
            '"Adapt to our content": `"margin_mse"` (pseudo-queries scored by the model fused '
            'with BM25), `"mnrl"` (pseudo-queries as pairs) or `"simcse"`.',
            one_of("margin_mse", "mnrl", "simcse"),
        ),
        "METHOD": Setting(
            "ict",
            'How pseudo-queries are cut: `"ict"` (a sentence against the rest of the row) or '
            '`"crop"`.',
            one_of("ict", "crop"),
        ),
        "DOCUMENTS": Setting(
            1000,
            "Rows (a seeded sample) cut into pseudo-queries; `None`: all.",
            optional(integer(1)),
        ),
        "DENSE_SHARE": Setting(
            None,
            "`\"margin_mse\"`: the teacher's weight on the model's cosine, the rest on BM25; "
            "`None`: 0.5.",
            optional(number(0, 1)),
        ),
        "NEGATIVES": Setting(
            True, '`"mnrl"`: mine a hard negative per pseudo-query with the model.', BOOLEAN
        ),
        "LEARNING_RATE": Setting(
            5e-5, '`"mnrl"`: the learning rate when the run gives none.', number(0, above=True)
        ),
        "HOLD_OUT": Setting(
            0.1,
            "Share of pseudo-pairs (at most 200) held back for the gate when no eval split "
            "is given.",
            number(0, 1, above=True),
        ),
    },
    'A run on a field\'s own text, without pairs ("Adapt to our content", '
    "[fine-tuning.md](fine-tuning.md)).",
    anchor="adapt",
)

_PERMISSIONS = optional(IMPORT_STRINGS)

API = Group(
    {
        "DEFAULT_K": Setting(10, "Results when a request gives no `k`.", integer(1)),
        "MAX_K": Setting(
            100,
            "The largest `k` a client may ask for; each request fetches at most this many rows.",
            integer(1),
        ),
        "MAX_QUERY_LENGTH": Setting(
            1000, "Characters of `q` (and of `?semantic=` in the filter backend).", integer(1)
        ),
        "SUGGEST_MAX_K": Setting(20, "The largest `k` of `suggest/`.", integer(1)),
        "SUGGEST_MAX_QUERY_LENGTH": Setting(
            200, "Characters of `q` in `suggest/`: what a search box holds.", integer(1)
        ),
        "PAGE_SIZE": Setting(10, "Results per page of `search/` and `similar/`.", integer(1)),
        "FILTER_MAX_K": Setting(
            None,
            "Rows `SemanticSearchFilter` ranks at most, however deep a client pages; a page "
            "past them is 404. `None`: `MAX_K`.",
            optional(integer(1)),
        ),
        "MAX_PAGE_SIZE": Setting(
            100, "The largest `?page_size=` a client may ask for.", integer(1)
        ),
        "PAGINATION_CLASS": Setting(
            "django_sbert.api.pagination.SearchPagination",
            "Pagination of `search/` and `similar/`; `None`: one page.",
            optional(Rule(lambda v: isinstance(v, str) or callable(v), "a dotted path")),
        ),
        "SEARCH_PERMISSION_CLASSES": Setting(
            None,
            "Permission classes of the searches; `None`: "
            '`REST_FRAMEWORK["DEFAULT_PERMISSION_CLASSES"]` (a registered model may name its '
            "own).",
            _PERMISSIONS,
        ),
        "EMBED_PERMISSION_CLASSES": Setting(
            ["rest_framework.permissions.IsAuthenticated"],
            "Permission classes of `embed/`.",
            _PERMISSIONS,
        ),
        "EMBED_MAX_TEXTS": Setting(64, "Texts per `embed/` request.", integer(1)),
        "EMBED_MAX_TEXT_LENGTH": Setting(5000, "Characters per `embed/` text.", integer(1)),
        "MAX_BODY_BYTES": Setting(2 * 1024 * 1024, "Request bodies over this get 413.", integer(1)),
        "SCHEMA_PERMISSION_CLASSES": Setting(
            None,
            "Permission classes of `schema/`; `None`: drf-spectacular's `SERVE_PERMISSIONS`.",
            _PERMISSIONS,
        ),
        "THROTTLE_RATES": Setting(
            {
                "search": "120/minute",
                "suggest": "600/minute",
                "embed": "30/minute",
                "schema": "60/minute",
            },
            'Requests per period per client and scope (DRF\'s `"60/minute"`); merged, so '
            "naming one scope keeps the others; `None` turns a scope off.",
            RATES,
        ),
        "NUM_PROXIES": Setting(
            None,
            "Proxies in front of the site that append to `X-Forwarded-For`; `None`: count "
            "anonymous clients by `REMOTE_ADDR`.",
            optional(integer(0)),
        ),
    },
    "The REST API: limits, throttle rates, permissions ([api.md](api.md)).",
    anchor="api",
)


def _is_rate(value: Any) -> bool:
    number, _, period = str(value).partition("/")
    return number.isdigit() and period[:1] in ("s", "m", "h", "d")


HEALTH = Group(
    {
        "TOKEN": Setting(
            None,
            "A secret that monitoring sends as `Authorization: Bearer <token>` to read the "
            "checks' details at `sbert/health/` (staff read them when logged in); anonymous "
            "callers get the status only. Read it from the environment, not from the code.",
            optional(Rule(lambda v: isinstance(v, str) and len(v) >= 16, "a string of 16+ chars")),
        ),
        "THROTTLE_RATE": Setting(
            "120/minute",
            'Requests to `sbert/health/` per client (user, else IP address), as `"60/minute"`; '
            "past it 429 without running the checks. `None`: no limit.",
            optional(Rule(_is_rate, 'a rate such as "120/minute"')),
        ),
    },
    "The readiness view `sbert/health/`: who reads the details, how often it may be asked "
    "([deployment.md](deployment.md#health-and-readiness)).",
    anchor="health",
)

EVALUATION = Group(
    {
        "PRECISION_LEVEL": Setting(
            0.5,
            "An evaluation's threshold: the `min_similarity` below which fewer than this share "
            "of the rows returned are relevant (grade 1 or more).",
            number(0, 1),
        ),
        "AFTER_PROMOTION": Setting(
            True,
            "Evaluate the judgment lists of an encoder after each promotion (trigger "
            '`"promotion"`, on the training queue).',
            BOOLEAN,
        ),
        "SCHEDULE_HOURS": Setting(
            24,
            "Hours between scheduled evaluations of every judgment list (the beat entry "
            "`django_sbert.celery.evaluation_schedule()`); `None`: none scheduled.",
            optional(number(0, above=True)),
        ),
    },
    "Judgment lists and evaluations: `sbert_evaluate`, quality over time "
    "([benchmarks.md](benchmarks.md#measuring-search-quality)).",
    anchor="evaluation",
)

STRINGS = Rule(
    lambda v: isinstance(v, list | tuple) and all(isinstance(s, str) for s in v),
    "a list of strings",
)

FEEDBACK = Group(
    {
        # Logging, events, privacy
        "LOG": Setting(
            False,
            "Log searches (REST and `log_search()`) and accept click and conversion events "
            "([learning.md](learning.md)).",
            BOOLEAN,
        ),
        "SAMPLE_RATE": Setting(1.0, "Share of searches logged, 0 to 1.", number(0, 1)),
        "MAX_QUERY_LENGTH": Setting(
            200, "Characters of a query text kept in the log; the rest is cut.", integer(1)
        ),
        "RETENTION_DAYS": Setting(
            180,
            "Days searches and events are kept; the purge task deletes older ones. `None`: "
            "kept until deleted.",
            optional(integer(1)),
        ),
        "BOT_USER_AGENTS": Setting(
            ["bot", "crawl", "spider", "slurp", "archiver", "facebookexternalhit", "preview"],
            "Searches whose User-Agent holds one of these (lower-case) substrings are served "
            "but not logged, and their clicks are ignored.",
            STRINGS,
        ),
        "CLIENT_RATE": Setting(
            "60/minute",
            'Logged searches per client (user, session, else address), as `"60/minute"`; '
            "past it searches are served but not logged (a bot filter). `None`: no limit.",
            optional(Rule(_is_rate, 'a rate such as "60/minute"')),
        ),
        "CLICK_THROTTLE_RATE": Setting(
            "120/minute",
            'Click and conversion events per client, as `"120/minute"`; past it 429 and '
            "nothing stored. `None`: no limit.",
            optional(Rule(_is_rate, 'a rate such as "120/minute"')),
        ),
        "CONVERSIONS": Setting(
            [],
            'Event kinds accepted besides `"click"`, e.g. `["add_to_cart", "purchase"]` (at '
            "most 40 characters each); any other kind is refused with 400.",
            STRINGS,
        ),
        "TOKEN_MAX_AGE": Setting(
            86400,
            "Seconds a result's click token stays valid after the search. `None`: no limit.",
            optional(integer(1)),
        ),
        "HASH_KEY": Setting(
            None,
            "The key of the HMAC that turns a user id or session key into the logged client "
            "key. `None`: derived from `SECRET_KEY` (rotating it then makes earlier entries "
            "unreachable by user id); read it from the environment.",
            optional(Rule(lambda v: isinstance(v, str) and len(v) >= 16, "a string of 16+ chars")),
        ),
        # Pairs from behaviour and the loop
        "AUTO_PROMOTE": Setting(
            False,
            "Promote a run from behaviour by itself when the gate passes it on the most recent "
            "days; `False`: it waits as a candidate for staff.",
            BOOLEAN,
        ),
        "MIN_CLIENTS": Setting(
            1,
            "Distinct visitors who must have clicked a row for a query before (query, row) "
            "becomes a training pair. `2`: no visitor makes a pair alone, however sure the "
            "click model (`MIN_RELEVANCE`) is.",
            integer(1),
        ),
        "MIN_RELEVANCE": Setting(
            0.9,
            "How likely it must be that visitors wanted the row they clicked before (query, "
            "row) becomes a training pair, by a click model fitted to the search log (how often "
            "each position is looked at, how often wanted and unwanted rows are clicked). Keeps "
            "out rows clicked only because they came first, or by chance; `0` turns it off.",
            number(0, 1),
        ),
        "NEGATIVES": Setting(
            "mined",
            'Hard negatives of pairs from behaviour: `"mined"` (by the base model at training '
            'time), `"unexamined"` (a result below the last click) or `"skipped"` (a result '
            "above the click, not clicked).",
            one_of("mined", "unexamined", "skipped"),
        ),
        "EVAL_SHARE": Setting(
            0.1,
            "Share of the most recent days whose clicks become eval pairs: the gate measures a "
            "run from behaviour on later behaviour than it trained on.",
            number(0, 0.5, above=True),
        ),
        "LOOP_MIN_PAIRS": Setting(
            200,
            "New train pairs from behaviour that make the loop start a fine-tune.",
            integer(1),
        ),
        "LOOP_DAYS": Setting(
            90,
            "Days of the search log the loop reads to make pairs (`None`: all of it).",
            optional(integer(1)),
        ),
        "LOOP_HOURS": Setting(
            24.0,
            "How often `feedback_loop_schedule()` runs the loop (`None`: no beat entry).",
            optional(number(0, above=True)),
        ),
    },
    "Learning from visitors: the search log, clicks, pairs from behaviour and the loop "
    "([learning.md](learning.md)).",
    anchor="feedback",
)

QUERY_SERVER = Group(
    {
        "SOCKET": Setting(
            None,
            "Unix socket of this host's query server (`manage.py sbert_query_server`): web "
            "processes send it the texts of searches, which it encodes in batches and caches "
            "for the whole host. `None`: each process encodes its own "
            "([deployment.md](deployment.md#one-query-encoder-per-host)).",
            optional(PATH),
        ),
        "MAX_BATCH": Setting(
            16, "Queries the server encodes in one forward pass at most.", integer(1)
        ),
        "WINDOW_MS": Setting(
            1.0,
            "Milliseconds the server waits after a query arrives for others to join its batch "
            "(queries that arrive while it encodes join the next batch anyway).",
            number(0),
        ),
        "MAX_QUEUE": Setting(
            64,
            "Queries waiting to be encoded at most; past it the server answers busy and the "
            "search gets 503 with `Retry-After`.",
            integer(1),
        ),
        "RETRY_AFTER": Setting(
            1,
            "Seconds in the `Retry-After` of a search refused because the server was busy.",
            integer(0),
        ),
        "TIMEOUT": Setting(
            2.0,
            "Seconds a web process waits for the server's answer; past it, or when the server "
            "does not answer at all, the process encodes the text itself.",
            number(0, above=True),
        ),
        "RETRY_SECONDS": Setting(
            5.0,
            "After finding the server away, how long a web process encodes texts itself before "
            "asking the server again.",
            number(0),
        ),
        "CACHE_SIZE": Setting(
            10000,
            "Query vectors the server keeps for every process of the host (LRU; 1.5 KiB each "
            "at 384 dimensions); `0` turns it off.",
            integer(0),
        ),
        "THREADS": Setting(
            None,
            "torch threads of the server's forward passes; `None`: every CPU of the host.",
            optional(integer(1)),
        ),
    },
    "One query encoder per host, shared by its web processes "
    "([deployment.md](deployment.md#one-query-encoder-per-host)).",
    anchor="query-server",
)

TOP = {
    "ENCODERS": PerName(
        ENCODER,
        default={"default": ENCODER.defaults()},
        doc='Encoders by name (below); merged, so adding `"multilingual"` keeps `"default"`.',
    ),
    "QUEUE": Setting("sbert", "Celery queue of the embedding tasks (workers: `-Q sbert`).", TEXT),
    "AUTO_EMBED": Setting(
        True,
        "Saving a row schedules its embedding; `False`: only `sbert_reindex` and the sweep "
        "embed rows.",
        BOOLEAN,
    ),
    "MAX_DELIVERIES": Setting(
        3,
        "Deliveries of an embedding task whose worker died each time (out of memory, say): "
        "at this one the rows it died on are recorded as skipped and the rest go on "
        "([security.md](security.md#memory-of-indexing)).",
        integer(2),
    ),
    "QUERY_CACHE_SIZE": Setting(
        256, "Query texts whose vectors each process keeps (LRU); `0` turns it off.", integer(0)
    ),
    "VERSION_CACHE_SECONDS": Setting(
        2.0,
        "How long a process trusts what it read about the serving version; a promotion "
        "reaches every process within this time. `0`: read it on every use.",
        number(0),
    ),
    "MODEL_DIR": Setting(
        None,
        "Where fine-tuned versions are saved when `MODEL_STORAGE` is `None`; `None`: "
        "`<BASE_DIR>/sbert_models`.",
        optional(PATH),
    ),
    "MODEL_STORAGE": Setting(
        None,
        "A key of `STORAGES` that fine-tuned versions are written to and every host fetches "
        "them from; `None`: a `FileSystemStorage` under `MODEL_DIR` "
        "([deployment.md](deployment.md)).",
        optional(TEXT),
    ),
    "MODEL_CACHE": Setting(
        None,
        "This host's directory of verified copies of the versions it serves (one per host, "
        "never shared); `None`: `<MODEL_DIR>/.cache`.",
        optional(PATH),
    ),
    "MODEL_STORAGE_TIMEOUT": Setting(
        30.0,
        "Seconds each call to the model storage may take while a host fetches a version "
        "(`exists`, `open`, each 1 MiB read); past it the version is unavailable on that host "
        "for now. `None`: no limit.",
        optional(number(0, above=True)),
    ),
    "MODEL_FETCH_BACKOFF": Setting(
        60.0,
        "Seconds a process waits before fetching again a version it failed to fetch or "
        "verify, doubling per failure to at most 16 times as long; meanwhile it answers "
        "`VersionUnavailable` at once. `0`: retry at every use.",
        number(0),
    ),
    "COMPILE_CACHE": Setting(
        None,
        "This host's compiled single-query graphs and exported ONNX query graphs, loaded by "
        "a new process instead of compiling or exporting; `None`: `<MODEL_CACHE>/.compiled`; "
        "`False`: none kept "
        "([encoder.md](encoder.md)).",
        Rule(
            lambda v: v is None or v is False or isinstance(v, str) or hasattr(v, "__fspath__"),
            "a path, None or False",
        ),
    ),
    "SEARCH": SEARCH,
    "INDEX": INDEX,
    "TRAINING": TRAINING,
    "ADAPT": ADAPT,
    "API": API,
    "HEALTH": HEALTH,
    "EVALUATION": EVALUATION,
    "FEEDBACK": FEEDBACK,
    "QUERY_SERVER": QUERY_SERVER,
}

# Spellings of the previous release, read into their groups for one more release.
RENAMED: dict[str, tuple[str, str]] = {
    "TRAINING_QUEUE": ("TRAINING", "QUEUE"),
    "TRAINING_PRECISION": ("TRAINING", "PRECISION"),
    "TRAINING_MINING_ROWS": ("TRAINING", "MINING_ROWS"),
    "TRAINING_EVAL_DISTRACTORS": ("TRAINING", "EVAL_DISTRACTORS"),
    "TRAINING_STS_FILE": ("TRAINING", "STS_FILE"),
    "TRAINING_STALLED_SECONDS": ("TRAINING", "STALLED_SECONDS"),
    "EVAL_GATE_TOLERANCE": ("TRAINING", "GATE_TOLERANCE"),
    "PAIRS_MAX_FILE_BYTES": ("TRAINING", "PAIRS_MAX_FILE_BYTES"),
    "INDEX_MAINTENANCE_WORK_MEM": ("INDEX", "MAINTENANCE_WORK_MEM"),
    "INDEX_PARALLEL_WORKERS": ("INDEX", "PARALLEL_WORKERS"),
    "INDEX_MEMORY": ("INDEX", "MEMORY"),
    "SEARCH_DATABASE": ("SEARCH", "DATABASE"),
}
# Former settings that are now constants of the module that uses them: ignored, with a warning.
RETIRED: dict[str, str] = {
    "SWEEP_BATCH_SIZE": "the sweep sends 500 rows per task",
    "SKIPPED_RETRY_SECONDS": "a skipped row is retried after an hour, doubling per failure",
    "SKIPPED_RETRY_MAX_SECONDS": "a skipped row's retry wait stops doubling at 7 days",
    "LARGE_TABLE_ROWS": "check W001 looks at tables of 10,000 rows or more",
    "TRAINING_PROGRESS_SECONDS": "a run writes its progress at most every 2 s",
}

ENCODER_DEFAULTS: dict[str, Any] = ENCODER.defaults()
SEARCH_DEFAULTS: dict[str, Any] = SEARCH.defaults()
API_DEFAULTS: dict[str, Any] = API.defaults()
DEFAULTS: dict[str, Any] = {
    name: (item.default if isinstance(item, Setting | PerName) else item.defaults())
    for name, item in TOP.items()
}
# Keys whose value is a dict merged over the default dict rather than replacing it.
MERGED_KEYS = tuple(name for name, item in TOP.items() if not isinstance(item, Setting))


def normalized(user: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """``user`` with earlier spellings moved into their groups, and a note for each one.

    The new spelling wins where a project gives both; retired keys are dropped.
    """
    if not any(key in RENAMED or key in RETIRED for key in user):
        return user, []
    notes: list[str] = []
    result = {key: value for key, value in user.items() if key not in RENAMED | RETIRED}
    for old, (group, key) in RENAMED.items():
        if old not in user:
            continue
        inner = dict(result.get(group) or {})
        inner.setdefault(key, user[old])
        result[group] = inner
        notes.append(f"SBERT[{old!r}] is now SBERT[{group!r}][{key!r}]: rename it.")
    for old, now in RETIRED.items():
        if old in user:
            notes.append(f"SBERT[{old!r}] is no longer a setting ({now}): remove it.")
    return result, notes


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
            value, notes = normalized(value) if self.defaults is DEFAULTS else (value, [])
            for note in notes:
                warnings.warn(note, DeprecationWarning, stacklevel=3)
            self._user = value
        return self._user

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("_") or attr not in self.defaults:
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
        _encoder_configs.clear()


sbert_settings = SbertSettings()


def settings_problems() -> list[tuple[str, str | None]]:
    """(message, hint) for every way ``settings.SBERT`` departs from the declaration:
    unknown keys (with the closest known one), values that break their rules, and earlier
    spellings. The start-up check (``django_sbert.E005``, ``W003``) reports them."""
    user = sbert_settings.user_settings
    found: list[tuple[str, str | None]] = []
    for key, value in user.items():
        declared = TOP.get(key)
        path = f"SBERT[{key!r}]"
        if declared is None:
            found.append(unknown_key("SBERT", key, TOP))
        elif isinstance(declared, Group):
            found.extend(group_problems(path, value, declared))
        elif isinstance(declared, PerName):
            if not isinstance(value, dict):
                found.append((f"{path} must be a dict of name -> settings dict.", None))
                continue
            for name, inner in value.items():
                inner_path = f"{path}[{name!r}]"
                inner_problems = group_problems(inner_path, inner or {}, declared.group)
                found.extend(inner_problems)
                if not inner_problems and isinstance(inner or {}, dict):
                    conflict = encoder_conflict(inner_path, {**ENCODER_DEFAULTS, **(inner or {})})
                    found.extend([(conflict, None)] if conflict else [])
        else:
            found.extend(value_problems(path, value, declared))
    return found


def deprecated_settings() -> list[str]:
    """A note per earlier spelling the project still uses (check ``django_sbert.W003``)."""
    user = getattr(settings, SETTING_NAME, None) or {}
    return normalized(user)[1] if isinstance(user, dict) else []


# encoder_config's answers, checked once per settings (a search reads them several times).
_encoder_configs: dict[str, dict[str, Any]] = {}


def encoder_config(name: str = "default") -> dict[str, Any]:
    """Settings of the encoder called ``name``, with missing keys taken from ENCODER_DEFAULTS."""
    cached = _encoder_configs.get(name)
    if cached is None:
        cached = _encoder_configs[name] = _checked_encoder_config(name)
    return dict(cached)  # the caller's own copy


def _checked_encoder_config(name: str) -> dict[str, Any]:
    encoders = sbert_settings.ENCODERS or {}
    if name not in encoders:
        known = ", ".join(repr(n) for n in sorted(encoders)) or "none"
        raise ImproperlyConfigured(
            f"Unknown encoder {name!r}: settings.SBERT['ENCODERS'] defines {known}. Add "
            f"SBERT = {{'ENCODERS': {{{name!r}: {{'MODEL': 'all-MiniLM-L6-v2'}}}}}} to your "
            "settings, or pass one of the defined names as EmbeddingField(encoder=...)."
        )
    config = encoders[name] or {}
    path = f"settings.SBERT['ENCODERS'][{name!r}]"
    unknown = sorted(set(config) - set(ENCODER.keys))
    if unknown:
        raise ImproperlyConfigured(
            f"{path} has unknown keys {unknown}; {unknown_key_hint(unknown[0], ENCODER.keys)}"
        )
    problems = group_problems(path, config, ENCODER)
    if problems:
        raise ImproperlyConfigured(problems[0][0])
    merged = {**ENCODER_DEFAULTS, **config}
    conflict = encoder_conflict(path, merged)
    if conflict:
        raise ImproperlyConfigured(conflict)
    return merged


def encoder_conflict(path: str, merged: dict[str, Any]) -> str | None:
    """The rules across an encoder's keys: int8 quantization excludes the other paths, and
    ONNX Runtime queries run float32 on the CPU."""
    if merged["QUANTIZE"] and (merged["COMPILE"] is True or merged["PRECISION"] == "bfloat16"):
        return (
            f"{path} sets QUANTIZE with COMPILE=True or PRECISION='bfloat16'; choose one "
            "(COMPILE keeps float32 vectors, QUANTIZE trades a little accuracy for speed), or "
            "leave COMPILE and PRECISION at 'auto'."
        )
    if merged["QUERY_RUNTIME"] == "onnxruntime":
        device = str(merged["DEVICE"] or "cpu").split(":")[0]
        if merged["QUANTIZE"] or device != "cpu":
            return (
                f"{path} sets QUERY_RUNTIME='onnxruntime' with "
                f"{'QUANTIZE' if merged['QUANTIZE'] else f'DEVICE={device!r}'}: ONNX Runtime "
                "encodes queries in float32 on the CPU. Leave QUERY_RUNTIME at 'auto'."
            )
    return None


def reload_sbert_settings(*, setting: str, **kwargs: Any) -> None:
    if setting == SETTING_NAME:
        sbert_settings.reload()


setting_changed.connect(reload_sbert_settings, dispatch_uid="django_sbert.conf.reload")


# The reference tables of docs/settings.md, rendered from the declaration.

BEGIN, END = "<!-- settings:{} -->", "<!-- /settings:{} -->"


def reference_tables() -> dict[str, str]:
    """Markdown table per part of docs/settings.md: "top", each group by its anchor, "renamed"."""
    top: dict[str, Setting] = {}
    for name, item in TOP.items():
        if isinstance(item, Setting):
            top[name] = item
        elif isinstance(item, Group):
            top[name] = Setting(None, f"{item.doc} [Keys](#{item.anchor}).", shown_default="`{}`")
        else:
            doc = f"{item.doc} [Keys](#{item.group.anchor})."
            top[name] = Setting(None, doc, shown_default='`{"default": {}}`')
    tables = {"top": markdown_table(top), ENCODER.anchor: markdown_table(ENCODER.keys)}
    for item in TOP.values():
        if isinstance(item, Group):
            tables[item.anchor] = markdown_table(item.keys)
    rows = ["| earlier key | now |", "|---|---|"]
    rows += [f"| `{old}` | `{group}` / `{key}` |" for old, (group, key) in RENAMED.items()]
    rows += [f"| `{old}` | not a setting: {now} |" for old, now in RETIRED.items()]
    tables["renamed"] = "\n".join(rows)
    return tables


def write_reference(text: str) -> str:
    """``text`` (docs/settings.md) with every marked table replaced by the rendered one."""
    for part, table in reference_tables().items():
        begin, end = BEGIN.format(part), END.format(part)
        head, found, rest = text.partition(begin)
        if not found:
            raise ValueError(f"docs/settings.md lacks the marker {begin}")
        _, _, tail = rest.partition(end)
        text = f"{head}{begin}\n{table}\n{end}{tail}"
    return text


if __name__ == "__main__":  # python -m django_sbert.conf [--write docs/settings.md]
    if sys.argv[1:2] == ["--write"]:
        from pathlib import Path

        page = Path(sys.argv[2])
        page.write_text(write_reference(page.read_text()))
    else:
        for part, table in reference_tables().items():
            print(f"{BEGIN.format(part)}\n{table}\n")
