"""Pseudo-queries cut from unlabelled documents: retrieval pairs without labels.

Two ways to make pairs from a site's documents (docs/training.md, "pseudo-queries"):
``"ict"``, the inverse cloze task (Lee, Chang and Toutanova 2019: one sentence is the query,
the rest of the document its positive), and ``"crop"``, contrastive cropping (Izacard et al.
2022: two random spans of one document). Every pair keeps the character offsets its texts were
cut at; a document too short to split is listed in ``PseudoPairs.too_short``, not dropped
silently. Everything is seeded.

::

    built = pseudo_pairs(abstracts, method="ict", seed=0)
    fit(encoder, [(p.query, p.positive) for p in built.pairs], loss="mnrl")
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from .sentences import sentence_spans

METHODS = ("ict", "crop")
_WORD = re.compile(r"\S+")

Span = tuple[int, int]  # [start, end) character offsets into the document


@dataclass(frozen=True)
class PseudoPair:
    """A query cut from document ``document`` (its index) and the positive it should find."""

    query: str
    positive: str
    document: int
    query_span: Span
    positive_spans: tuple[Span, ...]  # ict: the text before and after the query sentence


@dataclass
class PseudoPairs:
    """What ``pseudo_pairs`` built: the pairs, and the documents too short to give one."""

    pairs: list[PseudoPair] = field(default_factory=list)
    too_short: list[int] = field(default_factory=list)  # indexes of the documents left out


def word_spans(text: str) -> list[Span]:
    """``[start, end)`` of each run of non-space characters of ``text``."""
    return [(m.start(), m.end()) for m in _WORD.finditer(text)]


def inverse_cloze(
    text: str,
    rng: random.Random,
    *,
    min_query_chars: int = 20,
    keep_query: float = 0.0,
) -> tuple[Span, tuple[Span, ...]] | None:
    """(query span, positive spans) for one document, or None when it cannot be split.

    The query is a random sentence of at least ``min_query_chars`` characters; the positive is
    every other sentence, as the spans before and after it. With probability ``keep_query`` the
    positive is the whole document, query included (ICT's paper keeps it 10% of the time, so
    that word overlap still counts for something). A document of fewer than two sentences, or
    with no sentence long enough, gives None.
    """
    sentences = sentence_spans(text)
    if len(sentences) < 2:
        return None
    choices = [i for i, (a, b) in enumerate(sentences) if b - a >= min_query_chars]
    if not choices:
        return None
    i = rng.choice(choices)
    query = sentences[i]
    if keep_query and rng.random() < keep_query:
        return query, ((sentences[0][0], sentences[-1][1]),)
    before = (sentences[0][0], sentences[i - 1][1]) if i > 0 else None
    after = (sentences[i + 1][0], sentences[-1][1]) if i + 1 < len(sentences) else None
    return query, tuple(span for span in (before, after) if span is not None)


def random_crops(
    text: str,
    rng: random.Random,
    *,
    min_words: int = 8,
    max_ratio: float = 0.5,
) -> tuple[Span, Span] | None:
    """Two random word spans of one document, each of ``min_words`` words up to ``max_ratio``
    of the document; None for a document of fewer than ``2 * min_words`` words.

    The spans are drawn independently, so they may overlap (Contriever's crops do too), but
    an exact repeat of the first is drawn again.
    """
    words = word_spans(text)
    if len(words) < 2 * min_words:
        return None
    longest = max(min_words, int(len(words) * max_ratio))

    def crop() -> Span:
        length = rng.randint(min_words, longest)
        first = rng.randint(0, len(words) - length)
        return words[first][0], words[first + length - 1][1]

    first = crop()
    for _ in range(8):  # two equal crops teach nothing: draw the second again
        second = crop()
        if second != first:
            break
    return first, second


def pseudo_pairs(
    documents: Sequence[str],
    *,
    method: str = "ict",
    seed: int = 0,
    min_query_chars: int = 20,
    keep_query: float = 0.0,
    min_words: int = 8,
    max_ratio: float = 0.5,
) -> PseudoPairs:
    """One (query, positive) pair per document that can be split, by ``method``.

    ``method`` is ``"ict"`` (a sentence against the rest: ``inverse_cloze``) or ``"crop"`` (two
    random spans: ``random_crops``). Documents that give no pair are listed in ``too_short``.
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}.")
    if not 0 <= keep_query <= 1:
        raise ValueError(f"keep_query must be in [0, 1], got {keep_query!r}.")
    if min_words < 1:
        raise ValueError(f"min_words must be >= 1, got {min_words!r}.")
    if not 0 < max_ratio <= 1:
        raise ValueError(f"max_ratio must be in (0, 1], got {max_ratio!r}.")
    rng = random.Random(seed)
    built = PseudoPairs()
    for index, text in enumerate(documents):
        text = str(text)
        if method == "ict":
            cut = inverse_cloze(text, rng, min_query_chars=min_query_chars, keep_query=keep_query)
            if cut is None:
                built.too_short.append(index)
                continue
            query, rest = cut
        else:
            crops = random_crops(text, rng, min_words=min_words, max_ratio=max_ratio)
            if crops is None:
                built.too_short.append(index)
                continue
            query, other = crops
            rest = (other,)
        positive = " ".join(text[a:b] for a, b in rest)
        built.pairs.append(PseudoPair(text[query[0] : query[1]], positive, index, query, rest))
    return built


def hold_out(
    pairs: Sequence[PseudoPair], fraction: float, seed: int = 0, most: int | None = None
) -> tuple[list[PseudoPair], list[PseudoPair]]:
    """(train, held out): a seeded ``fraction`` of the pairs (at most ``most``) set aside to
    evaluate on, the rest to train on; both keep the input order."""
    if not 0 <= fraction < 1:
        raise ValueError(f"fraction must be in [0, 1), got {fraction!r}.")
    count = int(len(pairs) * fraction)
    if most is not None:
        count = min(count, most)
    chosen = set(random.Random(seed).sample(range(len(pairs)), count))
    train = [p for i, p in enumerate(pairs) if i not in chosen]
    held = [p for i, p in enumerate(pairs) if i in chosen]
    return train, held
