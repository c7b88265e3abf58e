"""A training run in the worker: claim it, train, measure, save the candidate.

``execute_run(run_id)`` is what the Celery task does. A run trains a copy of the version that
serves when it starts, on the selected ``train`` pairs (or on pseudo-queries cut from a field's
text), with the default recipe unless told otherwise (``options.RECIPES``: mined hard negatives
for positive pairs, and early stopping on the ``eval`` pairs, which keeps the best checkpoint),
measures both on the ``eval`` pairs as the gate does (``gate.eval_metrics``), and a run from
behaviour on the ``guard`` set too, saves the trained model atomically and records it as a
*candidate* ``EncoderVersion``. Nothing it does changes what serves: a failure or a
cancellation leaves status and error text and no model.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.utils import timezone

from ..models import EncoderVersion, RunStatus, TrainingPair, TrainingRun
from ..serving import (
    Serving,
    base_label,
    get_encoder,
    save_encoder,
    serving_record,
    trainable_encoder,
)
from . import guard, quality
from .errors import describe_exception
from .examples import (
    HARD_NEGATIVE_LOSSES,
    adapt_examples,
    content_texts,
    examples_for,
    mined_examples,
)
from .gate import corpus_record, eval_distractors, eval_metrics, primary_metric
from .hybrid import candidate_metrics
from .options import OPTION_NAMES, Hyperparameters
from .progress import EvalTracker, Heartbeat, Reporter

# A run's log lines, from its creation to its end, under the name they always had.
logger = logging.getLogger("django_sbert.finetuning.runs")
# How a run's steps run (docs/benchmarks.md, "Training speed"): forward passes in bfloat16
# autocast where the CPU has native bf16, else float32 (weights stay float32); 128 tokens of
# each text (its evaluations and the model it saves keep the model's own length); in-batch
# negative losses batched by text length, so short pairs do not pay for long ones' padding.
PRECISION = "auto"
MAX_SEQ_LENGTH = 128
LENGTH_BUCKETS = True


def execute_run(run_id: int) -> str:
    """Run a queued training run to the end; returns its final status.

    Only a ``queued`` run starts (a redelivered or cancelled one is left alone). While it
    runs, a heartbeat thread keeps ``updated_at`` fresh (``progress.Heartbeat``).
    """
    claimed = TrainingRun.objects.filter(pk=run_id, status=RunStatus.QUEUED).update(
        status=RunStatus.RUNNING, started_at=timezone.now(), updated_at=timezone.now()
    )
    if not claimed:
        return TrainingRun.objects.filter(pk=run_id).values_list("status", flat=True).first() or ""
    run = TrainingRun.objects.get(pk=run_id)
    with Heartbeat(run.pk):
        return _train(run)


@dataclass
class _Data:
    """What a claimed run trains on and is measured with."""

    examples: list[Any]
    loss_options: dict[str, Any]
    train: list[TrainingPair]  # none for a content run
    evaluation: list[TrainingPair]  # the eval split
    held: list[TrainingPair]  # pseudo-pairs held back: a content run without an eval split
    distractors: list[str] = field(default_factory=list)  # the eval split's corpus


def _train(run: TrainingRun) -> str:
    """The body of ``execute_run`` for a claimed run: train, measure, save, record."""
    # torch: only in the worker
    from ..encoder.training import TrainingCancelled

    reporter = Reporter(run)
    try:
        current = serving_record(run.encoder_name, max_age=0)
        TrainingRun.objects.filter(pk=run.pk).update(base_version=current.version)
        base = get_encoder(run.encoder_name, current.version)
        hyper = Hyperparameters(loss=run.loss, **_stored_options(run.hyperparameters))
        data = _training_data(run, base, current.version, hyper)
        data.distractors = _eval_corpus(run, data)
        sts = quality.sts_pairs()
        before = _measure_before(run, base, data, sts)
        tracker = _tracker(run, hyper, before, reporter, data)
        result = _fit(run, current, hyper, data, reporter, tracker)
        after = _measure_after(run, result, tracker, data, sts)
        if guard.from_behaviour(run):
            guard.record(run, base, result.encoder, current.version)
        return _record(run, result.encoder, current.version, after)
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
            error=describe_exception(exc),
            finished_at=timezone.now(),
            updated_at=timezone.now(),
        )
        return RunStatus.FAILED


def _stored_options(stored: Mapping[str, Any]) -> dict[str, Any]:
    """A run's stored hyperparameters as ``Hyperparameters`` keywords (a run stored before
    early stopping and mining existed trains as it was asked to: without them)."""
    options = {n: stored[n] for n in OPTION_NAMES if stored.get(n) is not None}
    options.setdefault("hard_negatives", False)
    options.setdefault("early_stopping", False)
    options.setdefault("tolerance", 0.0)
    return options


def _training_data(run: TrainingRun, base: Any, version: str, hyper: Hyperparameters) -> _Data:
    """The run's examples from its pairs (mined negatives added) or its content, and its eval
    split."""
    evaluation = list(TrainingPair.objects.filter(pk__in=run.data.get("eval", [])))
    options = dict(run.hyperparameters.get("loss_options") or {})
    if "content" in run.data:
        texts = content_texts(run.data["content"])
        if run.loss == "simcse":
            return _Data(list(texts), options, [], evaluation, [])
        examples, held = adapt_examples(
            base, texts, run.loss, hyper.seed, hold=not evaluation, negatives=hyper.hard_negatives
        )
        return _Data(examples, options, [], evaluation, held)
    train = list(TrainingPair.objects.filter(pk__in=run.data.get("train", [])))
    examples, options = examples_for(run.loss, train)
    if hyper.hard_negatives and run.loss in HARD_NEGATIVE_LOSSES:
        examples = mined_examples(base, examples, run, version, train)
    return _Data(examples, options, train, evaluation, [])


def _eval_corpus(run: TrainingRun, data: _Data) -> list[str]:
    """The distractors the eval split's queries rank their positives among (the gate's corpus
    too), recorded on the run."""
    if not data.evaluation:
        return []
    distractors = eval_distractors(run.encoder_name, data.evaluation, data.train)
    run.data = {**run.data, "eval_corpus": corpus_record(distractors)}
    TrainingRun.objects.filter(pk=run.pk).update(data=run.data)
    return distractors


def _pseudo_metrics(encoder: Any, held: Sequence[TrainingPair]) -> dict[str, float]:
    """nDCG@10 / Recall@10 on held-back pseudo-pairs, as ``pseudo_*`` (the gate ignores them)."""
    return {f"pseudo_{name}": value for name, value in eval_metrics(encoder, held).items()}


def _measure_before(
    run: TrainingRun, base: Any, data: _Data, sts: Sequence[Any]
) -> dict[str, float]:
    """The base model's metrics, recorded as ``metrics_before``."""
    # torch: only in the worker
    from ..encoder.metrics import VectorCache

    before: dict[str, float] = {}
    if data.held:  # measured on pairs cut from the content itself: not for the gate
        before = _pseudo_metrics(base, data.held)
    elif data.evaluation:
        # The eval figures and the hybrid figures rank the same texts: encoded once.
        before = candidate_metrics(
            VectorCache(base), data.evaluation, run.encoder_name, distractors=data.distractors
        )
    before.update(quality.general_quality(base, sts))
    TrainingRun.objects.filter(pk=run.pk).update(metrics_before=before)
    return before


def _tracker(
    run: TrainingRun,
    hyper: Hyperparameters,
    before: dict[str, float],
    reporter: Reporter,
    data: _Data,
) -> EvalTracker | None:
    """The run's early-stopping evaluator: on the eval split and its distractors (the metric
    the gate compares), else on the held-back pseudo-pairs of a content run; None without
    early stopping or without anything to measure."""
    if not hyper.early_stopping:
        return None
    if data.held:
        metric = primary_metric({k.removeprefix("pseudo_"): v for k, v in before.items()})
        if metric is None:
            return None
        held = data.held
        return EvalTracker(
            run,
            before,
            reporter,
            lambda encoder: _pseudo_metrics(encoder, held),
            f"pseudo_{metric}",
        )
    metric = primary_metric(before) if data.evaluation else None
    if metric is None:
        return None  # no eval pairs, or none giving a metric the gate compares
    evaluation, distractors = data.evaluation, data.distractors
    return EvalTracker(
        run,
        before,
        reporter,
        lambda encoder: eval_metrics(encoder, evaluation, distractors),
        metric,
    )


def _fit(
    run: TrainingRun,
    current: Serving,
    hyper: Hyperparameters,
    data: _Data,
    reporter: Reporter,
    tracker: EvalTracker | None,
) -> Any:
    """Train a float32 copy of the serving version in ``PRECISION``, its steps reading
    ``MAX_SEQ_LENGTH`` tokens per text, batched by length when ``LENGTH_BUCKETS`` (all three
    recorded on the run); ``fit``'s result. The serving copy, which mined and measured, may be
    bf16 or int8."""
    # torch: only in the worker
    from ..encoder.training import fit, training_precision

    trainable = trainable_encoder(current)
    precision = training_precision(PRECISION, trainable.device)
    # How the steps run, recorded beside the options: the model's own length when shorter.
    length = min(MAX_SEQ_LENGTH, trainable.max_seq_length)
    speed = {"precision": precision, "max_seq_length": length, "length_buckets": LENGTH_BUCKETS}
    run.hyperparameters = {**run.hyperparameters, **speed}
    TrainingRun.objects.filter(pk=run.pk).update(hyperparameters=run.hyperparameters)
    options = hyper.fit_options(tracker is not None, **speed)
    result = fit(  # trains a copy: the weights it started from go when this returns
        trainable,
        data.examples,
        loss=run.loss,
        options=options,
        callback=reporter,
        should_stop=reporter.should_stop,
        loss_options=data.loss_options,
        evaluator=tracker,
    )
    reporter.flush()
    return result


def _measure_after(
    run: TrainingRun, result: Any, tracker: EvalTracker | None, data: _Data, sts: Sequence[Any]
) -> dict[str, float]:
    """The trained model's metrics: with early stopping, those measured at the kept step (the
    hybrid figures, measured once per model, are added for a later step than 0)."""
    # torch: only in the worker
    from ..encoder.metrics import VectorCache

    if tracker is not None:
        after = dict(tracker.measured[result.best_step])
        if result.best_step and data.evaluation:
            # The kept step's vectors, from its evaluation: the hybrid figures rank what the
            # eval figures ranked, and the eval corpus is not encoded again.
            after = candidate_metrics(
                tracker.vectors.get(result.best_step, result.encoder),
                data.evaluation,
                run.encoder_name,
                measured=after,
                distractors=data.distractors,
            )
        tracker.finish(result)
    elif data.held:
        after = _pseudo_metrics(result.encoder, data.held)
    elif data.evaluation:
        after = candidate_metrics(
            VectorCache(result.encoder),
            data.evaluation,
            run.encoder_name,
            distractors=data.distractors,
        )
    else:
        after = {}
    after.update(quality.general_quality(result.encoder, sts))
    return after


def _record(run: TrainingRun, encoder: Any, parent: str, after: dict[str, float]) -> str:
    """Save the model and record it as a candidate version, unless the run was cancelled
    meanwhile (then nothing is kept)."""
    directory, version = save_encoder(encoder, run.encoder_name, base_label(run.encoder_name))
    with transaction.atomic():
        EncoderVersion.objects.update_or_create(
            version=version,
            defaults={
                "encoder_name": run.encoder_name,
                "directory": directory,
                "parent": parent,
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
