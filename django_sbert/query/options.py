"""Per-query search options: pgvector's index settings and hybrid search's fusion settings.

Every default comes from ``SBERT["SEARCH"]`` or a constant below; an argument given to a
search method overrides it for that query.

* ``SearchOptions`` / ``search_options()``: ``hnsw.ef_search``, ``hnsw.iterative_scan``,
  ``hnsw.max_scan_tuples``, ``enable_seqscan`` and ``statement_timeout``, set with
  ``set_config(..., is_local => true)`` inside a transaction that also runs the query: a
  ``SET LOCAL`` outside a transaction does nothing (pgvector #675). With psycopg 3 the
  transaction's ``BEGIN``, the ``set_config`` and the search statement go to PostgreSQL in one
  round trip (pipeline mode), not three: a search's own work is a millisecond or two, so each
  round trip, a wake-up of both processes, counts.
* ``FusionConfig`` / ``KeywordConfig``: ``hybrid_search()``'s options, whose fields are the
  keys of ``SEARCH["FUSION"]`` / ``SEARCH["KEYWORD"]``; ``resolved()`` fills in and checks them
  by those keys' declaration (conf/declaration.py), so a setting and an argument follow one
  rule.
* ``tuned_fusion()``: the ``rrf_k`` and weights chosen for the serving encoder version on its
  eval split (finetuning/hybrid.py), which replace the settings' while it serves.
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields, replace
from typing import Any

from django.db import OperationalError, connections, transaction

from ..conf import declaration, sbert_settings
from ..conf.schema import Group
from ..exceptions import SearchTimeout
from ..keyword import bm25, tsquery
from ..serving import serving_record

ITERATIVE_SCAN_MODES = ("off", "strict_order", "relaxed_order")
# Unlike the hnsw.* settings, this one changes how every other query plans: restored after
# a search that runs inside a caller's transaction.
PLANNER_SETTING = "enable_seqscan"
QUERY_CANCELED = "57014"  # PostgreSQL's SQLSTATE for a statement cancelled by statement_timeout
# hnsw.iterative_scan: with a filter, keep scanning until k rows match (per query:
# similar_to(iterative_scan=...)); hnsw.max_scan_tuples: where such a scan gives up.
ITERATIVE_SCAN = "relaxed_order"
MAX_SCAN_TUPLES = 20000
# enable_seqscan during a vector search: off keeps the planner on the HNSW index, which it
# undercounts on small tables of long rows (docs/search.md#how-it-uses-the-index).
ENABLE_SEQSCAN = False
# BM25: candidates ordered by a quick score (the idf of the words a row holds), then this many
# (at least k or the fusion's candidates) given the exact score.
BM25_RESCORE = 100
# BM25 with match="any": a row must hold one of the query's rarest words, taken while together
# they are in at most this many rows (docs/benchmarks.md).
KEYWORD_CANDIDATE_ROWS: int | None = 2000
# A keyword search ranks at most this many matching rows, however common the words.
KEYWORD_MAX_ROWS = 10000
# Fields with binary_index=True: rows taken by Hamming distance per row asked for, then
# re-ranked by cosine (per query: similar_to(oversample=...); 0: the float vectors).
BINARY_OVERSAMPLE = 4


@dataclass(frozen=True)
class SearchOptions:
    """Per-query pgvector settings, applied by set_config(..., true) in the query's transaction."""

    k: int | None
    ef_search: int | None
    iterative_scan: str | None
    max_scan_tuples: int | None
    statement_timeout: float | None = None  # seconds; None: the session's own
    enable_seqscan: bool | None = None  # False: "off" for the search; None/True: untouched

    @classmethod
    def without_index_settings(cls, k: int | None = None) -> SearchOptions:
        """For searches that use no vector index (keyword search): ``k`` and the timeout."""
        search = sbert_settings.SEARCH
        return cls(
            k=k if k is not None else search.get("K"),
            ef_search=None,
            iterative_scan=None,
            max_scan_tuples=None,
            statement_timeout=search.get("STATEMENT_TIMEOUT"),
        )

    @classmethod
    def from_settings(cls, k: int | None = None, **overrides: Any) -> SearchOptions:
        search = sbert_settings.SEARCH
        values = {
            "ef_search": search["EF_SEARCH"],
            "iterative_scan": ITERATIVE_SCAN,
            "max_scan_tuples": MAX_SCAN_TUPLES,
            "statement_timeout": search["STATEMENT_TIMEOUT"],
            "enable_seqscan": ENABLE_SEQSCAN,
        }
        values.update({key: value for key, value in overrides.items() if value is not None})
        scan = values["iterative_scan"]
        if scan is not None and scan not in ITERATIVE_SCAN_MODES:
            raise ValueError(f"iterative_scan must be one of {ITERATIVE_SCAN_MODES}, got {scan!r}.")
        return cls(k=k if k is not None else search.get("K"), **values)

    def config(self) -> list[tuple[str, str]]:
        pairs = [
            ("hnsw.ef_search", self.ef_search),
            ("hnsw.iterative_scan", self.iterative_scan),
            ("hnsw.max_scan_tuples", self.max_scan_tuples),
        ]
        settings = [(name, str(value)) for name, value in pairs if value is not None]
        if self.enable_seqscan is False:
            settings.append((PLANNER_SETTING, "off"))
        if self.statement_timeout:
            milliseconds = max(1, round(float(self.statement_timeout) * 1000))
            settings.append(("statement_timeout", str(milliseconds)))
        return settings


@contextmanager
def search_options(
    using: str, options: SearchOptions, *, pipelined: bool = False
) -> Iterator[bool]:
    """Run the block in a transaction whose pgvector settings are ``options``; yield whether
    its statements go in pipeline mode (below).

    The settings are transaction-local, so they vanish at COMMIT and never leak to other
    queries on a pooled connection. Nested in a caller's transaction, they last until that
    transaction ends (the usual SET LOCAL rule), except ``enable_seqscan``, which is put back
    after the block: it would change the plans of the caller's other queries.

    ``pipelined=True`` is for a block that runs its statements on ordinary cursors and reads
    their rows whole (no server-side cursor, no COPY): outside a caller's transaction, with
    psycopg 3, the settings and the block's statements then go to PostgreSQL in pipeline mode
    as one implicit transaction, which ends at the pipeline's Sync. Two round trips instead of
    four (``BEGIN``, the settings, the statement, ``COMMIT``), the same settings, the same
    transaction-local scope. Elsewhere (psycopg 2, libpq < 14, in a caller's transaction) the
    block runs in ``transaction.atomic`` as before. In pipeline mode a statement is sent at
    ``execute()`` and runs while the caller goes on; its rows are read at ``fetch*()``.
    """
    config = options.config()
    connection = connections[using]
    restore = None
    nested = connection.in_atomic_block  # in a caller's transaction
    try:
        with _transaction(connection, pipelined) as in_pipeline:
            if config:
                placeholders = ", ".join("set_config(%s, %s, true)" for _ in config)
                params = [item for pair in config for item in pair]
                keep = nested and any(name == PLANNER_SETTING for name, _ in config)
                if keep:  # read before it is set: a target list is evaluated in order
                    placeholders = f"current_setting('{PLANNER_SETTING}'), {placeholders}"
                with connection.cursor() as cursor:
                    cursor.execute(f"SELECT {placeholders}", params)
                    if keep:
                        restore = cursor.fetchone()[0]
            yield in_pipeline
            if restore is not None:
                with connection.cursor() as cursor:
                    cursor.execute("SELECT set_config(%s, %s, true)", [PLANNER_SETTING, restore])
    except OperationalError as exc:
        cause = exc.__cause__
        code = getattr(cause, "sqlstate", None) or getattr(cause, "pgcode", None)  # psycopg 3, 2
        if code != QUERY_CANCELED:
            raise
        raise SearchTimeout(
            f"The search ran longer than SBERT['SEARCH']['STATEMENT_TIMEOUT'] "
            f"({options.statement_timeout} s) and PostgreSQL cancelled it. Narrow it with "
            "filters that an index serves, make sure the HNSW index is used (explain()), or "
            "raise the setting.",
            seconds=options.statement_timeout,
        ) from exc


@contextmanager
def _transaction(connection: Any, pipelined: bool) -> Iterator[bool]:
    """The transaction a search's settings live in: an implicit one in psycopg 3's pipeline
    mode (statements up to a Sync run as one transaction), else ``transaction.atomic``;
    yields whether it is the pipeline."""
    if pipelined and connection.get_autocommit() and not connection.in_atomic_block:
        connection.ensure_connection()
        start = getattr(connection.connection, "pipeline", None)
        if start is not None and pipeline_supported():
            with start():
                yield True
            return
    with transaction.atomic(using=connection.alias, savepoint=False):
        yield False


@functools.cache
def pipeline_supported() -> bool:
    """Whether psycopg 3's pipeline mode is here (libpq 14+); psycopg 2 has none."""
    try:
        from psycopg import Pipeline  # psycopg 3 only
    except ImportError:
        return False
    return bool(Pipeline.is_supported())


def match_mode(match: str) -> str:
    if match not in tsquery.MATCH_MODES:
        raise ValueError(f"match must be one of {tsquery.MATCH_MODES}, got {match!r}.")
    return match


def _resolved(config: Any, group: Group, path: str) -> Any:
    """``config`` with each field left None taken from its key in ``SBERT[...]`` (``path``;
    the field's name upper-cased), every value checked by that key's rule."""
    settings = sbert_settings.SEARCH[path]
    values = {}
    for item in fields(config):
        key = item.name.upper()
        if key not in group.keys:
            continue
        value = getattr(config, item.name)
        value = settings[key] if value is None else value
        rule = group.keys[key].rule
        if rule is not None and not rule.test(value):
            shown = "fusion" if item.name == "method" else item.name  # hybrid_search(fusion=)
            raise ValueError(
                f"{shown} must be {rule.expect}, got {value!r} "
                f"(check SBERT['SEARCH'][{path!r}][{key!r}] or the {type(config).__name__})."
            )
        values[item.name] = value
    return replace(config, **values)


@dataclass(frozen=True)
class FusionConfig:
    """How ``hybrid_search()`` fuses its vector and keyword lists. Its fields are the keys of
    ``SBERT["SEARCH"]["FUSION"]``, lower-cased; None: that setting, or the fusion tuned for the
    serving version (docs/hybrid.md)."""

    method: str | None = None  # "rrf" (reciprocal rank fusion) or "linear" (normalised scores)
    rrf_k: float | None = None  # rrf: score = weight / (rrf_k + rank); given alone implies rrf
    candidates: int | None = None  # rows each side contributes before fusing
    vector_weight: float | None = None  # weight of the vector side (0: keyword side only)
    keyword_weight: float | None = None  # weight of the keyword side (0: vector side only)

    def resolved(self) -> FusionConfig:
        """Every field given: None ones from the settings, each checked by its key's rule."""
        return _resolved(self, declaration.FUSION, "FUSION")


@dataclass(frozen=True)
class KeywordConfig:
    """How ``hybrid_search()``'s keyword side matches, as in ``keyword_search()``. Its fields
    are keys of ``SBERT["SEARCH"]["KEYWORD"]``, lower-cased; None: that setting."""

    match: str | None = None  # "all" (every word, web-search syntax) or "any" of the words
    max_df: float | None = None  # match="any": words in more than this share of rows left out
    rank: str | None = None  # "bm25", the one keyword ranking

    def resolved(self) -> KeywordConfig:
        """Every field given: None ones from the settings, each checked by its key's rule."""
        return replace(
            _resolved(self, declaration.KEYWORD, "KEYWORD"), rank=keyword_rank(self.rank)
        )


# hybrid_search()'s options given one by one instead of in its configs (deprecated).
LOOSE_FUSION = ("candidates", "rrf_k", "vector_weight", "keyword_weight")
LOOSE_KEYWORD = ("match", "max_df", "rank")


def hybrid_configs(
    fusion: FusionConfig | str | None, keyword: KeywordConfig | None, **loose: Any
) -> tuple[FusionConfig, KeywordConfig]:
    """One ``hybrid_search()`` call's options as its two configs, as given (None: not given).

    ``fusion`` may name the method alone (``"linear"``); options given as keyword arguments of
    their own are folded in with a ``DeprecationWarning``, and refused when the config given
    names them too. Every value is checked as the settings are (``resolved()``)."""
    if fusion is not None and not isinstance(fusion, str | FusionConfig):
        raise TypeError(f"fusion must be a FusionConfig or a method's name, not {fusion!r}.")
    if keyword is not None and not isinstance(keyword, KeywordConfig):
        raise TypeError(f"keyword must be a KeywordConfig, not {keyword!r}.")
    given = {name: value for name, value in loose.items() if value is not None}
    if given:
        warnings.warn(
            f"hybrid_search({', '.join(f'{name}=' for name in given)}...) is deprecated: pass "
            "fusion=FusionConfig(...) and keyword=KeywordConfig(...) (docs/hybrid.md).",
            DeprecationWarning,
            stacklevel=3,
        )
    configs = []
    for config, names, argument in (
        (fusion if isinstance(fusion, FusionConfig) else None, LOOSE_FUSION, "fusion"),
        (keyword, LOOSE_KEYWORD, "keyword"),
    ):
        twice = sorted(name for name in names if name in given and config is not None)
        if twice:
            raise TypeError(
                f"hybrid_search() got {', '.join(twice)} both in {argument}= and as keyword "
                f"arguments; give each option once (in {type(config).__name__})."
            )
        default = FusionConfig() if argument == "fusion" else KeywordConfig()
        mine = {name: given[name] for name in names if name in given}
        configs.append(replace(config or default, **mine))
    fused, keyed = configs
    if isinstance(fusion, str):
        fused = replace(fused, method=fusion)
    if fused.method is None and fused.rrf_k is not None:
        fused = replace(fused, method="rrf")  # rrf_k means nothing to the other fusion
    fused.resolved(), keyed.resolved()  # a bad value is refused before any work
    return fused, keyed


def tuned_fusion(source: Any) -> dict[str, Any]:
    """``fusion``, ``rrf_k``, ``vector_weight`` and ``keyword_weight`` chosen for the version
    that encoded the query (``source``, a ``vectors.QuerySource``) when its run evaluated it;
    {} when none was chosen (the base model, a site that never fine-tunes), for a vector
    passed in, or with ``SBERT["SEARCH"]["FUSION"]["TUNED"]`` False. Read with the serving
    version (cached as it is).
    """
    if source is None or not sbert_settings.SEARCH["FUSION"]["TUNED"]:
        return {}
    current = serving_record(source.encoder, using=source.database)
    if current.version != source.version:  # a switch since the query was encoded
        return {}
    return current.fusion_settings()


def keyword_max_df(max_df: float | None) -> float:
    """``max_df`` given, else ``SBERT["SEARCH"]["KEYWORD"]["MAX_DF"]``; checked to be in
    (0, 1]."""
    if max_df is None:
        max_df = sbert_settings.SEARCH["KEYWORD"]["MAX_DF"]
    if not 0 < float(max_df) <= 1:
        raise ValueError(f"max_df must be in (0, 1], got {max_df!r}.")
    return float(max_df)


def keyword_rank(rank: str | None) -> str:
    """``rank`` checked: "bm25" (the default, and the one keyword ranking)."""
    value = "bm25" if rank is None else rank
    if value not in bm25.RANKS:
        removed = " (ts_rank, deprecated in 0.2.0, was removed)" if value == "ts_rank" else ""
        raise ValueError(f"rank must be one of {bm25.RANKS}, got {value!r}{removed}.")
    return value


def bm25_settings() -> dict[str, Any]:
    """``k1``, ``b`` and ``weights`` of BM25 (``SBERT["SEARCH"]["KEYWORD"]``)."""
    keyword = sbert_settings.SEARCH["KEYWORD"]
    weights = {**declaration.KEYWORD.keys["WEIGHTS"].default, **keyword["WEIGHTS"]}
    return {"k1": keyword["K1"], "b": keyword["B"], "weights": weights}


def rescored_rows(wanted: int | None) -> int:
    """How many BM25 candidates get the exact score: ``BM25_RESCORE``, at least ``wanted``."""
    return max(BM25_RESCORE, int(wanted or 0))


def match_share(rows: int) -> float:
    """The share of ``rows`` a BM25 candidate's rarest words may cover together:
    ``KEYWORD_CANDIDATE_ROWS`` rows; every word of the query with None."""
    if KEYWORD_CANDIDATE_ROWS is None or rows <= 0:
        return math.inf
    return KEYWORD_CANDIDATE_ROWS / rows


def keyword_max_rows() -> int:
    """``KEYWORD_MAX_ROWS``: the most rows one keyword search ranks."""
    return KEYWORD_MAX_ROWS


def binary_oversample(field: Any, oversample: int | None) -> int | None:
    """How many candidates per row asked for a search of ``field`` takes by Hamming distance
    before re-ranking (``oversample``, else ``BINARY_OVERSAMPLE``); None for
    a search of the float vectors (a field without ``binary_index=True``, or 0)."""
    if not field.binary_index:
        if oversample:
            raise ValueError(
                f"oversample={oversample!r} needs a binary-quantized index: declare the field "
                "with EmbeddingField(..., binary_index=True) and run makemigrations and migrate."
            )
        return None
    value = BINARY_OVERSAMPLE if oversample is None else oversample
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"oversample must be a non-negative integer, got {value!r}.")
    return value or None
