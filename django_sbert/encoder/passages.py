"""Split a long text into passages on sentence boundaries, each fitting the encoder's window.

A bi-encoder reads a fixed number of tokens (all-MiniLM-L6-v2: 256); everything after that is
invisible to a vector of the whole text. Indexing a document by its passages, and ranking it
by its best passage (max-sim), keeps every part of it searchable::

    spans = token_spans_of(text)        # (start, end) characters of each token, in order
    split_passages(text, spans, max_tokens=254, overlap=32)
    # [Passage(start=0, end=1203, text="..."), Passage(start=1108, end=2290, text="..."), ...]

Sentences are the units (``sentences.py``); a passage is a greedy run of whole sentences whose
tokens (counted with the encoder's own tokenizer) fit ``max_tokens``, the next one starting
with the last sentences that fit in ``overlap`` tokens; a longer sentence is cut into
overlapping pieces, at word boundaries where it can be (docs/passages.md, "How a text is
split"). ``text[p.start:p.end] == p.text`` for every passage, and a blank text gives one empty
passage, so every row has at least one.

This module is plain Python: the token spans come from the caller (``TextTokenizer
.token_spans``), which keeps the splitter testable with any tokenizer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .sentences import sentence_spans, trim
from .tokenization import CHARS_PER_TOKEN, TextTokenizer


@dataclass(frozen=True)
class Passage:
    """A slice of a source text: ``source[start:end] == text`` (character offsets)."""

    start: int
    end: int
    text: str


def _pieces(
    token_spans: Sequence[tuple[int, int]], first: int, last: int, max_tokens: int, overlap: int
) -> list[tuple[int, int]]:
    """Token ranges ``[a, b)`` covering tokens ``first..last`` in windows of ``max_tokens``,
    cut before a token that starts a word when one lies in the window's second half."""
    pieces = []
    a = first
    while True:
        b = min(a + max_tokens, last)
        if b < last:
            # Cut before the last token in (a + max_tokens / 2, b] that follows whitespace.
            for cut in range(b, a + max_tokens // 2, -1):
                if token_spans[cut][0] > token_spans[cut - 1][1]:
                    b = cut
                    break
        pieces.append((a, b))
        if b >= last:
            return pieces
        a = max(b - overlap, a + 1)


def split_passages(
    text: str,
    token_spans: Sequence[tuple[int, int]],
    max_tokens: int,
    overlap: int = 32,
    max_passages: int | None = None,
) -> list[Passage]:
    """Split ``text`` into passages of whole sentences that hold at most ``max_tokens`` tokens.

    ``token_spans`` are the ``(start, end)`` character offsets of the text's tokens in order
    (special tokens left out), as the encoder's tokenizer produced them; a token belongs to
    the sentence its first character falls in. ``overlap`` tokens of whole sentences (or of a
    long sentence's pieces) repeat at the start of the next passage. ``max_passages`` keeps
    the first passages only. See the module docstring for the rules.
    """
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}.")
    if not 0 <= overlap < max_tokens:
        raise ValueError(f"overlap must be in [0, max_tokens), got {overlap}.")
    if max_passages is not None and max_passages < 1:
        raise ValueError(f"max_passages must be >= 1 or None, got {max_passages}.")
    sentences = sentence_spans(text)
    if not sentences or not token_spans:
        start, end = trim(text, 0, len(text))
        if start == end:
            return [Passage(0, len(text), text)]  # nothing to read: one passage, the text
        return [Passage(start, end, text[start:end])]
    starts = [span[0] for span in token_spans]
    # Units: (first token, end token, start char, end char); a sentence over max_tokens is cut.
    units: list[tuple[int, int, int, int]] = []
    token = 0
    for index, (s_start, s_end) in enumerate(sentences):
        bound = sentences[index + 1][0] if index + 1 < len(sentences) else len(text) + 1
        first = token
        while token < len(starts) and starts[token] < bound:
            token += 1
        if token == first:  # a sentence with no token of its own (punctuation the model drops)
            if units:
                a, b, c_start, _ = units[-1]
                units[-1] = (a, b, c_start, s_end)
            else:
                units.append((first, first, s_start, s_end))
            continue
        if token - first <= max_tokens:
            units.append((first, token, s_start, s_end))
            continue
        for a, b in _pieces(token_spans, first, token, max_tokens, overlap):
            c_start = s_start if a == first else token_spans[a][0]
            c_end = s_end if b == token else token_spans[b - 1][1]
            units.append((a, b, *trim(text, c_start, c_end)))
    passages: list[Passage] = []
    i = 0
    while i < len(units):
        j = i + 1
        while j < len(units) and units[j][1] - units[i][0] <= max_tokens:
            j += 1
        start, end = units[i][2], units[j - 1][3]
        passages.append(Passage(start, end, text[start:end]))
        if j >= len(units) or (max_passages is not None and len(passages) >= max_passages):
            break
        # The next passage starts with the last units of this one that fit in `overlap`.
        k = j
        while k - 1 > i and units[j - 1][1] - units[k - 1][0] <= overlap:
            k -= 1
        i = k
    return passages


def passages_of(
    tokenizer: TextTokenizer,
    texts: Sequence[str],
    *,
    max_tokens: int | None = None,
    overlap: int = 32,
    max_passages: int | None = None,
    prompt: str | None = None,
) -> list[list[Passage]]:
    """Each text's passages, counted with ``tokenizer`` (a model's ``encoder.tokenizer``).

    ``max_tokens`` defaults to the window: ``max_seq_length`` less the special tokens and
    ``prompt``'s tokens (the prompt the passages will be encoded with); a larger value is cut
    to it.

    Memory is bounded per text, whatever its length: the texts are tokenized one at a time,
    and with ``max_passages`` only the tokens that many passages can reach are kept
    (``token_budget``), from a prefix of at most ``CHARS_PER_TOKEN`` characters per token.
    """
    width = tokenizer.content_width(prompt)
    if width < 1:
        raise ValueError("The prompt leaves no room for text within max_seq_length.")
    limit = width if max_tokens is None else min(int(max_tokens), width)
    budget = None if max_passages is None else token_budget(limit, max_passages)
    out = []
    for text in texts:
        if budget is not None:
            text = text[: budget * CHARS_PER_TOKEN]
        (spans,) = tokenizer.token_spans([text], budget)
        if budget is not None and len(spans) == budget:
            # Cut where the kept tokens end: a sentence without tokens of its own would
            # otherwise swallow the rest of the text into the last passage.
            text = text[: spans[-1][1]]
        out.append(split_passages(text, spans, limit, min(overlap, limit - 1), max_passages))
    return out


def token_budget(max_tokens: int, max_passages: int) -> int:
    """Tokens of a text that decide its first ``max_passages`` passages of ``max_tokens``.

    Those passages cover at most ``max_passages x max_tokens`` tokens (each holds at most
    ``max_tokens`` and the next starts inside it); one passage's worth more completes any
    sentence that starts inside them, so the passages are those of the whole text.
    """
    return (max_passages + 1) * max_tokens
