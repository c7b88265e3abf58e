"""``PassageConfig``: how an ``EmbeddingField(passages=...)`` splits its text into passages.

::

    embedding = EmbeddingField(source=("title", "body"), passages=True)
    embedding = EmbeddingField(source=("title", "body"), passages=PassageConfig(max_tokens=128))

Written into migrations like the field's other arguments (a deconstructible value); changing it
changes no column, and rows keep the passages they were split into until they are embedded
again (``manage.py sbert_reindex --all`` re-splits every row).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

from django.utils.deconstruct import deconstructible

from ..conf import encoder_config
from ..encoder import ModelSpec, describe

DOCUMENT_VECTORS = ("mean", "first")
# Windows a row's text is encoded from at most with LONG_TEXT="chunk" (the rest is ignored,
# with a warning), so no row can exhaust a worker's memory; also a row's passage budget.
MAX_CHUNKS = 64
# Passages of about two sentences by default: on deep-content retrieval they find a sentence in
# a long article far more often than passages that fill the window (docs/passages.md).
DEFAULT_MAX_TOKENS = 64
DEFAULT_OVERLAP = 16


def _integer(value: Any, least: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


@deconstructible(path="django_sbert.passages.PassageConfig")
@dataclass(unsafe_hash=True)  # hashable although mutable: a field's argument, never changed
class PassageConfig:
    """How a field's text is split into passages, and what the row's own vector holds.

    * ``max_tokens``: tokens of text per passage at most (default 64); None fills the
      encoder's window (``max_seq_length`` less the special tokens and the document prompt).
      A larger value is cut to the window.
    * ``overlap``: tokens of whole sentences repeated at the start of the next passage
      (default 16).
    * ``max_passages``: passages per row at most (the rest of a longer text is not read);
      None: as many as hold the text of the encoder's ``MAX_CHUNKS`` windows, so a row costs
      at most what ``LONG_TEXT="chunk"`` would and no row can make a task run out of memory.
    * ``document``: what the row's own vector column holds: ``"mean"`` (the normalized mean
      of its passage vectors: the whole text, for more-like-this) or ``"first"`` (the first
      passage's vector: what ``LONG_TEXT="truncate"`` would store).
    """

    max_tokens: int | None = DEFAULT_MAX_TOKENS
    overlap: int = DEFAULT_OVERLAP
    max_passages: int | None = None
    document: str = "mean"

    def problems(self) -> list[str]:
        """What is wrong with these values (for check django_sbert.E013); [] when none."""
        found = []
        if self.max_tokens is not None and not _integer(self.max_tokens, 2):
            found.append(f"max_tokens must be an integer >= 2 or None, not {self.max_tokens!r}")
        if not _integer(self.overlap, 0):
            found.append(f"overlap must be an integer >= 0, not {self.overlap!r}")
        elif isinstance(self.max_tokens, int) and self.overlap >= self.max_tokens:
            found.append(f"overlap ({self.overlap}) must be smaller than max_tokens")
        if self.max_passages is not None and not _integer(self.max_passages, 1):
            found.append(f"max_passages must be an integer >= 1 or None, not {self.max_passages!r}")
        if self.document not in DOCUMENT_VECTORS:
            found.append(f"document must be one of {DOCUMENT_VECTORS}, not {self.document!r}")
        return found


def passage_config(value: bool | PassageConfig | None) -> PassageConfig | None:
    """``passages=`` of an EmbeddingField as a config: None when off, defaults for True."""
    if value is None or value is False:
        return None
    if value is True:
        return PassageConfig()
    return value


@functools.lru_cache(maxsize=64)
def model_spec(model: str) -> ModelSpec:
    """``describe(model)``, read once per process: the model's JSON files, no torch."""
    return describe(model)


def passage_limit(config: PassageConfig, encoder: str) -> int:
    """Passages one row holds at most: ``config.max_passages``, else as many as hold the text
    of ``MAX_CHUNKS`` windows (64 x 256 tokens for all-MiniLM-L6-v2: 342
    passages of 64 tokens that overlap by 16).

    Indexing stops a text there; a passage search that must find k rows fetches at most k
    times this many passages. Reads the model's JSON config only (no torch)."""
    if config.max_passages is not None:
        return int(config.max_passages)
    settings = encoder_config(encoder)
    windows = MAX_CHUNKS
    window = model_spec(str(settings["MODEL"])).max_seq_length
    size = min(config.max_tokens or window, window)
    step = max(1, size - config.overlap)  # new tokens per passage
    return max(1, math.ceil(int(windows) * window / step))
