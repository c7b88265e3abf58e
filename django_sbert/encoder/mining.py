"""Hard negatives for ``mnrl``: for each (anchor, positive), a text the encoder ranks high for
the anchor that is not a positive.

In-batch negatives are mostly easy (a random other document of the batch); a hard negative
makes each step teach the fine distinction a search actually has to make. The risk is a false
negative: an unlabeled text that is in fact relevant. Candidates are therefore filtered the
"positive-aware" way of NV-Retriever (Moreira et al. 2024): a candidate scoring at least
``max_ratio`` times the anchor's positive is presumed relevant and skipped, as is every text
given as a positive of the same anchor, as is every text that contains one (the row a content
pair was cut from). The negatives are the best-ranked candidates left, however far down the
ranking: a pair whose best-ranked texts all score near its positive is the one the model has
most to learn from (docs/training.md, "Hard negatives").
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import numpy as np

from .metrics import Encodes

# With ``top_k=None`` the best-ranked FIRST_LOOK texts are searched first (one partial sort for
# all anchors); only a pair that finds too few negatives there sorts the whole corpus.
FIRST_LOOK = 50


def mine_hard_negatives(
    encoder: Encodes,
    pairs: Sequence[tuple[str, str]],
    corpus: Sequence[str],
    *,
    max_ratio: float = 0.95,
    top_k: int | None = None,
    batch_size: int = 32,
    corpus_vectors: np.ndarray | None = None,
    negatives: int = 1,
) -> list[tuple[str, ...]]:
    """``(anchor, positive, hard_negative)`` triples for the pairs that have a candidate
    (``(anchor, positive, negative_1, ..., negative_n)`` with ``negatives=n``).

    ``corpus`` holds the texts negatives are drawn from (positives may be among them).
    ``top_k``: only the ``top_k`` best-ranked texts are candidates (None: every text). A pair
    whose candidates hold fewer than ``negatives`` texts that are neither positives nor too
    close to its positive is left out.
    ``corpus_vectors`` ((len(corpus), dim), unit length, by this encoder) skips encoding the
    corpus: the stored vectors of a site's rows, for instance.
    """
    if not 0 < max_ratio <= 1:
        raise ValueError(f"max_ratio must be in (0, 1], got {max_ratio}.")
    if top_k is not None and top_k < 1:
        raise ValueError(f"top_k must be >= 1 or None, got {top_k}.")
    if negatives < 1 or (top_k is not None and negatives > top_k):
        raise ValueError(f"negatives must be from 1 to top_k ({top_k}), got {negatives}.")
    pairs = [(str(a), str(p)) for a, p in pairs]
    given: np.ndarray | None = None
    if corpus_vectors is not None:
        given = np.asarray(corpus_vectors, dtype=np.float32)
        if given.ndim != 2 or len(given) != len(corpus):
            raise ValueError(
                f"corpus_vectors must hold one vector per corpus text: {len(corpus)} texts, "
                f"vectors of shape {given.shape}."
            )
        first: dict[str, int] = {}  # each distinct text's first row, in corpus order
        for row, text in enumerate(corpus):
            first.setdefault(text, row)
        given = given[list(first.values())]
    texts = list(dict.fromkeys(corpus))
    if not pairs or not texts:
        return []
    positives: dict[str, set[str]] = {}
    for anchor, positive in pairs:
        positives.setdefault(anchor, set()).add(positive)
    anchors = list(positives)

    def embed(items: list[str]) -> np.ndarray:
        return np.asarray(encoder.encode(items, batch_size=batch_size, normalize=True))

    anchor_vectors = dict(zip(anchors, embed(anchors), strict=True))
    # Positives are usually corpus texts too: encode each distinct text once.
    in_corpus = set(texts)
    extra = list(dict.fromkeys(p for _, p in pairs if p not in in_corpus))
    if given is None:
        vectors = embed(texts + extra)
    else:
        vectors = np.concatenate([given, embed(extra)]) if extra else given
    corpus_vectors = vectors[: len(texts)]  # (n, dim)
    positive_vectors = dict(zip(texts + extra, vectors, strict=True))
    width = min(FIRST_LOOK if top_k is None else top_k, len(texts))
    scores = np.stack([anchor_vectors[a] for a in anchors]) @ corpus_vectors.T  # (anchors, n)
    best = np.argpartition(-scores, width - 1, axis=1)[:, :width]
    rows = {anchor: row for row, anchor in enumerate(anchors)}

    def ranking(anchor: str, window: np.ndarray | None = None) -> Iterator[tuple[str, float]]:
        """(text, score) of ``window``'s corpus rows (None: all) for ``anchor``, best first."""
        row = scores[rows[anchor]]
        if window is None:
            order = np.argsort(-row, kind="stable")
        else:
            order = window[np.argsort(-row[window], kind="stable")]
        return ((texts[i], float(row[i])) for i in order)

    ranked = {anchor: list(ranking(anchor, best[rows[anchor]])) for anchor in anchors}
    examples = []
    for anchor, positive in pairs:
        ceiling = max_ratio * float(anchor_vectors[anchor] @ positive_vectors[positive])
        found = _below(ranked[anchor], ceiling, positives[anchor], negatives)
        if len(found) < negatives and top_k is None and width < len(texts):
            # The window's texts are all presumed relevant (or positives): the model ranks
            # this positive low, so the pair has the most to teach. Look further down.
            found = _below(ranking(anchor), ceiling, positives[anchor], negatives)
        if len(found) == negatives:
            examples.append((anchor, positive, *found))
    return examples


def _below(
    ranked: Iterable[tuple[str, float]], ceiling: float, positives: set[str], negatives: int
) -> list[str]:
    """The first ``negatives`` texts of ``ranked`` that score below ``ceiling`` and hold no
    positive (fewer if there are not that many)."""
    found: list[str] = []
    for text, score in ranked:
        if score < ceiling and not _holds_a_positive(text, positives):
            found.append(text)
            if len(found) == negatives:
                break
    return found


def _holds_a_positive(text: str, positives: set[str]) -> bool:
    """Whether ``text`` is one of ``positives`` or contains one."""
    return any(positive in text for positive in positives)
