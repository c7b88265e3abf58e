"""``FitOptions``: how ``training.fit()`` trains, as one frozen object (sentence-transformers'
training arguments play this part). No torch here, so the Django layer (the training options a
form, a request or a command sets: ``finetuning.options``) reads its defaults at import time.
"""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(frozen=True)
class FitOptions:
    """The numbers of one ``fit()``; ``fit()`` checks them before training (``ValueError``).

    ``eval_every``, ``patience``, ``min_steps`` and ``tolerance`` apply with an ``evaluator``
    (early stopping); ``precision``, ``max_seq_length`` and ``length_buckets`` decide how the
    steps run (docs/training.md).
    """

    epochs: int = 1
    batch_size: int = 16
    learning_rate: float = 2e-5
    warmup_ratio: float = 0.1
    seed: int = 0
    weight_decay: float = 0.01
    max_grad_norm: float = 1.0
    report_every: int = 10  # steps between two Progress reports
    eval_every: int | None = None  # None: about ten measurements per run
    patience: int | None = None  # None: never stops early, keeps the best checkpoint
    min_steps: int | None = None  # None: an epoch, at most half the run
    tolerance: float = 0.0  # in the metric's units: within it of the best counts as no worse
    precision: str = "auto"  # "auto", "float32" or "bfloat16"
    max_seq_length: int | None = None  # tokens of each text a training step reads
    length_buckets: bool = False  # batch in-batch-negative losses by text length


FIT_OPTION_NAMES = tuple(item.name for item in fields(FitOptions))
