"""From pairs or a field's text to what a loss trains on.

``examples_for(loss, pairs)`` turns training pairs into the examples of one loss (a scored
pair for ``cosine``, a triple for ``triplet`` ...); ``mined_examples`` gives positive pairs a
mined hard negative each; ``pseudo_query_pairs`` and ``adapt_examples`` cut training examples
from a field's own text ("adapt to our content"). ``runs.create_run`` checks them before a run
is queued, ``execution`` builds them again in the worker.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterable, Sequence
from typing import Any

from django.core.exceptions import ValidationError

from ..encoder.distillation import DENSE_SHARE, lexical_teacher_examples
from ..encoder.mining import mine_hard_negatives
from ..encoder.pseudo_queries import hold_out, pseudo_pairs
from ..indexing import light_rows, resolve_targets
from ..models import TrainingPair, TrainingRun, pair_kind_counts
from .negatives import with_hard_negatives
from .options import LOSS_CHOICES

# A run's log lines, from its creation to its end, under the name they always had.
logger = logging.getLogger("django_sbert.finetuning.runs")

HARD_NEGATIVE_LOSSES = ("mnrl", "cached_mnrl", "matryoshka")  # the losses mined negatives feed
# Mined triples replace a run's pairs only when they keep at least this share of them.
MIN_MINED_SHARE = 0.5
# "Adapt to our content": rows (a seeded sample) cut into pseudo-queries (2,000 cost twice the
# time and gained nothing on SciFact, docs/benchmarks.md), how they are cut ("ict": a sentence
# against the rest of the row; "crop"), and the share of pseudo-pairs (at most 200) held back
# for the gate when the run has no eval split.
ADAPT_DOCUMENTS = 1000
ADAPT_METHOD = "ict"
ADAPT_HOLD_OUT = 0.1


def default_loss(pairs: Any) -> str:
    """The loss that fits the pairs' shape: scores -> cosine, labels -> softmax, else mnrl.

    Scored pairs get ``cosine``: from a trained sentence encoder it raised STS where ``cosent``
    lowered it (docs/benchmarks.md, "Fine-tuning").
    """
    counts = pair_kind_counts(pairs)
    if counts["scored"] and counts["scored"] * 2 >= counts["total"]:
        return "cosine"
    if counts["labelled"] and counts["labelled"] * 2 >= counts["total"]:
        return "softmax"
    return "mnrl"


def label_index(pairs: Iterable[TrainingPair]) -> dict[str, int]:
    """Labels in alphabetical order, numbered from 0 (softmax classes)."""
    return {label: i for i, label in enumerate(sorted({p.label for p in pairs if p.label}))}


def examples_for(loss: str, pairs: Sequence[TrainingPair]) -> tuple[list[Any], dict[str, Any]]:
    """The examples ``loss`` trains on from ``pairs`` and the loss options they imply.

    Pairs of another shape are left out; ``ValidationError`` says what was expected when no
    pair fits.
    """
    options: dict[str, Any] = {}
    name = loss
    if loss == "matryoshka":
        options["inner"] = "mnrl"
        name = "mnrl"
    if name in ("cosine", "cosent"):
        examples = [(p.text_a, p.text_b, p.score) for p in pairs if p.score is not None]
        need = "pairs with a score"
    elif name == "softmax":
        labels = label_index(pairs)
        options["num_labels"] = max(2, len(labels))
        examples = [(p.text_a, p.text_b, labels[p.label]) for p in pairs if p.label]
        need = "pairs with a label"
    elif name == "triplet":
        examples = [(p.text_a, p.text_b, p.text_negative) for p in pairs if p.text_negative]
        need = "pairs with a negative text"
    elif name in ("mnrl", "cached_mnrl"):
        positives = [p for p in pairs if p.score is None and not p.label]
        if positives and all(p.text_negative for p in positives):
            examples = [(p.text_a, p.text_b, p.text_negative) for p in positives]
        else:
            examples = [(p.text_a, p.text_b) for p in positives]
        need = "positive pairs (no score, no label)"
    elif name == "simcse":
        examples = list(dict.fromkeys(t for p in pairs for t in (p.text_a, p.text_b)))
        need = "pairs"
    elif name == "margin_mse":
        raise ValidationError(
            "Loss 'margin_mse' learns a teacher's margins on pseudo-queries: it adapts the "
            'encoder to a field\'s text ("Adapt to our content"), not to pairs.'
        )
    else:
        raise ValidationError(f"Unknown loss {loss!r}; choose one of {', '.join(LOSS_CHOICES)}.")
    if not examples:
        raise ValidationError(
            f"Loss {loss!r} trains on {need}, and none of the {len(pairs)} selected train "
            "pairs is one. Pick another loss or select other pairs."
        )
    return examples, options


def split_pairs(pair_ids: Sequence[int]) -> tuple[list[TrainingPair], list[TrainingPair]]:
    """The selected pairs' train part, and their eval part (all eval pairs if none selected)."""
    selected = list(TrainingPair.objects.filter(pk__in=list(pair_ids)).order_by("pk"))
    train = [p for p in selected if p.split == "train"]
    evaluation = [p for p in selected if p.split == "eval"]
    if not evaluation:
        evaluation = list(TrainingPair.objects.filter(split="eval").order_by("pk"))
    return train, evaluation


def mined_examples(
    base: Any, examples: list[Any], run: TrainingRun, version: str, train: list[TrainingPair]
) -> list[Any]:
    """Positive pairs with one mined hard negative each; examples that already carry a
    negative are left as they are.

    A pair no negative was found for is left out of the triples (its candidates are all
    positives or presumed relevant), and one run cannot mix pairs and triples. So the triples
    replace the pairs only when they keep at least ``MIN_MINED_SHARE`` of them and two of
    them share no text (a batch to train on); otherwise the run trains on the plain pairs:
    negatives are not worth most of the training data.
    """
    if not examples or len(examples[0]) != 2:
        return examples
    extra = [p.text_negative for p in train if p.text_negative]
    triples = with_hard_negatives(
        base, examples, encoder_name=run.encoder_name, version=version, extra_texts=extra
    )
    kept = len(triples) >= MIN_MINED_SHARE * len(examples) and _has_batch(triples)
    logger.info(
        "Run %s: hard negatives for %d of %d pairs%s",
        run.pk,
        len(triples),
        len(examples),
        "" if kept else "; training on the plain pairs",
    )
    return triples if kept else examples


def _has_batch(examples: Sequence[Sequence[str]]) -> bool:
    """Whether two of ``examples`` share no text (mnrl's smallest batch)."""
    seen: list[set[str]] = []
    for example in examples:
        texts = set(example)
        if any(not texts & other for other in seen):
            return True
        seen.append(texts)
    return False


# --- adapt to our content ------------------------------------------------------------------------


def content_texts(target: str, limit: int = 20000) -> list[str]:
    """Texts of a registered model's rows (``app_label.Model.field``) to adapt to."""
    (ref,) = resolve_targets([target])
    texts = []
    for instance in light_rows(ref, ref.manager.order_by("pk"))[:limit]:
        text = ref.field.get_source_text(instance).strip()
        if text:
            texts.append(text)
    return list(dict.fromkeys(texts))


def adapt_documents(texts: Sequence[str], seed: int) -> list[str]:
    """A seeded sample of at most ``ADAPT_DOCUMENTS`` of the texts: what a run cuts
    pseudo-queries from (each costs a training example and a mining encode)."""
    most = ADAPT_DOCUMENTS
    texts = list(texts)
    if len(texts) <= most:
        return texts
    return random.Random(seed).sample(texts, most)


def pseudo_query_pairs(texts: Sequence[str], seed: int) -> list[tuple[str, str]]:
    """(pseudo-query, positive) pairs cut from ``texts`` by ``ADAPT_METHOD``."""
    built = pseudo_pairs(adapt_documents(texts, seed), method=ADAPT_METHOD, seed=seed)
    return [(p.query, p.positive) for p in built.pairs]


def adapt_examples(
    base: Any, texts: Sequence[str], loss: str, seed: int, hold: bool, negatives: bool = True
) -> tuple[list[Any], list[TrainingPair]]:
    """Training examples of a pseudo-query run (``loss`` ``margin_mse`` or ``mnrl``, with a
    mined hard negative per pair when ``negatives``: the run's ``hard_negatives``), and the
    pairs held back to stop early on (``hold``: the run has no eval split) as unsaved
    ``TrainingPair`` objects."""
    pairs = pseudo_query_pairs(texts, seed)
    held: list[Any] = []
    if hold:
        pairs, held = hold_out(pairs, ADAPT_HOLD_OUT, seed=seed, most=200)  # type: ignore[arg-type]
    examples: list[Any] = list(pairs)
    if loss == "margin_mse":
        examples = lexical_teacher_examples(base, pairs, dense_share=DENSE_SHARE, seed=seed)
    elif negatives:
        mined = mine_hard_negatives(base, pairs, [p for _, p in pairs])
        if len(mined) >= 2:
            examples = mined
    held_pairs = [TrainingPair(text_a=a, text_b=b, split="eval") for a, b in held]
    return examples, held_pairs
