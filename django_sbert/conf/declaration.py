"""The declaration of ``settings.SBERT``: every key, its default, its rule and what it does.

The settings object (``django_sbert.conf``), the start-up check (``django_sbert.E005``) and
docs/settings.md (``python -m django_sbert.conf``) all read this one declaration. Keys of a
release before are listed in ``RENAMED`` (read into their new place) or ``RETIRED`` (ignored),
each with check ``django_sbert.W003``, for one release. ``BUDGET`` is the most keys the
declaration may grow to (tests/test_conf.py counts them): a new knob replaces one, or becomes a
constant of the module that uses it, an argument, or a command's flag.
"""

from __future__ import annotations

from typing import Any

from .options import Option
from .schema import (
    BOOLEAN,
    LETTER_NUMBERS,
    LETTER_NUMBERS_OR_FRACTION,
    PATH,
    PERMISSION_SCOPES,
    POSITIVE_INTEGERS,
    RATE_SCOPES,
    SIZE,
    SOCKET,
    STRINGS,
    TEXT,
    Group,
    PerName,
    Rule,
    Setting,
    default_of,
    integer,
    number,
    one_of,
    optional,
)

SETTING_NAME = "SBERT"
# The most keys a project can set, every key of every group counted once (an encoder's keys
# once for all encoders).
BUDGET = 60

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
            'text), `"onnxruntime-int8"` (int8 weights: about 0.6x its CPU on an AVX2 host, '
            "vectors at cosine about 0.98 to float32's; documents keep float32), "
            '`"torch"` (the `COMPILE` / `PRECISION` path), or `"auto"`: ONNX Runtime float32 '
            "where that path is float32 on a CPU, torch where it is bfloat16, int8 or a GPU "
            "([encoder.md](encoder.md#which-path-each-process-takes)).",
            one_of("auto", "torch", "onnxruntime", "onnxruntime-int8"),
        ),
        "LONG_TEXT": Setting(
            "truncate",
            'Texts over the model\'s `max_seq_length`: `"truncate"` keeps the start, '
            '`"chunk"` averages the vectors of overlapping windows (at most 64 per row, so no '
            "row can exhaust a worker's memory).",
            one_of("truncate", "chunk"),
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

FUSION = Group(
    {
        "METHOD": Setting(
            "linear",
            '`hybrid_search()`: `"linear"`, a weighted sum of each side\'s normalised scores, '
            'or `"rrf"`, reciprocal rank fusion; chosen across three corpora '
            "([hybrid.md](hybrid.md#how-the-defaults-were-chosen)).",
            one_of("rrf", "linear"),
        ),
        "RRF_K": Setting(
            1,
            'k of reciprocal rank fusion (`METHOD` `"rrf"`), `w / (k + rank)` per side; the '
            "best k on the same corpora ([hybrid.md](hybrid.md#how-the-defaults-were-chosen)).",
            number(0),
        ),
        "CANDIDATES": Setting(
            100, "Rows taken from each side of a hybrid search before fusing.", integer(1)
        ),
        "VECTOR_WEIGHT": Setting(0.4, "Weight of the vector side in fusion.", number(0)),
        "KEYWORD_WEIGHT": Setting(0.6, "Weight of the keyword side in fusion.", number(0)),
        "TUNED": Setting(
            True,
            "`hybrid_search()` uses the fusion a fine-tuning run chose for the serving version "
            "on its eval split; `False`: always the settings above.",
            BOOLEAN,
        ),
    },
    "How `hybrid_search()` fuses its two lists: the fields of `FusionConfig`, which takes its "
    "defaults and checks from here ([hybrid.md](hybrid.md#fusion)).",
    anchor="search-fusion",
)

KEYWORD = Group(
    {
        "MATCH": Setting(
            "any",
            'Keyword side: rows with `"any"` of the words or `"all"` of them.',
            one_of("any", "all"),
        ),
        "MAX_DF": Setting(
            0.5,
            'With `"any"`, words found in more than this share of the rows are left out.',
            number(0, 1, above=True),
        ),
        "K1": Setting(
            1.2, "BM25 term-frequency saturation `k1` (0: a word counts once).", number(0)
        ),
        "B": Setting(
            0.75,
            "BM25 length normalisation `b` in [0, 1]: one number, or a dict of weight letter "
            '-> number (`{"A": 0.5, "B": 0.75}`).',
            LETTER_NUMBERS_OR_FRACTION,
        ),
        "WEIGHTS": Setting(
            {"A": 1.0, "B": 1.0, "C": 1.0, "D": 1.0},
            "BM25F weight of each weight letter's fields (`A`: the first source field unless "
            "`keyword_weights` says otherwise); 0 leaves a field out of the rank.",
            LETTER_NUMBERS,
        ),
    },
    "The keyword side of `keyword_search()` and `hybrid_search()`: the fields of `KeywordConfig` "
    "and BM25's parameters ([hybrid.md](hybrid.md#keyword-ranking-bm25)).",
    anchor="search-keyword",
)

SUGGEST = Group(
    {
        "K": Setting(5, "Suggestions `suggest()` returns when no `k` is given.", integer(1)),
    },
    "Search-as-you-type, `suggest()` ([hybrid.md](hybrid.md#search-as-you-type)).",
    anchor="search-suggest",
)

SEARCH = Group(
    {
        "K": Setting(
            10,
            "Rows `similar_to()` returns when the queryset is not sliced, and results of an API "
            "request that gives no `k`.",
            optional(integer(1)),
        ),
        "EF_SEARCH": Setting(
            100,
            "`hnsw.ef_search`: candidates an index search keeps; higher: better recall, "
            "slower. Past about 500k rows set 200 ([scale.md](scale.md)).",
            optional(integer(1)),
        ),
        "STATEMENT_TIMEOUT": Setting(
            5.0,
            "Seconds one search statement may run; past it the search raises `SearchTimeout` "
            "instead of holding a worker. `None`: no cap.",
            optional(number(0, above=True)),
        ),
        "DATABASE": Setting(
            None,
            "The database alias searches read rows and the serving version from (a read "
            "replica); `None`: Django's router ([deployment.md](deployment.md#read-replicas)).",
            optional(TEXT),
        ),
        "MAX_QUERY_LENGTH": Setting(
            1000,
            "Characters of `q` a search page (`SearchForm`, `SearchView`) and the API accept "
            "(`?semantic=` of the filter too); a longer one is refused "
            "([howto/search-page.md](howto/search-page.md)).",
            integer(1),
        ),
        "FUSION": FUSION,
        "KEYWORD": KEYWORD,
        "SUGGEST": SUGGEST,
    },
    "Defaults of `similar_to()`, `keyword_search()` and `hybrid_search()`; each can be "
    "overridden per query.",
    anchor="search",
)

INDEX = Group(
    {
        "MEMORY": Setting(
            None,
            'Check `W022`: bytes (or `"12GB"`) the HNSW indexes should fit in; `None`: the '
            "server's `effective_cache_size`.",
            optional(SIZE),
        ),
    },
    "Sizing vector indexes (check W022).",
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
        "STS_FILE": Setting(
            None,
            "A small tab-separated STS file every run measures before and after (general "
            "quality); `None`: off.",
            optional(PATH),
        ),
        "STALLED_SECONDS": Setting(
            600,
            "A running run whose heartbeat stopped this long ago lost its worker and is "
            "failed; a queued run silent this long is sent again.",
            number(0),
        ),
    },
    "Fine-tuning runs and promotions ([fine-tuning.md](fine-tuning.md)).",
    anchor="training",
)

API = Group(
    {
        "MAX_K": Setting(
            100,
            "The largest `k` a client may ask for; each request fetches at most this many rows.",
            integer(1),
        ),
        "PAGE_SIZE": Setting(10, "Results per page of `search/` and `similar/`.", integer(1)),
        "PERMISSION_CLASSES": Setting(
            {
                "search": None,
                "embed": ["rest_framework.permissions.IsAuthenticated"],
                "schema": None,
            },
            "Permission classes per endpoint, merged (naming one keeps the others): `search` "
            '(`None`: `REST_FRAMEWORK["DEFAULT_PERMISSION_CLASSES"]`; a registered model may '
            "name its own), `embed`, `schema` (`None`: drf-spectacular's `SERVE_PERMISSIONS`).",
            PERMISSION_SCOPES,
            merged=True,
        ),
        "NUM_PROXIES": Setting(
            None,
            "Proxies in front of the site that append to `X-Forwarded-For`; `None`: count "
            "anonymous clients by `REMOTE_ADDR`.",
            optional(integer(0)),
        ),
    },
    "The REST API: limits and permissions ([api.md](api.md)).",
    anchor="api",
)

HEALTH = Group(
    {
        "TOKEN": Setting(
            None,
            "A secret that monitoring sends as `Authorization: Bearer <token>` to read the "
            "checks' details at `sbert/health/` (staff read them when logged in); anonymous "
            "callers get the status only. Read it from the environment, not from the code.",
            optional(Rule(lambda v: isinstance(v, str) and len(v) >= 16, "a string of 16+ chars")),
        ),
    },
    "The readiness view `sbert/health/`: who reads the details "
    "([deployment.md](deployment.md#health-and-readiness)).",
    anchor="health",
)

EVALUATION = Group(
    {
        "AFTER_PROMOTION": Setting(
            True,
            "Evaluate the judgment lists of an encoder after each promotion (trigger "
            '`"promotion"`, on the training queue).',
            BOOLEAN,
        ),
    },
    "Judgment lists and evaluations: `sbert_evaluate`, quality over time "
    "([benchmarks.md](benchmarks.md#measuring-search-quality)).",
    anchor="evaluation",
)

# How clicks become training pairs: the admin's form, sbert_make_pairs' flags, the loop (the
# FEEDBACK keys below give their defaults) and feedback.pairs' check all read these.
NEGATIVE_CHOICES = ("mined", "unexamined", "skipped")
PAIR_OPTIONS = (
    Option("min_clients", int, 1, "Distinct visitors a pair needs.", minimum=1),
    Option(
        "min_relevance",
        float,
        0.9,
        "How likely the click model must find it that visitors wanted the row (0: off).",
        minimum=0.0,
        maximum=1.0,
    ),
    Option("negatives", str, "mined", "Where negatives come from.", choices=NEGATIVE_CHOICES),
    Option(
        "eval_share",
        float,
        0.1,
        "Share kept for the eval split (from the log: the most recent share of the days).",
        minimum=0.0,
        maximum=0.5,
        open_minimum=True,
    ),
)
PAIR_OPTION = {option.name: option for option in PAIR_OPTIONS}
PAIR_DOCS = {
    "min_clients": "Distinct visitors who must have clicked a row for a query before (query, "
    "row) becomes a training pair. `2`: no visitor makes a pair alone, however sure the click "
    "model (`MIN_RELEVANCE`) is.",
    "min_relevance": "How likely it must be that visitors wanted the row they clicked before "
    "(query, row) becomes a training pair, by a click model fitted to the search log (how "
    "often each position is looked at, how often wanted and unwanted rows are clicked). Keeps "
    "out rows clicked only because they came first, or by chance; `0` turns it off.",
    "negatives": 'Hard negatives of pairs from behaviour: `"mined"` (by the base model at '
    'training time), `"unexamined"` (a result below the last click) or `"skipped"` (a result '
    "above the click, not clicked).",
    "eval_share": "Share of the most recent days whose clicks become eval pairs: the gate "
    "measures a run from behaviour on later behaviour than it trained on.",
}

FEEDBACK = Group(
    {
        "LOG": Setting(
            False,
            "Log searches (REST and `log_search()`) and accept click and conversion events "
            "([learning.md](learning.md)); a number in [0, 1]: on, logging that share of the "
            "searches.",
            Rule(
                lambda v: isinstance(v, bool) or (number(0, 1).test(v)),
                "True, False or a share in [0, 1]",
            ),
        ),
        "RETENTION_DAYS": Setting(
            180,
            "Days searches and events are kept; the purge task deletes older ones. `None`: "
            "kept until deleted.",
            optional(integer(1)),
        ),
        "CONVERSIONS": Setting(
            [],
            'Event kinds accepted besides `"click"`, e.g. `["add_to_cart", "purchase"]` (at '
            "most 40 characters each); any other kind is refused with 400.",
            STRINGS,
        ),
        "HASH_KEY": Setting(
            None,
            "The key of the HMAC that turns a user id or session key into the logged client "
            "key. `None`: derived from `SECRET_KEY` (rotating it then makes earlier entries "
            "unreachable by user id); read it from the environment.",
            optional(Rule(lambda v: isinstance(v, str) and len(v) >= 16, "a string of 16+ chars")),
        ),
        "AUTO_PROMOTE": Setting(
            False,
            "Promote a run from behaviour by itself when the gate passes it on the most recent "
            "days; `False`: it waits as a candidate for staff.",
            BOOLEAN,
        ),
        **{option.name.upper(): option.setting(PAIR_DOCS[option.name]) for option in PAIR_OPTIONS},
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
            "for the whole host, and load no model (while it is away, searches answer from "
            'the keyword side, marked). `[path, "in-process"]`: a process encodes texts '
            "itself while the server is away (it loads the model then). `None`: each process "
            "encodes its own ([deployment.md](deployment.md#one-query-encoder-per-host)).",
            optional(SOCKET),
        ),
    },
    "One query encoder per host, shared by its web processes "
    "([deployment.md](deployment.md#one-query-encoder-per-host)).",
    anchor="query-server",
)


TOP: dict[str, Setting | Group | PerName] = {
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
    "RATES": Setting(
        {
            "search": "120/minute",
            "suggest": "600/minute",
            "embed": "30/minute",
            "schema": "60/minute",
            "clicks": "120/minute",
            "health": "120/minute",
            "logging": "60/minute",
        },
        'Requests per period per client and scope, as DRF\'s `"60/minute"`; merged, so naming '
        "one scope keeps the others; `None` turns a scope off. The API's `search`, `suggest`, "
        "`embed` and `schema` (past it 429); `clicks`: click and conversion events; `health`: "
        "`sbert/health/`; `logging`: logged searches per client, past it served but not "
        "logged (a bot filter) ([api.md](api.md)).",
        RATE_SCOPES,
        merged=True,
    ),
    "SEARCH": SEARCH,
    "INDEX": INDEX,
    "TRAINING": TRAINING,
    "API": API,
    "HEALTH": HEALTH,
    "EVALUATION": EVALUATION,
    "FEEDBACK": FEEDBACK,
    "QUERY_SERVER": QUERY_SERVER,
}

ENCODER_DEFAULTS: dict[str, Any] = ENCODER.defaults()
SEARCH_DEFAULTS: dict[str, Any] = SEARCH.defaults()
API_DEFAULTS: dict[str, Any] = API.defaults()
DEFAULTS: dict[str, Any] = {name: default_of(item) for name, item in TOP.items()}


def leaf_count() -> int:
    """Keys a project can set: every key of every group, an encoder's keys counted once."""
    groups = [item.group if isinstance(item, PerName) else item for item in TOP.values()]
    return sum(item.leaves() if isinstance(item, Group) else 1 for item in groups)


def groups() -> list[tuple[str, Group]]:
    """(path as a project writes it, group) for every group, nested ones too."""
    found: list[tuple[str, Group]] = []

    def walk(path: str, group: Group) -> None:
        found.append((path, group))
        for name, item in group.keys.items():
            if isinstance(item, Group):
                walk(f"{path}[{name!r}]", item)

    for name, item in TOP.items():
        if isinstance(item, PerName):
            walk(f"SBERT[{name!r}]['default']", item.group)
        elif isinstance(item, Group):
            walk(f"SBERT[{name!r}]", item)
    return found
