"""The loop: clicks -> pairs -> a fine-tune when enough are new -> a candidate -> the gate.

``tick()`` is what the periodic task does (``learning_tasks.feedback_loop``, every
``celery.feedback_loop_schedule(hours=...)``):

1. make pairs from the clicks of the last ``FEEDBACK["LOOP_DAYS"]`` days (``pairs``);
2. for each encoder whose fields have pairs from behaviour, start a run with the default recipe
   (``runs.create_run``) once ``FEEDBACK["LOOP_MIN_PAIRS"]`` train pairs are new and there are
   eval pairs no visitor of a train pair helped make (``evidence.independent_eval``); the run
   records the signals its pairs show of a script (``evidence.attack_signals``);
3. decide what becomes of each finished run's candidate (``decide``): with
   ``FEEDBACK["AUTO_PROMOTE"]``, promoted through ``promotion.start_promotion`` when no signal
   flagged its run, the gate passes it (eval pairs and guard set) and it beats the serving
   version; otherwise it waits for staff (docs/learning.md, "The loop").

A run from the loop is an ordinary run (its ``data["loop"]`` marks it and records the
decision), so staff follow it, compare it and promote or delete it like any other; the
analytics page lists the loop's runs and what became of them. The worker decides as soon as a
run ends (``learning_tasks``), and every tick decides any run left undecided.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from ..conf import sbert_settings
from ..exceptions import BrokerUnavailable, PromotionRefused, RunConflict
from ..finetuning import promotion, runs
from ..finetuning.examples import default_loss
from ..finetuning.gate import GateResult, stored_verdict
from ..finetuning.options import Hyperparameters
from ..indexing import field_refs
from ..models import EncoderVersion, RunStatus, TrainingPair, TrainingRun, VersionStatus
from .evidence import attack_signals, independent_eval
from .pairs import MAX_PAIRS, SOURCE_PREFIX, PairsReport, behaviour_pairs

logger = logging.getLogger(__name__)

MARK = "loop"  # the key of TrainingRun.data that marks a run of the loop
PROMOTE_REASON = (
    "feedback loop: the gate passed it on the most recent days and on the guard set (AUTO_PROMOTE)"
)


@dataclass
class TickReport:
    """What one tick of the loop did."""

    pairs: PairsReport | None = None
    started: dict[str, int] = field(default_factory=dict)  # encoder -> run pk
    waiting: dict[str, str] = field(default_factory=dict)  # encoder -> why no run started
    decided: dict[int, str] = field(default_factory=dict)  # run pk -> decision

    def as_dict(self) -> dict[str, Any]:
        return {
            "pairs": self.pairs.describe() if self.pairs else "",
            "started": self.started,
            "waiting": self.waiting,
            "decided": {str(k): v for k, v in self.decided.items()},
        }


@dataclass
class LoopRun:
    """A run of the loop, its candidate, and what became of it (for the admin)."""

    run: TrainingRun
    candidate: EncoderVersion | None
    decision: str
    flags: list[str] = field(default_factory=list)  # signals of a script its pairs showed


def behaviour_pair_filter(encoder_name: str) -> Q:
    """Pairs from behaviour over the fields that ``encoder_name`` encodes."""
    refs = [ref for ref in field_refs() if ref.encoder_name == encoder_name]
    condition = Q(pk__in=[])
    for ref in refs:
        condition |= Q(source__startswith=f"{SOURCE_PREFIX}{ref.label}.{ref.name}:")
    return condition


def loop_runs_of(encoder_name: str | None = None) -> QuerySet[TrainingRun]:
    runs_ = TrainingRun.objects.filter(data__has_key=MARK)
    if encoder_name is not None:
        runs_ = runs_.filter(encoder_name=encoder_name)
    return runs_.order_by("-pk")


def new_pairs(encoder_name: str) -> QuerySet[TrainingPair]:
    """Train pairs from behaviour of ``encoder_name`` that no run of the loop trained on yet
    (made after the pairs of its latest run that did not fail or get cancelled)."""
    pairs = TrainingPair.objects.filter(behaviour_pair_filter(encoder_name), split="train")
    last = (
        loop_runs_of(encoder_name)
        .exclude(status__in=[RunStatus.FAILED, RunStatus.CANCELLED])
        .first()
    )
    if last is not None:
        pairs = pairs.filter(pk__gt=max(last.data.get("train") or [0]))
    return pairs


@dataclass
class Plan:
    """What a run of the loop would train on now, or why none would start."""

    train: list[int] = field(default_factory=list)  # the newest MAX_PAIRS train pairs
    evaluation: list[int] = field(default_factory=list)  # eval pairs independent of them
    flags: list[str] = field(default_factory=list)  # signals of a script (evidence)
    new: int = 0  # train pairs new since the loop's last run
    why: str = ""  # why no run starts; "" when one does

    @property
    def ready(self) -> bool:
        return not self.why


def plan(encoder_name: str) -> Plan:
    """The pairs a run of the loop for ``encoder_name`` would train and be judged on, the
    signals they show, or why no run starts (too few new pairs, no independent eval pairs)."""
    needed = int(sbert_settings.FEEDBACK["LOOP_MIN_PAIRS"])
    found = Plan(new=new_pairs(encoder_name).count())
    if found.new < needed:
        found.why = f"{found.new} new train pairs from behaviour, {needed} start a run"
        return found
    pairs = TrainingPair.objects.filter(behaviour_pair_filter(encoder_name))
    if not pairs.filter(split="eval").exists():
        found.why = "no eval pairs from behaviour yet (the most recent days' clicks)"
        return found
    newest = pairs.filter(split="train").order_by("-pk").values_list("pk", flat=True)
    found.train = sorted(newest[:MAX_PAIRS])
    evaluation = pairs.filter(split="eval").values_list("pk", flat=True)
    found.evaluation = independent_eval(found.train, evaluation)
    if not found.evaluation:
        found.why = (
            "no eval pairs from visitors who made no train pair (the gate measures a run on "
            "other visitors' later clicks)"
        )
        return found
    previous = loop_runs_of(encoder_name).first()
    found.flags = attack_signals(found.train, since=previous.created_at if previous else None)
    return found


def maybe_start(encoder_name: str, *, user: Any = None) -> tuple[TrainingRun | None, str]:
    """Start a run of the loop for ``encoder_name`` if enough new pairs wait (``plan``);
    returns the run (or None) and why."""
    found = plan(encoder_name)
    if not found.ready:
        return None, found.why
    pairs = TrainingPair.objects.filter(pk__in=found.train)
    hyperparameters = Hyperparameters(loss=default_loss(pairs))
    mark = {"new_pairs": found.new, "started": timezone.now().isoformat(), "flags": found.flags}
    ids = found.train + found.evaluation
    try:
        # One transaction: the worker is sent the run once its mark is committed with it.
        with transaction.atomic():
            run = runs.create_run(encoder_name, ids, hyperparameters=hyperparameters, user=user)
            run.data = {**run.data, MARK: mark}
            TrainingRun.objects.filter(pk=run.pk).update(data=run.data)
    except (ValidationError, RunConflict, BrokerUnavailable) as exc:
        text = "; ".join(exc.messages) if isinstance(exc, ValidationError) else str(exc)
        return None, f"not started: {text}"
    new = found.new
    logger.info("Feedback loop: run %s of %r started on %d new pairs", run.pk, encoder_name, new)
    if found.flags:
        logger.warning("Feedback loop: run %s is flagged: %s", run.pk, "; ".join(found.flags))
    return run, f"run {run.pk} started on {new} new train pairs"


def decide(run: TrainingRun) -> str:
    """What becomes of a finished loop run's candidate; recorded in ``run.data["loop"]``.

    Without ``AUTO_PROMOTE`` it waits for staff. With it, the candidate is promoted through
    ``promotion.start_promotion`` (the gate asked again there) when no signal flagged its run,
    the gate's stored verdict passes it (eval pairs and guard set) and its primary metric beats
    the serving version's; a candidate the gate cannot judge without measuring again (the
    serving version changed since the run) waits for staff.
    """
    candidate = EncoderVersion.objects.filter(run=run).first()
    if candidate is None:
        decision = f"no candidate (run {run.status})"
    elif candidate.status != VersionStatus.CANDIDATE:
        decision = f"{candidate.get_status_display()} already"
    elif not sbert_settings.FEEDBACK["AUTO_PROMOTE"]:
        decision = "waiting for staff: compare it and promote it, or delete it"
    else:
        decision = _auto_promote(candidate)
    _record(run, decision=decision, decided=timezone.now().isoformat())
    logger.info("Feedback loop: run %s: %s", run.pk, decision)
    return decision


def refusal(candidate: EncoderVersion, verdict: GateResult | None = None) -> str | None:
    """Why ``AUTO_PROMOTE`` would not promote a loop run's ``candidate`` (see ``decide``);
    None when it would. ``verdict``: the gate's stored verdict, when already read."""
    assert candidate.run is not None
    flags = flags_of(candidate.run)
    if flags:
        return (
            f"not promoted: its pairs look scripted ({'; '.join(flags)}); staff may compare "
            "it and promote it, or delete it"
        )
    verdict = verdict or stored_verdict(candidate)
    if verdict is None:
        return "waiting for staff: the serving version changed since the run"
    if not verdict.passed:
        return f"refused by the gate ({verdict.describe()})"
    metric = verdict.metric
    assert metric is not None  # a verdict that passed compared a metric
    if not verdict.candidate[metric] > verdict.active[metric]:
        return f"not promoted: no better than the serving version ({verdict.describe()})"
    return None


def _auto_promote(candidate: EncoderVersion) -> str:
    verdict = stored_verdict(candidate)
    refused = refusal(candidate, verdict)
    if refused is not None:
        return refused
    assert verdict is not None  # refusal() answers when there is none
    try:
        promotion.start_promotion(candidate, reason=PROMOTE_REASON)
    except (PromotionRefused, BrokerUnavailable) as exc:
        return f"not promoted: {exc}"
    return f"promoting ({verdict.describe()})"


def flags_of(run: TrainingRun) -> list[str]:
    """The signals of a script the loop found in ``run``'s pairs (``evidence.attack_signals``)."""
    return list((run.data.get(MARK) or {}).get("flags") or [])


def _record(run: TrainingRun, **values: Any) -> None:
    with transaction.atomic():
        row = TrainingRun.objects.select_for_update().get(pk=run.pk)
        row.data = {**row.data, MARK: {**(row.data.get(MARK) or {}), **values}}
        TrainingRun.objects.filter(pk=run.pk).update(data=row.data)
    run.data = row.data


def undecided() -> QuerySet[TrainingRun]:
    """Loop runs that ended and whose candidate's fate is not recorded yet."""
    return (
        loop_runs_of()
        .filter(status__in=[RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED])
        .exclude(data__loop__has_key="decision")
    )


def decide_finished() -> dict[int, str]:
    """``decide`` every loop run that ended undecided; returns their decisions."""
    return {run.pk: decide(run) for run in undecided()}


def tick(now: datetime | None = None) -> TickReport:
    """One turn of the loop: pairs, decisions, new runs (see the module's docstring)."""
    report = TickReport()
    days = sbert_settings.FEEDBACK["LOOP_DAYS"]
    since = (now or timezone.now()) - timedelta(days=days) if days else None
    report.pairs = behaviour_pairs(since)
    report.decided = decide_finished()
    encoders = sorted({ref.encoder_name for ref in field_refs()})
    for name in encoders:
        if not TrainingPair.objects.filter(behaviour_pair_filter(name)).exists():
            continue
        run, why = maybe_start(name)
        if run is not None:
            report.started[name] = run.pk
        else:
            report.waiting[name] = why
    return report


def loop_runs(limit: int = 10) -> list[LoopRun]:
    """The latest runs of the loop with their candidates and decisions (the admin page)."""
    found = []
    for run in loop_runs_of()[:limit]:
        candidate = EncoderVersion.objects.filter(run=run).first()
        decision = (run.data.get(MARK) or {}).get("decision") or (
            "training" if run.is_active else "deciding"
        )
        found.append(LoopRun(run, candidate, decision, flags_of(run)))
    return found
