"""BM25 over a list of texts, in memory: the word-matching half of a lexical teacher.

Distillation (``encoder/distillation.py``) asks how well each candidate passage matches a
pseudo-query word for word. The texts are a few thousand passages held by a training run, so
a plain inverted index in numpy is enough.

Words are lower-cased runs of letters and digits; one-character words and common English
function words are dropped. There is no stemming ("cells" and "cell" are two words), which
costs recall on plurals but keeps the scores easy to check by hand.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

import numpy as np

_WORD = re.compile(r"[^\W_]+")
# Common English function words: they match everywhere and tell passages apart by chance.
_FUNCTION_WORDS = """
a about above after again all also am an and any are as at be because been before being
below between both but by can could did do does doing down during each few for from further
had has have having he her here hers herself him himself his how i if in into is it its
itself just may me might more most must my myself no nor not now of off on once only or
other our ours ourselves out over own same shall she should so some such than that the their
theirs them themselves then there these they this those through to too under until up upon
very was we were what when where which while who whom whose why will with within without
would you your yours yourself yourselves
"""
STOP_WORDS = frozenset(_FUNCTION_WORDS.split())


def words(text: str) -> list[str]:
    """The words BM25 counts in ``text``: lower-cased, function words and single characters
    dropped, in order."""
    return [w for w in _WORD.findall(text.lower()) if len(w) > 1 and w not in STOP_WORDS]


class BM25:
    """Okapi BM25 scores of a query against every one of ``documents``.

    ``k1`` sets how fast repeats of a word saturate, ``b`` how much long documents are
    discounted; 1.2 and 0.75 are the usual values. The idf is Lucene's
    ``log(1 + (n - df + 0.5) / (df + 0.5))``, never negative.
    """

    def __init__(self, documents: Sequence[str], k1: float = 1.2, b: float = 0.75) -> None:
        if k1 < 0 or not 0 <= b <= 1:
            raise ValueError(f"BM25 needs k1 >= 0 and 0 <= b <= 1, got k1={k1!r}, b={b!r}.")
        self.size = len(documents)
        counts = [Counter(words(text)) for text in documents]
        lengths = np.array([sum(c.values()) for c in counts], dtype=np.float64)
        average = float(lengths.mean()) if self.size and lengths.any() else 1.0
        norm = k1 * (1 - b + b * lengths / average)  # (documents,)
        postings: dict[str, tuple[list[int], list[float]]] = {}
        for index, count in enumerate(counts):
            for word, tf in count.items():
                ids, tfs = postings.setdefault(word, ([], []))
                ids.append(index)
                tfs.append(tf)
        self._postings: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for word, (ids, tfs) in postings.items():
            idx, tf = np.array(ids), np.array(tfs, dtype=np.float64)
            idf = math.log(1 + (self.size - len(ids) + 0.5) / (len(ids) + 0.5))
            self._postings[word] = (idx, idf * tf * (k1 + 1) / (tf + norm[idx]))

    def scores(self, query: str) -> np.ndarray:
        """``(documents,)`` BM25 scores of ``query``; 0 where a document shares no word."""
        total = np.zeros(self.size, dtype=np.float64)
        for word in set(words(query)):
            if word in self._postings:
                idx, weight = self._postings[word]
                total[idx] += weight
        return total
