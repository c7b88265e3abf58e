"""``FitOptions``: how ``training.fit()`` trains, as one frozen object (sentence-transformers'
training arguments play this part). No torch here, so the Django layer (the training options a
form, a request or a command sets: ``finetuning.options``) reads its defaults at import time.
"""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(frozen=True)
class FitOptions:
    """The numbers of one ``fit()``; ``fit()`` checks them before training (``ValueError``).

    With an ``evaluator`` (early stopping) the model is measured before training, every
    ``eval_every`` steps (``default_eval_every(total_steps)`` when None) and after the last
    step; the best weights are kept in memory and restored at the end, and training stops once
    ``patience`` evaluations in a row did not improve on the best (None: never stops early,
    still returns the best checkpoint), though not before ``min_steps`` steps
    (``default_min_steps``: an epoch, at most half the run, when None). Every evaluation
    counts for the best checkpoint, the early ones included. ``tolerance`` (in the metric's
    units) keeps the latest checkpoint that measures within it of the best rather than the
    best itself, and such a checkpoint resets the patience: on a small eval split,
    differences under the split's noise should not stop training or roll it back.

    ``precision``: ``"auto"`` (bfloat16 autocast on a CPU with native bf16, else float32),
    ``"float32"`` or ``"bfloat16"`` (``FitResult.precision`` says which ran); under bfloat16
    the forward passes and the evaluations run in ``torch.autocast``, while weights (a float32
    copy), optimizer and loss stay float32. ``max_seq_length``: the training steps read each
    text's first tokens (None: the model's own); evaluations and the model returned keep the
    model's length. ``length_buckets``: losses with in-batch negatives (mnrl...) get batches
    of examples of similar token length rather than random ones; every example is still seen
    once per epoch.
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
