"""Training runs: validate and queue them, run them, measure them.

::

    run = create_run("default", pair_ids, loss="mnrl", epochs=1, user=request.user)
    execute_run(run.pk)     # what the Celery task does, on SBERT["TRAINING_QUEUE"]

A run trains a copy of the version that serves when it starts, on the selected ``train``
pairs, with the default recipe unless told otherwise (``options.RECIPES``: mined hard negatives
for positive pairs, and early stopping on the ``eval`` pairs, which keeps the best checkpoint),
measures both on the ``eval`` pairs (STS Spearman for scored pairs; nDCG@10 and
Recall@10 for positive pairs: each ``text_a`` a query, every ``text_b`` and a seeded sample of
distractors the corpus, ``gate.eval_distractors``), saves the
trained model atomically and records it as a *candidate* ``EncoderVersion``. Nothing it does
changes what serves: a failure or a cancellation leaves status and error text and no model.
The metrics and the gate that compares a candidate with the serving version are in
``gate.py``.
"""

from __future__ import annotations

import logging
import random
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, connections, transaction
from django.utils import timezone

from ..conf import encoder_config, sbert_settings
from ..encoder.distillation import DENSE_SHARE, lexical_teacher_examples
from ..encoder.mining import mine_hard_negatives
from ..encoder.pseudo_queries import hold_out, pseudo_pairs
from ..exceptions import BrokerUnavailable, RunConflict
from ..fields import encoder_dimensions
from ..indexing import light_rows, resolve_targets
from ..models import (
    ACTIVE_RUN_STATUSES,
    EncoderVersion,
    RunStatus,
    TrainingPair,
    TrainingRun,
    pair_kind_counts,
)
from ..serving import base_label, get_encoder, save_encoder, serving_record, trainable_encoder
from . import quality, recovery
from .gate import corpus_record, eval_distractors, eval_metrics, primary_metric
from .hybrid import candidate_metrics
from .negatives import with_hard_negatives
from .options import (
    ADAPT_EPOCHS,
    ADAPT_LOSSES,
    ADAPT_MARGIN_BATCH_SIZE,
    EARLY_STOPPING_TOLERANCE,
    LOSS_CHOICES,
    OPTION_NAMES,
    OPTIONS,
    RECIPE,
    RECIPES,
    Hyperparameters,
    TrainingOption,
    adapt_hyperparameters,
    option_default,
    recipe_summary,
)

# Declared in options.py; importable from here as before.
__all__ = [
    "ADAPT_EPOCHS",
    "ADAPT_LOSSES",
    "ADAPT_MARGIN_BATCH_SIZE",
    "EARLY_STOPPING_TOLERANCE",
    "LOSS_CHOICES",
    "OPTIONS",
    "OPTION_NAMES",
    "RECIPE",
    "RECIPES",
    "Hyperparameters",
    "TrainingOption",
    "adapt_hyperparameters",
    "create_run",
    "cancel_run",
    "execute_run",
    "option_default",
    "recipe_summary",
]

logger = logging.getLogger(__name__)

HARD_NEGATIVE_LOSSES = ("mnrl", "cached_mnrl", "matryoshka")  # the losses mined negatives feed
# Mined triples replace a run's pairs only when they keep at least this share of them.
MIN_MINED_SHARE = 0.5


# --- from pairs to examples ----------------------------------------------------------------------


def default_loss(pairs: Any) -> str:
    """The loss that fits the pairs' shape: scores -> cosine, labels -> softmax, else mnrl.

    Scored pairs get ``cosine``: from a trained sentence encoder it raised STSb dev from 86.72
    to 89.31 (89.59 with its recipe) where ``cosent`` lowered it to 86.24 (docs/training.md).
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


def _split(pair_ids: Sequence[int]) -> tuple[list[TrainingPair], list[TrainingPair]]:
    """The selected pairs' train part, and their eval part (all eval pairs if none selected)."""
    selected = list(TrainingPair.objects.filter(pk__in=list(pair_ids)).order_by("pk"))
    train = [p for p in selected if p.split == "train"]
    evaluation = [p for p in selected if p.split == "eval"]
    if not evaluation:
        evaluation = list(TrainingPair.objects.filter(split="eval").order_by("pk"))
    return train, evaluation


def _content_texts(target: str, limit: int = 20000) -> list[str]:
    """Texts of a registered model's rows (``app_label.Model.field``) to adapt to."""
    (ref,) = resolve_targets([target])
    texts = []
    for instance in light_rows(ref, ref.manager.order_by("pk"))[:limit]:
        text = ref.field.get_source_text(instance).strip()
        if text:
            texts.append(text)
    return list(dict.fromkeys(texts))


def adapt_documents(texts: Sequence[str], seed: int) -> list[str]:
    """A seeded sample of at most ``SBERT["ADAPT"]["DOCUMENTS"]`` of the texts: what a run
    cuts pseudo-queries from (each costs a training example and a mining encode)."""
    most = sbert_settings.ADAPT["DOCUMENTS"]
    texts = list(texts)
    if most is None or len(texts) <= most:
        return texts
    return random.Random(seed).sample(texts, most)


def pseudo_query_pairs(texts: Sequence[str], seed: int) -> list[tuple[str, str]]:
    """(pseudo-query, positive) pairs cut from ``texts`` by ``SBERT["ADAPT"]["METHOD"]``."""
    built = pseudo_pairs(
        adapt_documents(texts, seed), method=sbert_settings.ADAPT["METHOD"], seed=seed
    )
    return [(p.query, p.positive) for p in built.pairs]


def _adapt_examples(
    base: Any, texts: Sequence[str], loss: str, seed: int, hold: bool
) -> tuple[list[Any], list[TrainingPair]]:
    """Training examples of a pseudo-query run (``loss`` ``margin_mse`` or ``mnrl``), and the
    pairs held back to stop early on (``hold``: the run has no eval split) as unsaved
    ``TrainingPair`` objects."""
    pairs = pseudo_query_pairs(texts, seed)
    held: list[Any] = []
    if hold:
        fraction = float(sbert_settings.ADAPT["HOLD_OUT"])
        pairs, held = hold_out(pairs, fraction, seed=seed, most=200)  # type: ignore[arg-type]
    examples: list[Any] = list(pairs)
    if loss == "margin_mse":
        share = sbert_settings.ADAPT["DENSE_SHARE"]
        examples = lexical_teacher_examples(
            base, pairs, dense_share=DENSE_SHARE if share is None else float(share), seed=seed
        )
    elif sbert_settings.ADAPT["NEGATIVES"]:
        mined = mine_hard_negatives(base, pairs, [p for _, p in pairs])
        if len(mined) >= 2:
            examples = mined
    held_pairs = [TrainingPair(text_a=a, text_b=b, split="eval") for a, b in held]
    return examples, held_pairs


# --- creating runs -----------------------------------------------------------------------------


def create_run(
    encoder_name: str,
    pair_ids: Sequence[int] = (),
    *,
    hyperparameters: Hyperparameters,
    content: str | None = None,
    user: Any = None,
    enqueue: bool = True,
) -> TrainingRun:
    """Validate everything that can be checked now, record the run and queue it on commit.

    ``content`` (``"app_label.Model.field"``) trains on that field's text instead of pairs
    ("adapt to our content"): ``margin_mse`` or ``mnrl`` on pseudo-queries cut from it, or
    ``simcse``; the eval
    split (the selected eval pairs, else all) measures it like any run. Raises
    ``ValidationError`` (bad settings or data) or ``RunConflict`` (a run of this encoder is
    queued or running).
    """
    # torch: the loss and data checks import it, and only this call needs them.
    from ..encoder.data import validate_examples
    from ..encoder.losses import build_loss

    encoder_config(encoder_name)  # ImproperlyConfigured names the configured encoders
    hyperparameters.validate()
    loss = hyperparameters.loss
    if content:
        if loss not in ADAPT_LOSSES:
            raise ValidationError(
                "Adapting to content trains with 'margin_mse' or 'mnrl' (pseudo-queries cut "
                f"from the text) or 'simcse', not {loss!r}."
            )
        texts = _content_texts(content)
        options: dict[str, Any] = {}
        data: dict[str, Any] = {"content": content}
        if loss == "simcse":
            examples: list[Any] = texts
        else:
            examples = pseudo_query_pairs(texts, hyperparameters.seed)
            if not examples:
                raise ValidationError(
                    f"None of the {len(texts)} texts of {content} has two sentences to cut a "
                    "pseudo-query from; adapt with 'simcse' instead."
                )
            data["eval"] = [p.pk for p in _split(pair_ids)[1]]
    else:
        train, evaluation = _split(pair_ids)
        if not train:
            raise ValidationError(
                "None of the selected pairs is in the 'train' split; select train pairs."
            )
        examples, options = examples_for(loss, train)
        data = {"train": [p.pk for p in train], "eval": [p.pk for p in evaluation]}
    try:
        objective = build_loss(loss, encoder_dimensions(encoder_name), **dict(options))
        if loss != "margin_mse":  # its examples (the teacher's margins) are the worker's work
            validate_examples(examples, objective)
    except ValueError as exc:
        raise ValidationError(str(exc)) from exc
    if len(examples) < 2:
        raise ValidationError(f"{len(examples)} training example: at least 2 are needed.")
    recovery.fail_dead_runs(encoder_name)  # frees the slot a dead worker's run still holds
    try:
        with transaction.atomic():
            run = TrainingRun.objects.create(
                encoder_name=encoder_name,
                loss=loss,
                hyperparameters={**hyperparameters.as_dict(), "loss_options": options},
                data=data,
                created_by=user if getattr(user, "pk", None) else None,
            )
    except IntegrityError as exc:
        raise RunConflict(
            f"A training run of encoder {encoder_name!r} is already queued or running; wait "
            "for it to finish or cancel it."
        ) from exc
    if enqueue:
        _queue_on_commit(run)
    return run


def _queue_on_commit(run: TrainingRun) -> None:
    """Publish the run's task once its row is committed; if the broker is unreachable, fail
    the run (so it holds no slot) and raise ``BrokerUnavailable``.

    Outside a transaction this happens now and the caller gets the error (the API answers
    503). Inside one (``ATOMIC_REQUESTS``) it happens at COMMIT, where an error can no longer
    reach the caller: it is logged, and the run is failed all the same.
    """
    from .tasks import enqueue_training  # the allowed loop: this wing's tasks import us

    def publish() -> None:
        try:
            enqueue_training(run.pk)
        except BrokerUnavailable as exc:
            TrainingRun.objects.filter(pk=run.pk, status=RunStatus.QUEUED).update(
                status=RunStatus.FAILED,
                error=f"Not started: {exc}",
                finished_at=timezone.now(),
                updated_at=timezone.now(),
            )
            run.refresh_from_db()
            raise

    in_transaction = transaction.get_connection().in_atomic_block
    transaction.on_commit(publish, robust=in_transaction)


def cancel_run(run: TrainingRun) -> bool:
    """Ask a queued or running run to stop; the worker notices within a step."""
    return bool(
        TrainingRun.objects.filter(pk=run.pk, status__in=ACTIVE_RUN_STATUSES).update(
            status=RunStatus.CANCELLED, finished_at=timezone.now()
        )
    )


# --- running -----------------------------------------------------------------------------------


def _pseudo_metrics(encoder: Any, held: Sequence[TrainingPair]) -> dict[str, float]:
    """nDCG@10 / Recall@10 on held-back pseudo-pairs, as ``pseudo_*`` (the gate ignores them)."""
    return {f"pseudo_{name}": value for name, value in eval_metrics(encoder, held).items()}


class _Heartbeat:
    """Write the run's ``updated_at`` from a thread while every phase of the run goes on.

    Loading the base model, the evaluations before and after training and saving can each
    take minutes on a large model or eval split, without a training step to report; the
    heartbeat keeps ``updated_at`` fresh through all of them, so ``recovery.fail_dead_runs``
    fails only a run whose worker is gone (the thread dies with the process). It beats three
    times per ``TRAINING_STALLED_SECONDS`` at least, and never more often than progress is
    written (``TRAINING_PROGRESS_SECONDS``).
    """

    def __init__(self, run_pk: int) -> None:
        self.run_pk = run_pk
        stalled = float(sbert_settings.TRAINING_STALLED_SECONDS)
        progress = float(sbert_settings.TRAINING_PROGRESS_SECONDS)
        self.every = max(0.05, min(progress, stalled / 3))
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._beat, name=f"django-sbert-heartbeat-{run_pk}", daemon=True
        )

    def __enter__(self) -> _Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()

    def _beat(self) -> None:
        try:
            while not self._stop.wait(self.every):
                TrainingRun.objects.filter(pk=self.run_pk, status=RunStatus.RUNNING).update(
                    updated_at=timezone.now()
                )
        except Exception:  # a lost database connection: the run's own writes will report it
            logger.exception("Heartbeat of training run %s stopped", self.run_pk)
        finally:
            connections.close_all()  # this thread's own connections


class _Reporter:
    """Progress and loss history for the admin, written at most every few seconds."""

    def __init__(self, run: TrainingRun) -> None:
        self.run = run
        self.history: list[list[float]] = []
        self.step = 0
        self.total = 0
        self.every = float(sbert_settings.TRAINING_PROGRESS_SECONDS)
        self.last_write = 0.0
        self.last_check = 0.0
        self.cancelled = False

    def __call__(self, progress: Any) -> None:
        self.step, self.total = progress.step, progress.total_steps
        self.history.append([progress.step, round(float(progress.loss), 6)])
        if time.monotonic() - self.last_write >= self.every or self.step == self.total:
            self.flush()

    def flush(self) -> None:
        self.last_write = time.monotonic()
        TrainingRun.objects.filter(pk=self.run.pk, status=RunStatus.RUNNING).update(
            step=self.step,
            total_steps=self.total,
            loss_history=self.history,
            updated_at=timezone.now(),
        )

    def should_stop(self) -> bool:
        if time.monotonic() - self.last_check < 1.0:
            return self.cancelled
        self.last_check = time.monotonic()
        status = TrainingRun.objects.filter(pk=self.run.pk).values_list("status", flat=True)
        self.cancelled = status.first() != RunStatus.RUNNING
        return self.cancelled


def execute_run(run_id: int) -> str:
    """Run a queued training run to the end; returns its final status.

    Only a ``queued`` run starts (a redelivered or cancelled one is left alone). While it
    runs, a heartbeat thread keeps ``updated_at`` fresh (``_Heartbeat``).
    """
    claimed = TrainingRun.objects.filter(pk=run_id, status=RunStatus.QUEUED).update(
        status=RunStatus.RUNNING, started_at=timezone.now(), updated_at=timezone.now()
    )
    if not claimed:
        return TrainingRun.objects.filter(pk=run_id).values_list("status", flat=True).first() or ""
    run = TrainingRun.objects.get(pk=run_id)
    with _Heartbeat(run.pk):
        return _train(run)


def _stored_options(stored: Mapping[str, Any]) -> dict[str, Any]:
    """A run's stored hyperparameters as ``Hyperparameters`` keywords (a run stored before
    early stopping and mining existed trains as it was asked to: without them)."""
    options = {n: stored[n] for n in OPTION_NAMES if stored.get(n) is not None}
    options.setdefault("hard_negatives", False)
    options.setdefault("early_stopping", False)
    options.setdefault("tolerance", 0.0)
    return options


def _mined(
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


class _EvalTracker:
    """Early stopping's evaluator for a run: ``measure``'s metrics (the eval split's, or the
    held-back pseudo-pairs') at every evaluation, ``metric`` the one compared, written to
    ``TrainingRun.evaluations`` as they come, for the run page and the API."""

    def __init__(
        self,
        run: TrainingRun,
        before: dict[str, float],
        reporter: _Reporter,
        measure: Callable[[Any], dict[str, float]],
        metric: str,
    ) -> None:
        self.run = run
        self.reporter = reporter  # its step is the step just taken when fit evaluates
        self.metric = metric
        self.before = before
        self.measure = measure
        self.measured: dict[int, dict[str, float]] = {}
        self.history: list[list[float]] = []

    def __call__(self, encoder: Any) -> float:
        # step 0 is the base model, measured just before training
        metrics = self.measure(encoder) if self.measured else dict(self.before)
        step = int(self.reporter.step)
        self.measured[step] = metrics
        self.history.append([step, float(metrics[self.metric])])
        best = max(self.history, key=lambda item: item[1])  # the first of equals: fit's choice
        self._write({"best_step": best[0], "best_metric": best[1]})
        return float(metrics[self.metric])

    def finish(self, result: Any) -> None:
        self._write(
            {
                "best_step": result.best_step,
                "best_metric": result.best_metric,
                "steps": result.steps,
                "total_steps": result.total_steps,
                "stopped_early": result.stopped_early,
                "min_steps": result.min_steps,
            }
        )

    def _write(self, extra: dict[str, Any]) -> None:
        TrainingRun.objects.filter(pk=self.run.pk).update(
            evaluations={"metric": self.metric, "history": self.history, **extra},
            updated_at=timezone.now(),
        )


def _tracker(
    run: TrainingRun,
    hyper: Hyperparameters,
    before: dict[str, float],
    reporter: _Reporter,
    evaluation: list[TrainingPair],
    held: list[TrainingPair],
    distractors: Sequence[str] = (),
) -> _EvalTracker | None:
    """The run's early-stopping evaluator: on the eval split and its ``distractors`` (the
    metric the gate compares), else on the held-back pseudo-pairs of a content run; None
    without early stopping or without anything to measure."""
    if not hyper.early_stopping:
        return None
    if held:
        metric = primary_metric({k.removeprefix("pseudo_"): v for k, v in before.items()})
        if metric is None:
            return None
        return _EvalTracker(
            run,
            before,
            reporter,
            lambda encoder: _pseudo_metrics(encoder, held),
            f"pseudo_{metric}",
        )
    metric = primary_metric(before) if evaluation else None
    if metric is None:
        return None  # no eval pairs, or none giving a metric the gate compares
    return _EvalTracker(
        run,
        before,
        reporter,
        lambda encoder: eval_metrics(encoder, evaluation, distractors),
        metric,
    )


def _train(run: TrainingRun) -> str:
    """The body of ``execute_run`` for a claimed run: train, measure, save, record."""
    # torch: only in the worker
    from ..encoder.training import TrainingCancelled, fit, training_precision

    reporter = _Reporter(run)
    try:
        current = serving_record(run.encoder_name, max_age=0)
        TrainingRun.objects.filter(pk=run.pk).update(base_version=current.version)
        base = get_encoder(run.encoder_name, current.version)
        hyper = Hyperparameters(loss=run.loss, **_stored_options(run.hyperparameters))
        options = dict(run.hyperparameters.get("loss_options") or {})
        held: list[TrainingPair] = []  # pseudo-pairs held back (a content run, no eval split)
        train: list[TrainingPair] = []
        if "content" in run.data:
            texts = _content_texts(run.data["content"])
            evaluation: list[TrainingPair] = list(
                TrainingPair.objects.filter(pk__in=run.data.get("eval", []))
            )
            if run.loss == "simcse":
                examples: list[Any] = texts
            else:
                examples, held = _adapt_examples(
                    base, texts, run.loss, hyper.seed, hold=not evaluation
                )
        else:
            train = list(TrainingPair.objects.filter(pk__in=run.data.get("train", [])))
            evaluation = list(TrainingPair.objects.filter(pk__in=run.data.get("eval", [])))
            examples, options = examples_for(run.loss, train)
            if hyper.hard_negatives and run.loss in HARD_NEGATIVE_LOSSES:
                examples = _mined(base, examples, run, current.version, train)
        sts = quality.sts_pairs()
        # The eval split's queries rank its positives among these (the gate's corpus too).
        distractors: list[str] = []
        if evaluation:
            distractors = eval_distractors(run.encoder_name, evaluation, train)
            run.data = {**run.data, "eval_corpus": corpus_record(distractors)}
            TrainingRun.objects.filter(pk=run.pk).update(data=run.data)
        before = (
            candidate_metrics(base, evaluation, run.encoder_name, distractors=distractors)
            if evaluation
            else {}
        )
        if held:  # measured on pairs cut from the content itself: not for the gate
            before = _pseudo_metrics(base, held)
        before.update(quality.general_quality(base, sts))
        TrainingRun.objects.filter(pk=run.pk).update(metrics_before=before)
        tracker = _tracker(run, hyper, before, reporter, evaluation, held, distractors)
        # The serving copy mines and measures the base fast (bf16 or int8 where configured);
        # training starts from the version's float32 weights, in TRAINING_PRECISION.
        trainable = trainable_encoder(current)
        precision = training_precision(sbert_settings.TRAINING_PRECISION, trainable.device)
        run.hyperparameters = {**run.hyperparameters, "precision": precision}
        TrainingRun.objects.filter(pk=run.pk).update(hyperparameters=run.hyperparameters)
        result = fit(
            trainable,
            examples,
            loss=run.loss,
            epochs=int(hyper.epochs),
            batch_size=int(hyper.batch_size),
            learning_rate=float(hyper.learning_rate),
            warmup_ratio=float(hyper.warmup_ratio),
            seed=int(hyper.seed),
            callback=reporter,
            should_stop=reporter.should_stop,
            loss_options=options,
            report_every=1,
            evaluator=tracker,
            eval_every=hyper.eval_every if tracker else None,
            patience=hyper.patience if tracker else None,
            tolerance=float(hyper.tolerance) if tracker else 0.0,
            precision=precision,
        )
        del trainable  # fit trained a copy: free the weights it started from
        reporter.flush()
        if tracker is not None:
            # The kept checkpoint was measured when it was the live model: no second pass
            # (the hybrid figures, measured once per model, are added for a later step).
            after = dict(tracker.measured[result.best_step])
            if result.best_step and evaluation:
                after = candidate_metrics(
                    result.encoder,
                    evaluation,
                    run.encoder_name,
                    measured=after,
                    distractors=distractors,
                )
            tracker.finish(result)
        elif held:
            after = _pseudo_metrics(result.encoder, held)
        else:
            after = (
                candidate_metrics(
                    result.encoder, evaluation, run.encoder_name, distractors=distractors
                )
                if evaluation
                else {}
            )
        after.update(quality.general_quality(result.encoder, sts))
        directory, version = save_encoder(
            result.encoder, run.encoder_name, base_label(run.encoder_name)
        )
        with transaction.atomic():
            candidate, _ = EncoderVersion.objects.update_or_create(
                version=version,
                defaults={
                    "encoder_name": run.encoder_name,
                    "directory": directory,
                    "parent": current.version,
                    "run": run,
                    "metrics": after,
                },
            )
            done = TrainingRun.objects.filter(pk=run.pk, status=RunStatus.RUNNING).update(
                status=RunStatus.SUCCEEDED,
                metrics_after=after,
                finished_at=timezone.now(),
                updated_at=timezone.now(),
            )
            if not done:  # cancelled at the very end: keep nothing
                transaction.set_rollback(True)
                return RunStatus.CANCELLED
        return RunStatus.SUCCEEDED
    except TrainingCancelled as exc:
        TrainingRun.objects.filter(pk=run.pk).update(
            status=RunStatus.CANCELLED,
            step=exc.step,
            error=str(exc),
            finished_at=timezone.now(),
        )
        return RunStatus.CANCELLED
    except Exception as exc:
        logger.exception("Training run %s failed", run.pk)
        TrainingRun.objects.filter(pk=run.pk).update(
            status=RunStatus.FAILED,
            error=f"{type(exc).__name__}: {exc}\n\n{traceback.format_exc()[-3000:]}",
            finished_at=timezone.now(),
            updated_at=timezone.now(),
        )
        return RunStatus.FAILED
