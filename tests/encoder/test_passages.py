"""Splitting a text into passages (django_sbert/encoder/passages.py): sentence boundaries, the
window, the overlap, offsets that slice back exactly, texts without sentence punctuation, and
sentences longer than the window. Token counts come from a whitespace splitter (exact, easy
to reason about) and from the real all-MiniLM-L6-v2 tokenizer (what indexing uses)."""

from __future__ import annotations

import re

import pytest

from django_sbert.encoder.passages import Passage, passages_of, sentence_spans, split_passages


def word_spans(text: str) -> list[tuple[int, int]]:
    """A tokenizer whose tokens are the words and punctuation marks of the text."""
    return [m.span() for m in re.finditer(r"\w+|[^\w\s]", text)]


def tokens(text: str) -> int:
    return len(word_spans(text))


def check_offsets(text: str, passages: list[Passage]) -> None:
    for passage in passages:
        assert text[passage.start : passage.end] == passage.text
        assert passage.text == passage.text.strip()


def covered(text: str, passages: list[Passage]) -> bool:
    """Every non-space character of ``text`` lies in some passage."""
    inside = [False] * len(text)
    for passage in passages:
        for i in range(passage.start, passage.end):
            inside[i] = True
    return all(inside[i] or text[i].isspace() for i in range(len(text)))


SENTENCES = [
    f"Sentence {i} tells the story of item {i} in five more words." for i in range(40)
]  # 13 tokens
TEXT = " ".join(SENTENCES)


def test_passages_are_runs_of_whole_sentences_within_the_window():
    passages = split_passages(TEXT, word_spans(TEXT), max_tokens=50, overlap=0)
    check_offsets(TEXT, passages)
    assert len(passages) > 5
    starts = {TEXT.index(s) for s in SENTENCES}
    ends = {TEXT.index(s) + len(s) for s in SENTENCES}
    for passage in passages:
        assert passage.start in starts and passage.end in ends  # sentence boundaries
        assert tokens(passage.text) <= 50  # the window
    for passage in passages[:-1]:  # greedy: no room for one more sentence
        assert tokens(passage.text) > 50 - tokens(SENTENCES[0])
    # Without overlap, consecutive passages meet and do not share a sentence.
    for a, b in zip(passages, passages[1:], strict=False):
        assert a.end < b.start and TEXT[a.end : b.start].isspace()
    assert covered(TEXT, passages)


def test_the_next_passage_repeats_the_last_sentences_that_fit_the_overlap():
    one = tokens(SENTENCES[0])
    passages = split_passages(TEXT, word_spans(TEXT), max_tokens=60, overlap=2 * one)
    check_offsets(TEXT, passages)
    for a, b in zip(passages, passages[1:], strict=False):
        shared = TEXT[b.start : a.end]
        assert a.start < b.start < a.end  # they overlap
        assert tokens(shared) <= 2 * one  # by at most the overlap
        assert shared.count("Sentence") == 2  # whole sentences: as many as fit
    # An overlap smaller than one sentence repeats nothing.
    apart = split_passages(TEXT, word_spans(TEXT), max_tokens=60, overlap=one - 1)
    assert all(a.end < b.start for a, b in zip(apart, apart[1:], strict=False))


def test_a_sentence_longer_than_the_window_is_cut_at_word_boundaries_with_overlap():
    long_sentence = " ".join(f"word{i}" for i in range(300)) + "."
    text = f"A short opening. {long_sentence} A short ending."
    passages = split_passages(text, word_spans(text), max_tokens=40, overlap=8)
    check_offsets(text, passages)
    assert covered(text, passages)
    for passage in passages:
        assert tokens(passage.text) <= 40
        # Cut between words: no passage starts or ends inside one.
        assert passage.start == 0 or not text[passage.start - 1].isalnum()
        assert passage.end == len(text) or not text[passage.end].isalnum()
    pieces = [p for p in passages if "word150" in p.text or "word151" in p.text]
    assert pieces, "the middle of the long sentence is in a passage"
    inner = passages[1:-1]
    for a, b in zip(inner, inner[1:], strict=False):
        assert a.start < b.start < a.end  # pieces of the sentence overlap
        assert tokens(text[b.start : a.end]) <= 8


def test_a_text_without_sentence_punctuation_is_cut_at_line_breaks_then_words():
    lines = [" ".join(f"line{n}w{i}" for i in range(12)) for n in range(10)]
    text = "\n".join(lines)
    assert len(sentence_spans(text)) == 10  # a line break ends a unit
    passages = split_passages(text, word_spans(text), max_tokens=30, overlap=0)
    check_offsets(text, passages)
    assert covered(text, passages)
    assert all(tokens(p.text) <= 30 for p in passages)
    assert all(p.text.startswith("line") and p.text.endswith("w11") for p in passages)
    # One endless line without any punctuation: cut by words.
    words = " ".join(f"w{i}" for i in range(500))
    cut = split_passages(words, word_spans(words), max_tokens=64, overlap=4)
    check_offsets(words, cut)
    assert covered(words, cut)
    assert len(cut) >= 500 // 64 and all(tokens(p.text) <= 64 for p in cut)


def test_sentence_boundaries_skip_abbreviations_and_initials():
    text = 'Mr. Smith met the U.S. envoy in Jan. 2005. "It went well," he said. Then 3 left.'
    spans = [text[a:b] for a, b in sentence_spans(text)]
    assert spans == [
        "Mr. Smith met the U.S. envoy in Jan. 2005.",
        '"It went well," he said.',
        "Then 3 left.",
    ]


@pytest.mark.parametrize("text", ["", "   ", "\n\t "])
def test_an_empty_text_is_one_empty_passage(text):
    passages = split_passages(text, word_spans(text), max_tokens=10, overlap=0)
    assert passages == [Passage(0, len(text), text)]


def test_a_short_text_is_one_passage_without_its_surrounding_whitespace():
    text = "  Rates rise.  "
    passages = split_passages(text, word_spans(text), max_tokens=10, overlap=2)
    assert passages == [Passage(2, 13, "Rates rise.")]


def test_max_passages_keeps_the_first_ones():
    passages = split_passages(TEXT, word_spans(TEXT), max_tokens=30, max_passages=3, overlap=0)
    assert len(passages) == 3 and passages[0].start == 0


@pytest.mark.parametrize(
    ("max_tokens", "overlap", "max_passages"), [(0, 0, None), (10, 10, None), (10, 2, 0)]
)
def test_bad_arguments_are_refused(max_tokens, overlap, max_passages):
    with pytest.raises(ValueError):
        split_passages(TEXT, word_spans(TEXT), max_tokens, overlap, max_passages)


# -- with the real tokenizer -----------------------------------------------------------------

UNICODE = (
    "Zürich’s café owners met İstanbul’s mayor — naïvely, some said. 東京では雨が降った。"
    "Prices rose 5 % in the eurozone 🙂. The central bank (ECB) raised rates again! "
) * 30


def test_real_tokenizer_windows_and_offsets(minilm):
    texts = [TEXT, UNICODE, "word " * 2000, ""]
    split = passages_of(minilm.tokenizer, texts, overlap=32)
    window = minilm.max_seq_length - 2  # [CLS] and [SEP]
    for text, passages in zip(texts, split, strict=True):
        check_offsets(text, passages)
        assert covered(text, passages)
        for passage in passages:
            # Re-tokenized alone, each passage fits the model's window: nothing is truncated.
            assert len(minilm.tokenizer.token_spans([passage.text])[0]) <= window
    assert len(split[0]) > 1 and len(split[2]) > 1
    smaller = passages_of(minilm.tokenizer, [UNICODE], max_tokens=64)[0]
    assert len(smaller) > len(split[1])
    assert all(len(minilm.tokenizer.token_spans([p.text])[0]) <= 64 for p in smaller)


def test_a_prompt_takes_room_in_the_window(minilm):
    plain = passages_of(minilm.tokenizer, [TEXT], overlap=0)[0]
    prompt = "passage: " * 20
    prompt_tokens = len(minilm.tokenizer.token_spans([prompt])[0])  # 40
    prompted = passages_of(minilm.tokenizer, [TEXT], overlap=0, prompt=prompt)[0]
    assert prompted[0].end < plain[0].end
    window = minilm.max_seq_length - 2 - prompt_tokens
    assert all(len(minilm.tokenizer.token_spans([p.text])[0]) <= window for p in prompted)


def test_max_passages_bounds_what_is_tokenized(minilm):
    huge = TEXT * 2000  # about 1.2 million characters
    (passages,) = passages_of(minilm.tokenizer, [huge], max_passages=2)
    assert len(passages) == 2
    check_offsets(huge, passages)
