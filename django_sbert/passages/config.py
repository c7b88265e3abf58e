"""``PassageConfig``: how an ``EmbeddingField(passages=...)`` splits its text into passages.

::

    embedding = EmbeddingField(source=("title", "body"), passages=True)
    embedding = EmbeddingField(source=("title", "body"), passages=PassageConfig(max_tokens=128))

Written into migrations like the field's other arguments (a deconstructible value); changing it
changes no column, and rows keep the passages they were split into until they are embedded
again (``manage.py sbert_reindex --all`` re-splits every row).
"""

from __future__ import annotations

from typing import Any

from django.utils.deconstruct import deconstructible

from ..conf import encoder_config

DOCUMENT_VECTORS = ("mean", "first")
DEFAULT_MAX_PASSAGES = 64  # when neither PassageConfig.max_passages nor MAX_CHUNKS is set


@deconstructible(path="django_sbert.passages.PassageConfig")
class PassageConfig:
    """How a field's text is split into passages, and what the row's own vector holds.

    * ``max_tokens``: tokens of text per passage at most; None (the default) fills the
      encoder's window (``max_seq_length`` less the special tokens and the document prompt).
      A larger value is cut to the window.
    * ``overlap``: tokens of whole sentences repeated at the start of the next passage.
    * ``max_passages``: passages per row at most (the rest of a longer text is not read);
      None: the encoder's ``MAX_CHUNKS`` (64), so no row can make a task run out of memory.
    * ``document``: what the row's own vector column holds: ``"mean"`` (the normalized mean
      of its passage vectors: the whole text, for more-like-this) or ``"first"`` (the first
      passage's vector: what ``LONG_TEXT="truncate"`` would store).
    """

    def __init__(
        self,
        max_tokens: int | None = None,
        overlap: int = 32,
        max_passages: int | None = None,
        document: str = "mean",
    ) -> None:
        self.max_tokens = max_tokens
        self.overlap = overlap
        self.max_passages = max_passages
        self.document = document

    def problems(self) -> list[str]:
        """What is wrong with these values (for check django_sbert.E013); [] when none."""
        found = []
        if self.max_tokens is not None and (
            isinstance(self.max_tokens, bool)
            or not isinstance(self.max_tokens, int)
            or self.max_tokens < 2
        ):
            found.append(f"max_tokens must be an integer >= 2 or None, not {self.max_tokens!r}")
        if isinstance(self.overlap, bool) or not isinstance(self.overlap, int) or self.overlap < 0:
            found.append(f"overlap must be an integer >= 0, not {self.overlap!r}")
        elif isinstance(self.max_tokens, int) and self.overlap >= self.max_tokens:
            found.append(f"overlap ({self.overlap}) must be smaller than max_tokens")
        if self.max_passages is not None and (
            isinstance(self.max_passages, bool)
            or not isinstance(self.max_passages, int)
            or self.max_passages < 1
        ):
            found.append(f"max_passages must be an integer >= 1 or None, not {self.max_passages!r}")
        if self.document not in DOCUMENT_VECTORS:
            found.append(f"document must be one of {DOCUMENT_VECTORS}, not {self.document!r}")
        return found

    def _values(self) -> tuple[Any, ...]:
        return (self.max_tokens, self.overlap, self.max_passages, self.document)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PassageConfig) and self._values() == other._values()

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        return (
            f"PassageConfig(max_tokens={self.max_tokens!r}, overlap={self.overlap!r}, "
            f"max_passages={self.max_passages!r}, document={self.document!r})"
        )


def passage_config(value: bool | PassageConfig | None) -> PassageConfig | None:
    """``passages=`` of an EmbeddingField as a config: None when off, defaults for True."""
    if value is None or value is False:
        return None
    if value is True:
        return PassageConfig()
    return value


def max_passages(config: PassageConfig, encoder: str) -> int:
    """Passages one row holds at most: ``config.max_passages``, else the encoder's MAX_CHUNKS.

    Indexing stops a text there; a passage search that must find k rows fetches at most k
    times this many passages."""
    if config.max_passages is not None:
        return int(config.max_passages)
    chunks = encoder_config(encoder)["MAX_CHUNKS"]
    return int(chunks) if chunks is not None else DEFAULT_MAX_PASSAGES
