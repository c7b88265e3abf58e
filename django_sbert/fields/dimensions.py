"""How wide an encoder's vectors are, read from its model's JSON configuration.

No torch and no weights are loaded, so fields, migrations and system checks can ask at import
time. Fine-tuned versions keep their base model's width, so the answer holds for every version.
"""

from __future__ import annotations

import functools

from ..conf import encoder_config
from ..encoder import describe


@functools.lru_cache(maxsize=64)
def model_dimensions(model: str) -> int:
    """Width of the vectors of ``model`` (a packaged name, a directory or a hub id)."""
    return describe(model).dimensions


def encoder_dimensions(name: str = "default") -> int:
    """Width of the named encoder's vectors (``SBERT["ENCODERS"][name]["MODEL"]``)."""
    return model_dimensions(str(encoder_config(name)["MODEL"]))


def matryoshka_dims(name: str = "default") -> tuple[int, ...]:
    """The sizes below its full width the named encoder serves: ``MATRYOSHKA_DIMS``, else ()."""
    return tuple(encoder_config(name)["MATRYOSHKA_DIMS"] or ())
