"""Tokenize texts into packed token rows, and pad rows into model batches.

All texts are tokenized in one call into Rust (``tokenizers.Tokenizer.encode_batch``), kept as
one flat id array plus offsets, and padded per batch with numpy only: no per-text Python in the
encode loop. The two ``tokenizers.Tokenizer`` copies are configured once and never mutated
afterwards, which makes concurrent use from several threads safe (mutating truncation or
padding while another thread encodes raises "Already borrowed").
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from itertools import chain

import numpy as np
from tokenizers import Encoding, Tokenizer

logger = logging.getLogger("django_sbert.encoder")

# The tokenizer sees at most this many characters per token a text can still use: it tokenizes
# a whole string before truncating, so a 20 MB text would cost seconds and gigabytes for 256
# tokens. English runs at 4-5 characters per token; only texts with long runs of whitespace or
# of one unsplittable "word" (one [UNK]) use more.
CHARS_PER_TOKEN = 32
# Batches are padded to a width in a short list (see bucket_width), not to any length: the
# bf16 matrix multiplies (oneDNN) keep state for every input shape they have seen, so a worker
# fed every length from 1 to 256 grows by hundreds of MB (docs/benchmarks.md, Memory).
EXACT_WIDTHS = 32


@dataclass(frozen=True)
class TokenRows:
    """Token id sequences packed into one array; ``owner[i]`` is the text row ``i`` came from."""

    ids: np.ndarray  # (total_tokens,) int64
    starts: np.ndarray  # (rows,) offset of each row in ``ids``
    lengths: np.ndarray  # (rows,) tokens per row, special tokens included
    owner: np.ndarray  # (rows,) index of the input text

    def __len__(self) -> int:
        return len(self.lengths)


def _pack(sequences: list[list[int]], owner: np.ndarray) -> TokenRows:
    lengths = np.fromiter((len(s) for s in sequences), dtype=np.int64, count=len(sequences))
    starts = np.zeros(len(sequences), dtype=np.int64)
    if len(sequences) > 1:
        np.cumsum(lengths[:-1], out=starts[1:])
    ids = np.fromiter(chain.from_iterable(sequences), dtype=np.int64, count=int(lengths.sum()))
    return TokenRows(ids=ids, starts=starts, lengths=lengths, owner=owner)


def _pack_arrays(sequences: list[np.ndarray], owner: np.ndarray) -> TokenRows:
    """``_pack`` for rows that are int64 arrays already (no Python int per token)."""
    lengths = np.fromiter((len(s) for s in sequences), dtype=np.int64, count=len(sequences))
    starts = np.zeros(len(sequences), dtype=np.int64)
    if len(sequences) > 1:
        np.cumsum(lengths[:-1], out=starts[1:])
    ids = np.concatenate(sequences) if sequences else np.zeros(0, dtype=np.int64)
    return TokenRows(ids=ids, starts=starts, lengths=lengths, owner=owner)


def _cut(texts: list[str], limit: int) -> list[str]:
    """Each text cut to ``limit`` characters (the short ones as they are, not copied)."""
    return [t[:limit] if len(t) > limit else t for t in texts]


class TextTokenizer:
    """A sentence-transformers style tokenizer: truncation at ``max_seq_length``, no padding."""

    def __init__(
        self, backend: Tokenizer, max_seq_length: int, pad_id: int, lowercase: bool
    ) -> None:
        self.max_seq_length = max_seq_length
        self.pad_id = pad_id
        self.lowercase = lowercase
        # tokenizer.json may carry its own truncation/padding (all-MiniLM-L6-v2's pads to 128):
        # override both on private copies.
        self._truncating = Tokenizer.from_str(backend.to_str())
        self._truncating.no_padding()
        self._truncating.enable_truncation(max_seq_length)
        self._full = Tokenizer.from_str(backend.to_str())
        self._full.no_padding()
        self._full.no_truncation()
        probe = self._full.encode("a")
        specials = probe.special_tokens_mask
        first = specials.index(0) if 0 in specials else len(specials)
        last = len(specials) - 1 - specials[::-1].index(0) if 0 in specials else -1
        self._lead = list(probe.ids[:first])  # e.g. [CLS]
        self._trail = list(probe.ids[last + 1 :])  # e.g. [SEP]

    def truncating_at(self, max_seq_length: int) -> TextTokenizer:
        """A tokenizer like this one that cuts rows at ``max_seq_length`` tokens (at most this
        one's): fine-tuning may read shorter texts than the model serves with."""
        if not isinstance(max_seq_length, int) or max_seq_length < 2:
            raise ValueError(f"max_seq_length must be a whole number >= 2, got {max_seq_length!r}.")
        backend = Tokenizer.from_str(self._full.to_str())
        return TextTokenizer(
            backend, min(max_seq_length, self.max_seq_length), self.pad_id, self.lowercase
        )

    def _prepare(self, texts: list[str]) -> list[str]:
        return [t.lower() for t in texts] if self.lowercase else texts

    def prompt_length(self, prompt: str) -> int:
        """Positions a prompt takes at the start of a row (leading specials included)."""
        return len(self._truncating.encode(self._prepare([prompt])[0]).ids) - len(self._trail)

    def content_width(self, prompt: str | None = None) -> int:
        """Tokens of text one row holds: ``max_seq_length`` less the special tokens and the
        prompt's tokens."""
        prompt_tokens = 0
        if prompt:
            encoded = self._full.encode(self._prepare([prompt])[0]).ids
            prompt_tokens = len(encoded) - len(self._lead) - len(self._trail)
        return self.max_seq_length - len(self._lead) - len(self._trail) - prompt_tokens

    def _encode_bounded(self, text: str, max_tokens: int | None) -> Encoding:
        """``text`` tokenized without truncation; with ``max_tokens``, only a prefix that
        holds more than ``max_tokens`` tokens of text when the text has them.

        Memory: a tokenizer keeps several values per token (and the Python side a tuple per
        offset), so a 700k-character text of one-character tokens ("!!!", CJK) costs hundreds
        of MB. The prefix starts at 4 characters per token and grows fourfold while it holds
        too few tokens, up to ``CHARS_PER_TOKEN`` per token; it is cut after whitespace when
        it can be, so its last word is tokenized as in the whole text.
        """
        if max_tokens is None:
            return self._full.encode(text)
        wanted = max_tokens + 1
        cap = min(len(text), wanted * CHARS_PER_TOKEN)
        size = min(cap, max(64, 4 * wanted))
        while True:
            end = size
            if size < len(text):
                space = max(text.rfind(" ", 0, size), text.rfind("\n", 0, size))
                if space > size // 2:
                    end = space
            encoding = self._full.encode(text[:end])
            tokens = len(encoding.ids) - len(self._lead) - len(self._trail)
            if tokens >= wanted or size >= cap:
                return encoding
            size = min(cap, size * 4)

    def token_spans(
        self, texts: list[str], max_tokens: int | None = None
    ) -> list[list[tuple[int, int]]]:
        """The ``(start, end)`` characters of each text's tokens, special tokens left out.

        Counted by the tokenizer the model reads with, on the whole text (no truncation), so
        a passage cut from these spans holds the tokens the model will see. Offsets index the
        text as given: lowercasing that changes a text's length is skipped for that text.
        ``max_tokens``: each text's first ``max_tokens`` tokens at most, tokenized one text
        at a time from a bounded prefix (``_encode_bounded``), so memory stays bounded by the
        budget, not by the length of the texts.
        """
        out = []
        for text in texts:
            prepared = self._prepare([text])[0]
            encoding = self._encode_bounded(
                prepared if len(prepared) == len(text) else text, max_tokens
            )
            spans = [
                span
                for span, special in zip(
                    encoding.offsets, encoding.special_tokens_mask, strict=True
                )
                if not special
            ]
            out.append(spans if max_tokens is None else spans[:max_tokens])
        return out

    def truncated(self, texts: list[str], prompt: str | None = None) -> TokenRows:
        """One row per text, cut to ``max_seq_length`` tokens.

        Only the first ``max_seq_length * CHARS_PER_TOKEN`` characters are tokenized.
        """
        texts = _cut(texts, self.max_seq_length * CHARS_PER_TOKEN)
        texts = self._prepare([prompt + t for t in texts] if prompt else texts)
        encodings = self._truncating.encode_batch(texts)
        return _pack([e.ids for e in encodings], np.arange(len(texts)))

    def windows(
        self,
        texts: list[str],
        overlap: int,
        prompt: str | None = None,
        max_windows: int | None = None,
    ) -> TokenRows:
        """Split each text into ``max_seq_length`` windows that overlap by ``overlap`` tokens.

        A text that fits yields exactly the row ``truncated`` would give (without a prompt).
        ``max_windows`` keeps the first windows of each text and ignores the rest (logged once
        per call); only the characters those windows can use are tokenized
        (``CHARS_PER_TOKEN`` per token), so memory and time stay bounded for any text length.
        """
        if max_windows is not None and max_windows < 1:
            raise ValueError(f"max_windows must be >= 1 or None, got {max_windows}.")
        prompt_ids: list[int] = []
        if prompt:
            encoded = self._full.encode(self._prepare([prompt])[0]).ids
            prompt_ids = list(encoded[len(self._lead) : len(encoded) - len(self._trail)])
        width = self.max_seq_length - len(self._lead) - len(self._trail) - len(prompt_ids)
        if width < 1:
            raise ValueError("The prompt leaves no room for text within max_seq_length.")
        if not 0 <= overlap < width:
            raise ValueError(f"chunk_overlap must be in [0, {width}), got {overlap}.")
        stride = width - overlap
        # Tokens the first max_windows windows cover: width, then stride per further window;
        # one more tells a text that runs past them.
        budget = None if max_windows is None else width + (max_windows - 1) * stride + 1
        head = np.asarray(self._lead + prompt_ids, dtype=np.int64)
        trail = np.asarray(self._trail, dtype=np.int64)
        rows: list[np.ndarray] = []
        owner: list[int] = []
        capped = 0
        # One text at a time, from a bounded prefix: a chunk of long texts never holds all
        # their tokens at once (_encode_bounded).
        for index, text in enumerate(texts):
            ids = self._encode_bounded(self._prepare([text])[0], budget).ids
            content = np.asarray(ids[len(self._lead) : len(ids) - len(self._trail)], np.int64)
            if budget is not None:
                content = content[:budget]
            starts = range(0, max(len(content) - overlap, 1), stride)
            if max_windows is not None and len(starts) > max_windows:
                starts = starts[:max_windows]
                capped += 1
            for start in starts:
                rows.append(np.concatenate((head, content[start : start + width], trail)))
                owner.append(index)
        if capped:
            logger.warning(
                "%d of %d text(s) run past %d windows of %d tokens; only their first %d windows "
                "are encoded (max_chunks).",
                capped,
                len(texts),
                max_windows,
                self.max_seq_length,
                max_windows,
            )
        return _pack_arrays(rows, np.asarray(owner, dtype=np.int64))

    def pad(
        self, rows: TokenRows, index: np.ndarray, bucket: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """Right-pad the rows at ``index`` into ``(input_ids, attention_mask)``, both (b, L).

        ``bucket``: L is ``bucket_width`` of the longest row (masked padding, same vectors).
        """
        lengths = rows.lengths[index]
        width = int(lengths.max()) if len(index) else 0
        if bucket:
            width = bucket_width(width, max(width, self.max_seq_length))
        positions = np.arange(width)
        mask = positions[None, :] < lengths[:, None]  # (b, L)
        gather = rows.starts[index][:, None] + positions[None, :]
        input_ids = np.where(mask, rows.ids[np.minimum(gather, len(rows.ids) - 1)], self.pad_id)
        return input_ids.astype(np.int64), mask.astype(np.int64)


def bucket_width(width: int, limit: int) -> int:
    """``width`` rounded up to one of a few dozen widths, never past ``limit``.

    Up to ``EXACT_WIDTHS`` tokens every width is its own (short sentences pay no padding);
    above, the step is a sixteenth of the next power of two (4 up to 64, 8 up to 128, 16 up to
    256...), so a batch carries at most about 12% padding and 256 tokens come in 56 widths.
    """
    if width <= EXACT_WIDTHS:
        return width
    step = 1 << ((width - 1).bit_length() - 4)
    return min(-(-width // step) * step, limit)
