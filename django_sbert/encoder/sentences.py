"""Sentences of a text, as character spans: the units passages are made of
(``passages.py``) and the pieces pseudo-queries are cut from (``pseudo_queries.py``).

A text is cut after ``.``, ``!``, ``?`` (and their closing quotes or brackets) when the next
sentence starts with a capital, a digit or a quote, and at every line break (a site's source
fields are joined by one: a title is a sentence of its own); common abbreviations and
initials ("Mr.", "U.S.", "e.g.") do not end a sentence, nor does "3.5 mg".
"""

from __future__ import annotations

import re

# Words that end with a full stop without ending a sentence ("Mr. Smith", "Gen. Lee").
ABBREVIATIONS = frozenset(
    {
        "mr",
        "mrs",
        "ms",
        "dr",
        "prof",
        "sr",
        "jr",
        "st",
        "mt",
        "vs",
        "etc",
        "eg",
        "ie",
        "cf",
        "al",
        "vol",
        "gen",
        "gov",
        "sen",
        "rep",
        "lt",
        "col",
        "capt",
        "sgt",
        "maj",
        "inc",
        "ltd",
        "corp",
        "dept",
        "fig",
        "approx",
        "jan",
        "feb",
        "mar",
        "apr",
        "jun",
        "jul",
        "aug",
        "sep",
        "sept",
        "oct",
        "nov",
        "dec",
    }
)

# The end of a sentence: its punctuation, closing quotes or brackets, then whitespace before
# a capital, a digit, an opening quote or bracket. Group "end" ends the sentence. A match
# starts only at the first mark of a run: tried from every mark of "!!!..." it would cost
# time quadratic in the run's length (seconds for 20k marks).
_SENTENCE_END = re.compile(
    r"(?<![.!?\u2026\u3002\uff01\uff1f])(?P<end>[.!?\u2026\u3002\uff01\uff1f]+[\"'\u201d\u2019)\]]*)\s+"
    r"(?=[\"'\u201c\u2018(\[]?[0-9A-Z\u00c0-\u00de\u0391-\u03a9\u0410-\u042f])"
)
_LINE_BREAK = re.compile(r"[ \t]*(?:\r\n|\r|\n)\s*")
_WORD_BEFORE = re.compile(r"([A-Za-z][A-Za-z.]*)\.$")


def _is_abbreviation(text: str, end: int) -> bool:
    """Whether the full stop just before ``end`` follows an abbreviation or an initial."""
    if end < 1 or text[end - 1] != ".":
        return False
    match = _WORD_BEFORE.search(text, max(0, end - 12), end)
    if match is None:
        return False
    word = match.group(1)
    # "U.S." or "J." (initials), or a listed abbreviation ("Mr.", "e.g.").
    if len(word.replace(".", "")) == 1 or re.fullmatch(r"(?:[A-Za-z]\.)+[A-Za-z]", word):
        return True
    return word.replace(".", "").lower() in ABBREVIATIONS


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` of each sentence of ``text``, whitespace trimmed, in order.

    Cuts at sentence punctuation followed by a likely sentence start, and at line breaks.
    """
    cuts = {0, len(text)}
    for match in _SENTENCE_END.finditer(text):
        end = match.end("end")
        if not _is_abbreviation(text, end):
            cuts.add(end)
    for match in _LINE_BREAK.finditer(text):
        cuts.add(match.start())
    spans = []
    edges = sorted(cuts)
    for left, right in zip(edges, edges[1:], strict=False):
        start, end = trim(text, left, right)
        if start < end:
            spans.append((start, end))
    return spans


def trim(text: str, start: int, end: int) -> tuple[int, int]:
    """``(start, end)`` narrowed to leave out the white space at both ends."""
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end
