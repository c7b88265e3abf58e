"""Keys of the previous release: ``RENAMED`` ones are read into their new place, ``RETIRED``
ones are ignored, each with a ``DeprecationWarning`` and check ``django_sbert.W003``, for one
release (the deprecation policy, CHANGELOG.md); ``normalized()`` applies both to a project's
``SBERT`` dict before it is read or checked.
"""

from __future__ import annotations

from typing import Any

# Keys of the previous release, read into their new place for one release (check W003). A
# path names a key inside its groups; "*" any encoder's name.
Path = tuple[str, ...]
RENAMED: dict[Path, Path] = {
    ("SEARCH", "FUSION"): ("SEARCH", "FUSION", "METHOD"),  # a method's name, not a dict
    ("SEARCH", "RRF_K"): ("SEARCH", "FUSION", "RRF_K"),
    ("SEARCH", "CANDIDATES"): ("SEARCH", "FUSION", "CANDIDATES"),
    ("SEARCH", "VECTOR_WEIGHT"): ("SEARCH", "FUSION", "VECTOR_WEIGHT"),
    ("SEARCH", "KEYWORD_WEIGHT"): ("SEARCH", "FUSION", "KEYWORD_WEIGHT"),
    ("SEARCH", "TUNED_FUSION"): ("SEARCH", "FUSION", "TUNED"),
    ("SEARCH", "KEYWORD_MATCH"): ("SEARCH", "KEYWORD", "MATCH"),
    ("SEARCH", "KEYWORD_MAX_DF"): ("SEARCH", "KEYWORD", "MAX_DF"),
    ("SEARCH", "BM25_K1"): ("SEARCH", "KEYWORD", "K1"),
    ("SEARCH", "BM25_B"): ("SEARCH", "KEYWORD", "B"),
    ("SEARCH", "BM25_WEIGHTS"): ("SEARCH", "KEYWORD", "WEIGHTS"),
    ("SEARCH", "SUGGEST_K"): ("SEARCH", "SUGGEST", "K"),
    ("API", "DEFAULT_K"): ("SEARCH", "K"),
    ("API", "MAX_QUERY_LENGTH"): ("SEARCH", "MAX_QUERY_LENGTH"),
    ("API", "THROTTLE_RATES"): ("RATES",),
    ("HEALTH", "THROTTLE_RATE"): ("RATES", "health"),
    ("FEEDBACK", "CLIENT_RATE"): ("RATES", "logging"),
    ("FEEDBACK", "CLICK_THROTTLE_RATE"): ("RATES", "clicks"),
    ("API", "SEARCH_PERMISSION_CLASSES"): ("API", "PERMISSION_CLASSES", "search"),
    ("API", "EMBED_PERMISSION_CLASSES"): ("API", "PERMISSION_CLASSES", "embed"),
    ("API", "SCHEMA_PERMISSION_CLASSES"): ("API", "PERMISSION_CLASSES", "schema"),
    ("FEEDBACK", "SAMPLE_RATE"): ("FEEDBACK", "LOG"),  # LOG=True with a rate: LOG=rate
}
# Keys of the previous release that are now a constant of the module that uses it, a flag of
# the command that reads it, or an argument: ignored, with what replaced them (check W003).
RETIRED: dict[Path, str] = {
    ("QUERY_CACHE_SIZE",): "each process keeps 256 query vectors",
    ("MODEL_STORAGE_TIMEOUT",): "each model storage call of a fetch may take 30 s",
    ("MODEL_FETCH_BACKOFF",): "a failed fetch is retried after 60 s, doubling per failure",
    ("ENCODERS", "*", "QUERY_THREADS"): "one torch thread encodes one search query",
    ("ENCODERS", "*", "MAX_CHUNKS"): "a row is encoded from at most 64 windows",
    ("SEARCH", "ITERATIVE_SCAN"): '"relaxed_order"; similar_to(iterative_scan=...) per query',
    ("SEARCH", "MAX_SCAN_TUPLES"): "an iterative scan gives up after 20,000 tuples",
    ("SEARCH", "ENABLE_SEQSCAN"): "a vector search always keeps the planner on the index",
    ("SEARCH", "KEYWORD_RANK"): "keyword search ranks by BM25",
    ("SEARCH", "BM25_RESCORE"): "100 BM25 candidates (at least k) get the exact score",
    ("SEARCH", "KEYWORD_CANDIDATE_ROWS"): 'match="any" takes rare words found in 2,000 rows',
    ("SEARCH", "KEYWORD_MAX_ROWS"): "a keyword search ranks at most 10,000 matching rows",
    ("SEARCH", "KEYWORD_STATISTICS"): "migrate sets each keyword column's statistics to 1000",
    ("SEARCH", "SUGGEST_MIN_CHARS"): "suggest() needs 2 characters",
    ("SEARCH", "SUGGEST_VECTOR_MIN_CHARS"): "suggest() searches vectors from 4 characters",
    ("SEARCH", "SUGGEST_CANDIDATES"): "suggest() fuses 20 rows of each side",
    ("SEARCH", "SUGGEST_MAX_ROWS"): "suggest() ranks at most 1,000 prefix matches",
    ("SEARCH", "PASSAGES_PER_ROW"): "a passage search fetches 4 passages per row asked for",
    ("SEARCH", "BINARY_OVERSAMPLE"): "4 Hamming candidates per row; similar_to(oversample=...)",
    ("SEARCH", "SIMILAR_CACHE_SECONDS"): "{% sbert_similar %} caches for 300 s",
    ("INDEX", "MAINTENANCE_WORK_MEM"): "sbert_index --maintenance-work-mem (default 1GB)",
    ("INDEX", "PARALLEL_WORKERS"): "sbert_index --parallel-workers",
    ("TRAINING", "PRECISION"): 'runs train in precision "auto" (finetuning.execution)',
    ("TRAINING", "MAX_SEQ_LENGTH"): "runs train on 128 tokens per text (finetuning.execution)",
    ("TRAINING", "LENGTH_BUCKETS"): "runs batch by text length (finetuning.execution)",
    ("TRAINING", "MINING_ROWS"): "a run mines negatives from at most 50,000 rows",
    ("TRAINING", "EVAL_DISTRACTORS"): "eval queries are ranked among 1,000 distractors",
    ("TRAINING", "GATE_TOLERANCE"): "the gate refuses a candidate worse than the active one",
    ("TRAINING", "PROMOTION_RESENDS"): "a stalled promotion is sent again 3 times at most",
    ("TRAINING", "PAIRS_MAX_FILE_BYTES"): "a pairs file is read up to 20 MB",
    ("ADAPT",): "a content run's loss and options are chosen per run (sbert_train --loss)",
    ("API", "SUGGEST_MAX_K"): "suggest/ returns at most 20 suggestions",
    ("API", "SUGGEST_MAX_QUERY_LENGTH"): "suggest/ reads 200 characters of q",
    ("API", "FILTER_MAX_K"): "the filter pages through MAX_K rows",
    ("API", "MAX_PAGE_SIZE"): "a page holds at most 100 rows",
    ("API", "PAGINATION_CLASS"): "subclass the view and set pagination_class",
    ("API", "EMBED_MAX_TEXTS"): "embed/ takes 64 texts per request",
    ("API", "EMBED_MAX_TEXT_LENGTH"): "embed/ takes 5,000 characters per text",
    ("API", "MAX_BODY_BYTES"): "request bodies over 2 MiB get 413",
    ("EVALUATION", "PRECISION_LEVEL"): "an evaluation's threshold keeps half its rows relevant",
    ("EVALUATION", "SCHEDULE_HOURS"): "evaluation_schedule(hours=24)",
    ("FEEDBACK", "MAX_QUERY_LENGTH"): "the log keeps 200 characters of a query",
    ("FEEDBACK", "BOT_USER_AGENTS"): "bots are known by feedback.visitors.BOT_USER_AGENTS",
    ("FEEDBACK", "TOKEN_MAX_AGE"): "a click token is valid for a day",
    ("FEEDBACK", "LOOP_HOURS"): "feedback_loop_schedule(hours=24)",
    ("QUERY_SERVER", "MAX_BATCH"): "sbert_query_server --max-batch",
    ("QUERY_SERVER", "WINDOW_MS"): "sbert_query_server --window-ms",
    ("QUERY_SERVER", "MAX_QUEUE"): "sbert_query_server --max-queue",
    ("QUERY_SERVER", "RETRY_AFTER"): "sbert_query_server --retry-after",
    ("QUERY_SERVER", "CACHE_SIZE"): "sbert_query_server --cache-size",
    ("QUERY_SERVER", "THREADS"): "sbert_query_server --threads",
    ("QUERY_SERVER", "TIMEOUT"): "a web process waits 2 s for the query server",
    ("QUERY_SERVER", "RETRY_SECONDS"): "a web process asks an absent server again after 5 s",
}


def shown(path: Path) -> str:
    """``SBERT['SEARCH']['RRF_K']``: a path as a project writes it."""
    return "SBERT" + "".join(f"[{part!r}]" for part in path)


def _copy(value: Any) -> Any:
    return {k: _copy(v) for k, v in value.items()} if isinstance(value, dict) else value


def _expand(user: dict[str, Any], path: Path) -> list[Path]:
    """``path`` with ``"*"`` replaced by each encoder name the project gives."""
    if "*" not in path:
        return [path]
    at = path.index("*")
    inner = user
    for part in path[:at]:
        inner = inner.get(part) if isinstance(inner, dict) else None
    names = list(inner) if isinstance(inner, dict) else []
    return [(*path[:at], name, *path[at + 1 :]) for name in names]


def _pop(user: dict[str, Any], path: Path) -> tuple[bool, Any]:
    """Remove ``path`` from ``user`` (a copy the caller owns): (found, value)."""
    inner = user
    for part in path[:-1]:
        inner = inner.get(part) if isinstance(inner, dict) else None
        if not isinstance(inner, dict):
            return False, None
    if path[-1] not in inner:
        return False, None
    return True, inner.pop(path[-1])


def _put(user: dict[str, Any], path: Path, value: Any) -> None:
    """Set ``path`` to ``value`` unless the project spells it the new way too (it wins; two
    dicts are merged, the new one over the earlier)."""
    inner = user
    for part in path[:-1]:
        if not isinstance(inner.get(part), dict):
            inner[part] = {}
        inner = inner[part]
    key = path[-1]
    if key not in inner:
        inner[key] = value
    elif isinstance(inner[key], dict) and isinstance(value, dict):
        inner[key] = {**value, **inner[key]}
    elif key == "LOG" and inner[key] is True and path[0] == "FEEDBACK":
        inner[key] = value  # LOG on with the share SAMPLE_RATE gave


def _present(user: dict[str, Any], path: Path) -> bool:
    inner: Any = user
    for part in path:
        if not isinstance(inner, dict) or part not in inner:
            return False
        inner = inner[part]
    return True


def normalized(user: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """``user`` with earlier keys moved to their new place (or dropped), and a note for each."""
    found = [
        (old, new)
        for key, new in [*RENAMED.items(), *RETIRED.items()]
        for old in _expand(user, key)
        if _present(user, old)
    ]
    if not found:
        return user, []
    result, notes = _copy(user), []
    for old, new in found:
        if isinstance(new, str):
            _pop(result, old)
            notes.append(f"{shown(old)} is no longer a setting ({new}): remove it.")
            continue
        present, value = _pop(result, old)
        if isinstance(value, dict) and new[: len(old)] == old:
            _put(result, old, value)  # already the new group (SEARCH["FUSION"] as a dict)
            continue
        _put(result, new, value)
        notes.append(f"{shown(old)} is now {shown(new)}: rename it.")
    return result, notes
