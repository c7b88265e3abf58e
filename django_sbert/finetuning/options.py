"""What a run trains with: the losses, their recipes, and the training options, declared once.

``OPTIONS`` is the one declaration of the 11 options a staff user, a request or a command may
set: name, type, bounds, default and help. The admin's fine-tune form, the API's run serializer
and ``sbert_train``'s arguments are built from it, ``Hyperparameters.validate`` checks it, and
the table in docs/fine-tuning.md ("Training options") is ``options_table()``'s output. Bounds
are inclusive unless marked open (``learning_rate`` above 0, ``warmup_ratio`` below 1): the
constraints training has, not a guess at what is useful.

::

    hyper = Hyperparameters.from_options("mnrl", {"epochs": 2})   # the rest: defaults, recipe
    hyper.validate()                                              # every bad value at once
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import ValidationError

from ..conf.options import Option
from ..encoder.options import FitOptions

TrainingOption = Option  # the training options' vocabulary is every option's (conf/options.py)

# The names of django_sbert.encoder.losses.LOSSES, which imports torch: kept as a tuple so that
# forms and the API can list them at import time; tests/finetuning/test_runs.py ties the two.
LOSS_CHOICES = (
    "mnrl",
    "cached_mnrl",
    "cosent",
    "cosine",
    "softmax",
    "triplet",
    "simcse",
    "matryoshka",
    "margin_mse",
)
# "Adapt to our content" (a run on a field's text, no pairs) trains with one of these, on
# pseudo-queries cut from the text (encoder/pseudo_queries.py): "margin_mse" on the margins of
# a teacher fusing the base model with BM25 (encoder/distillation.py), "mnrl" with mined
# negatives; or "simcse" (a text against itself under another dropout mask).
ADAPT_LOSSES = ("margin_mse", "mnrl", "simcse")
ADAPT_LOSS = "margin_mse"  # a content run's loss when none is given
ADAPT_LEARNING_RATE = 5e-5  # a content run's with mnrl, when none is given

# What a run trains with when given no epochs or learning rate: the best of the settings
# compared for each loss (docs/fine-tuning.md, "The default recipe"). Early stopping keeps the
# best checkpoint, so ``epochs`` is the most a run trains, not what it must.
RECIPES: dict[str, dict[str, Any]] = {
    "mnrl": {"epochs": 4, "learning_rate": 5e-5},
    "cached_mnrl": {"epochs": 2, "learning_rate": 5e-5},
    "matryoshka": {"epochs": 2, "learning_rate": 5e-5},
    "cosine": {"epochs": 1, "learning_rate": 5e-5},
}
RECIPE = {"epochs": 1, "learning_rate": 2e-5}  # every other loss: the SBERT paper's
# "Adapt to our content" with mnrl keeps the epochs measured on pseudo-queries (the mnrl
# recipe's were measured on pairs).
ADAPT_EPOCHS = 2
# margin_mse examples hold a query's four margins (encoder.distillation.PER_QUERY), so a batch
# of 8 costs the texts of 16 two-text examples, and the run keeps the steps it needs
# (docs/benchmarks.md, "Adapt to our content: the lexical teacher").
ADAPT_MARGIN_BATCH_SIZE = 8
# A measurement within one point of nDCG@10 of the best counts as no worse: a small eval split
# cannot tell such differences from noise (docs/benchmarks.md, "Fine-tuning through the admin
# workflow").
EARLY_STOPPING_TOLERANCE = 0.01


def recipe_summary() -> str:
    """The recipes in words, for help texts: ``mnrl: 4 epochs, lr 5e-05; ...``."""
    recipes = [*RECIPES.items(), ("other losses", RECIPE)]
    return "; ".join(
        f"{name}: {r['epochs']} epoch{'' if r['epochs'] == 1 else 's'}, lr {r['learning_rate']:g}"
        for name, r in recipes
    )


# --- the options -------------------------------------------------------------------------------


OPTIONS: tuple[TrainingOption, ...] = (
    TrainingOption(
        "loss",
        str,
        None,
        "The training objective (docs/training.md).",
        choices=LOSS_CHOICES,
        default_text="picked from the pairs' shape (scores: cosine, labels: softmax, else "
        "mnrl); a content run: margin_mse",
    ),
    TrainingOption(
        "epochs",
        int,
        None,
        "Passes over the training examples, at most (early stopping may end the run sooner).",
        minimum=1,
        maximum=100,
        default_text=f"the loss's recipe ({recipe_summary()})",
    ),
    TrainingOption(
        "batch_size",
        int,
        FitOptions.batch_size,
        "Examples per step; with mnrl, the other examples of a batch are each one's negatives.",
        minimum=2,
        maximum=1024,
        default_text=f"{FitOptions.batch_size}; a content run with margin_mse: "
        f"{ADAPT_MARGIN_BATCH_SIZE} (each example holds several margins)",
    ),
    TrainingOption(
        "learning_rate",
        float,
        None,
        "Peak learning rate of AdamW, reached after the warmup, then decayed linearly.",
        minimum=0.0,
        maximum=1e-2,
        open_minimum=True,
        default_text="the loss's recipe",
    ),
    TrainingOption(
        "warmup_ratio",
        float,
        FitOptions.warmup_ratio,
        "Share of the steps over which the learning rate rises from 0.",
        minimum=0.0,
        maximum=1.0,
        open_maximum=True,
    ),
    TrainingOption(
        "seed",
        int,
        FitOptions.seed,
        "Seed of the shuffling, dropout and sampling: the same seed, the same run.",
        minimum=0,
        maximum=2**31 - 1,
    ),
    TrainingOption(
        "hard_negatives",
        bool,
        True,
        "mnrl: mine one hard negative per positive pair with the serving model.",
    ),
    TrainingOption(
        "early_stopping",
        bool,
        True,
        "Measure on the eval pairs about ten times per run, keep the best step, stop after "
        "'patience' measurements without improvement.",
    ),
    TrainingOption(
        "patience",
        int,
        3,
        "Measurements without improvement before early stopping ends the run.",
        minimum=1,
        maximum=1000,
    ),
    TrainingOption(
        "tolerance",
        float,
        EARLY_STOPPING_TOLERANCE,
        "A measurement within this of the best counts as no worse: the latest such step is "
        "kept (0.01: one point of nDCG@10).",
        minimum=0.0,
        maximum=1.0,
    ),
    TrainingOption(
        "eval_every",
        int,
        None,
        "Steps between early stopping's measurements.",
        minimum=1,
        default_text="about ten per run",
    ),
)
OPTION = {option.name: option for option in OPTIONS}
# What a form, a command or a request may set (the loss apart), in the order runs store them.
OPTION_NAMES = tuple(option.name for option in OPTIONS if option.name != "loss")


def options_table() -> str:
    """The options as a Markdown table (docs/fine-tuning.md, "Training options")."""
    rows = [
        "| option (API, admin) | `sbert_train` | accepts | default | what it does |",
        "|---|---|---|---|---|",
    ]
    for option in OPTIONS:
        flags = f"`{option.flag}`"
        if option.type is bool:
            flags += f", `--no-{option.flag[2:]}`"
        rows.append(
            f"| `{option.name}` | {flags} | {option.bounds_text} "
            f"| {option.default_description} | {option.help} |"
        )
    return "\n".join(rows) + "\n"


# --- the values of one run ---------------------------------------------------------------------


def _default(name: str) -> Any:
    return field(default=OPTION[name].default)


@dataclass(frozen=True)
class Hyperparameters:
    """What a run trains with; ``validate()`` explains every bad value at once (``OPTIONS``).

    ``epochs`` and ``learning_rate`` left None take the loss's recipe (``RECIPES``).
    ``hard_negatives``: mine one per positive pair (mnrl) with the base model, from the rows
    embedded by the run's encoder and the pairs' own texts. ``early_stopping``: measure on the
    eval split every ``eval_every`` steps (None: about ten times per run), keep the best
    checkpoint and stop after ``patience`` measurements without improvement, never before
    ``encoder.training.default_min_steps`` (about an epoch, at most half the run).
    ``tolerance``: a measurement within this much of the best (in the metric's units, 0.01 is
    one point of nDCG@10) counts as no worse: the latest such step is kept and patience
    starts again (``fit(tolerance=...)``; ``EARLY_STOPPING_TOLERANCE``).
    """

    loss: str = "mnrl"  # the loss of plain positive pairs
    epochs: int | None = _default("epochs")
    batch_size: int = _default("batch_size")
    learning_rate: float | None = _default("learning_rate")
    warmup_ratio: float = _default("warmup_ratio")
    seed: int = _default("seed")
    hard_negatives: bool = _default("hard_negatives")
    early_stopping: bool = _default("early_stopping")
    patience: int = _default("patience")
    tolerance: float = _default("tolerance")
    eval_every: int | None = _default("eval_every")

    def __post_init__(self) -> None:
        recipe = RECIPES.get(self.loss, RECIPE)
        for name in ("epochs", "learning_rate"):
            if getattr(self, name) is None:
                object.__setattr__(self, name, recipe[name])

    @classmethod
    def from_options(cls, loss: str, options: Mapping[str, Any]) -> Hyperparameters:
        """From a form's, a command's or a request's values; absent or None keys: defaults."""
        names = OPTION_NAMES
        return cls(loss=loss, **{n: options[n] for n in names if options.get(n) is not None})

    def validate(self) -> None:
        problems = [option.problem(getattr(self, option.name)) for option in OPTIONS]
        if any(problems):
            raise ValidationError([f"{p}." for p in problems if p])

    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in OPTION_NAMES}

    def fit_options(self, early_stopping: bool, **speed: Any) -> FitOptions:
        """What ``fit()`` trains with for these values (``speed``: ``precision``,
        ``max_seq_length``, ``length_buckets``); early stopping's only with an evaluator."""
        return FitOptions(
            epochs=int(self.epochs),  # type: ignore[arg-type]
            batch_size=int(self.batch_size),
            learning_rate=float(self.learning_rate),  # type: ignore[arg-type]
            warmup_ratio=float(self.warmup_ratio),
            seed=int(self.seed),
            report_every=1,
            eval_every=self.eval_every if early_stopping else None,
            patience=self.patience if early_stopping else None,
            tolerance=float(self.tolerance) if early_stopping else 0.0,
            **speed,
        )


def adapt_hyperparameters(loss: str | None = None, **options: Any) -> Hyperparameters:
    """What "adapt to our content" trains with when the caller gives no value: the recipe
    measured on SciFact (docs/training.md, "Adapt to our content"; ``margin_mse``: 1 epoch at
    2e-5, batch ``ADAPT_MARGIN_BATCH_SIZE``); ``options`` override it."""
    loss = loss or ADAPT_LOSS
    recipe: dict[str, Any] = {}
    if loss == "mnrl":
        recipe = {"learning_rate": ADAPT_LEARNING_RATE, "epochs": ADAPT_EPOCHS}
    elif loss == "margin_mse":
        recipe = {"batch_size": ADAPT_MARGIN_BATCH_SIZE}
    given = {name: value for name, value in options.items() if value is not None}
    return Hyperparameters.from_options(loss, {**recipe, **given})
