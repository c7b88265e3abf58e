"""``SbertError``, the base of every exception django-sbert raises for its users to catch, and
the ML core's own.

They live here, in the ML core that imports nothing of Django, so the core can raise them
and every layer above can derive from ``SbertError``; import them all from
``django_sbert.exceptions``.
"""

from __future__ import annotations


class SbertError(Exception):
    """Base of the exceptions django-sbert raises for its users (``django_sbert.exceptions``)."""


class ModelNotFoundError(SbertError, LookupError):
    """No model directory could be found for a name; the message lists what was tried."""


class UnsupportedModelError(SbertError, ValueError):
    """A model directory asks for something SentenceEncoder does not implement.

    The message names the model's architecture and the missing piece (a module type, a pooling
    mode, custom code...), so a developer can choose another model or another library.
    """


class TrainingCancelled(SbertError):
    """Raised by ``fit`` when ``should_stop()`` returned True; nothing was returned or written.

    ``step`` is how many optimizer steps had finished; ``history`` holds them.
    """

    def __init__(self, step: int, total_steps: int, history: list[dict[str, float]]) -> None:
        super().__init__(f"Training cancelled after {step} of {total_steps} steps.")
        self.step = step
        self.total_steps = total_steps
        self.history = history


class PackageError(SbertError, RuntimeError):
    """A cached package that cannot be used: damaged, built elsewhere, or wrong output."""


class OnnxUnavailable(SbertError, RuntimeError):
    """ONNX Runtime cannot serve a transformer's queries here (the message says why)."""
