"""Training pairs from what visitors did: (query, text of the row they clicked).

::

    report = behaviour_pairs(since, until)     # PairsReport(created=..., train=..., eval=...)

A click is evidence, not proof: a (query, row) pair is made only when at least
``FEEDBACK["MIN_CLIENTS"]`` distinct visitors clicked that row for that query (queries are
compared normalised: lower-cased, whitespace collapsed; their clicks are merged), and when a
click model fitted to the searches read finds it at least ``FEEDBACK["MIN_RELEVANCE"]`` likely
that visitors wanted the row (``feedback.clickmodel``). A visitor is a client key *on a
network* (``SearchLog.network``: an IPv4 /24 or IPv6 /48, hashed): visitors are counted as the
fewer of distinct clients and of networks, since a script without cookies is a new client at
every search but stays on its few networks. And a network is worth at most ``NETWORK_BUDGET``
visitors in a build, however many (query, row) pairs it clicked: a network that clicked ``n``
pairs, more than the budget, counts as ``NETWORK_BUDGET / n`` of a visitor on each (a script
clicks the same chosen rows from every address it has; an office's visitors click their own few
queries' rows), and its searches are left out of the click model
(``PairsReport.heavy_networks``).

The click model weighs each pair's clicks against every time it was shown (each visitor counted
once, so no visitor's repeated searches outweigh the others'). The text of the row is what its
EmbeddingField encodes (``EmbeddingField.get_source_text``), so the pair teaches exactly what
search compares.

Split by time: the clicks of the most recent ``FEEDBACK["EVAL_SHARE"]`` of the days make the
``eval`` pairs, the earlier ones the ``train`` pairs, so the gate measures a run on behaviour
later than it trained on. A pair clicked often enough in both windows is one of each.

Hard negatives (``FEEDBACK["NEGATIVES"]``): ``"mined"`` stores none (the default recipe mines
one per pair with the serving model when the run starts, ``finetuning.negatives``);
``"unexamined"`` takes the result most often shown below the searches' last click (seen as not
examined by the visitor: arXiv 2408.04197 found such negatives better for embedding training
than skipped ones); ``"skipped"`` the result most often shown above the click and not clicked.
Either falls back on the other kind, and a train pair with neither is left out (a run trains on
triples only when every pair has a negative). A row clicked for the query by anyone is never
its negative.

Every pair records where it came from in ``source``: ``"events:app.Model.field:FIRST..LAST"``
(the days of the clicks read), and who made it in ``PairEvidence`` rows (client and network
keys, the best position, the latest click), which forgetting a person and the purge follow
(``feedback.retention``). Running again over the same or a longer range makes only the pairs
not made before (same query, row text and split), so nothing is duplicated; a new visitor of
an existing pair is added to its evidence. At most ``MAX_PAIRS`` pairs per field are kept: the
newest.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any

from django.apps import apps
from django.db import transaction

from ..conf import sbert_settings
from ..conf.declaration import NEGATIVE_CHOICES, PAIR_OPTIONS
from ..indexing import field_refs, get_ref, light_rows
from ..models import BEHAVIOUR_SOURCE, PairEvidence, TrainingPair
from . import clicks
from .clickmodel import PositionModel, Shown, fit, relevances
from .clicks import PairKey, Visit, click_days

SOURCE_PREFIX = BEHAVIOUR_SOURCE
# Visitors one network is worth in a build at most, spread over the (query, row) pairs it
# clicked: the visitors of one network click their own few queries' rows, where a script
# clicks its chosen rows from every address it has.
NETWORK_BUDGET = 5
MAX_PAIRS = 20_000  # pairs from behaviour kept per field: the newest


@dataclass
class PairsReport:
    """What one build of pairs from behaviour did."""

    created: int = 0
    existing: int = 0  # made by an earlier build: not made again
    train: int = 0  # created, by split
    eval: int = 0
    too_few_clients: int = 0  # (query, row) pairs below MIN_CLIENTS
    heavy_networks: int = 0  # networks that clicked more pairs than NETWORK_BUDGET
    set_aside: int = 0  # (query, row) pairs with too few visitors once those count less
    unlikely: int = 0  # (query, row) pairs the click model finds below MIN_RELEVANCE
    without_negative: int = 0  # train pairs left out: no negative from behaviour
    missing_rows: int = 0  # clicked rows deleted (or unreadable) since
    days: list[date] = field(default_factory=list)
    eval_from: date | None = None  # first day of the eval window (None: no eval pairs)
    sources: list[str] = field(default_factory=list)
    click_models: dict[str, PositionModel] = field(default_factory=dict)  # fitted, by model

    def describe(self) -> str:
        span = f"{self.days[0]}..{self.days[-1]}" if self.days else "no clicks"
        return (
            f"{self.created} pairs created ({self.train} train, {self.eval} eval) from clicks "
            f"of {len(self.days)} days ({span}); {self.existing} already made, "
            f"{self.too_few_clients} clicked by too few visitors, {self.unlikely} more likely "
            f"chance clicks than wanted rows, {self.without_negative} without a negative, "
            f"{self.missing_rows} rows gone; {self.heavy_networks} networks clicked more than "
            f"{NETWORK_BUDGET} pairs ({self.set_aside} pairs rested on them)"
        )


def eval_window(days: list[date], share: float) -> date | None:
    """The first day of the eval window: the most recent ``share`` of ``days`` (at least one
    day, when there are two days or more; None with fewer: no eval pairs)."""
    if len(days) < 2:
        return None
    count = min(len(days) - 1, max(1, round(len(days) * share)))
    return days[-count]


def network_spans(visits: dict[PairKey, list[Visit]]) -> dict[str, int]:
    """How many (query, row) pairs (both splits as one) each network clicked."""
    spans: dict[str, set[tuple[str, ...]]] = defaultdict(set)
    for key, found in visits.items():
        for visit in found:
            spans[visit.network_or_client].add(key[1:])
    return {network: len(pairs) for network, pairs in spans.items()}


def visitors(found: Iterable[Visit], spans: dict[str, int] | None = None) -> float:
    """How many visitors ``found`` are, counted as the module's docstring says (``spans``:
    ``network_spans``; without it each network is worth one)."""
    found = list(found)
    networks = {v.network_or_client for v in found}
    worth = sum(min(1.0, NETWORK_BUDGET / (spans or {}).get(n, 1)) for n in networks)
    return min(len({v.client for v in found}), worth)


def _relevance(
    since: datetime | None,
    until: datetime | None,
    model_label: str | None,
    events: Any = None,
    set_aside: Iterable[str] = (),
) -> tuple[dict[tuple[str, str, str, str], float], dict[str, PositionModel]]:
    """The probability that visitors wanted each clicked (query, model, field, row) pair, by a
    position-based click model (``feedback.clickmodel``) fitted, for each model, to every
    result the window's searches (and those of its clicks) showed, less the ``set_aside``
    networks'; and the fitted models."""
    by_label: dict[str, list[tuple[tuple[str, str, str] | None, Shown, int]]] = defaultdict(list)
    for label, identity, shown, count in clicks.shown(since, until, model_label, events, set_aside):
        by_label[label].append((identity, shown, count))
    wanted: dict[tuple[str, str, str, str], float] = {}
    models: dict[str, PositionModel] = {}
    for label, rows in by_label.items():
        model = models[label] = fit([s for _, s, _ in rows], [c for _, _, c in rows])
        clicked = [(identity, shown) for identity, shown, _ in rows if identity is not None]
        chances = relevances(model, [s for _, s in clicked])
        for ((normalized, field_name, pk), _), chance in zip(clicked, chances, strict=True):
            wanted[(normalized, label, field_name, pk)] = chance
    return wanted, models


def _field_name(model_label: str, field_name: str) -> str:
    """The EmbeddingField a search ranked by: the logged one, else the model's only one."""
    if field_name:
        return field_name
    refs = field_refs(apps.get_model(model_label))
    if not refs:
        raise LookupError(f"{model_label} has no EmbeddingField.")
    return refs[0].name


def row_texts(model_label: str, field_name: str, pks: Iterable[str]) -> dict[str, str]:
    """The source text of each row (by pk as text) of ``model_label`` that still exists: what
    its EmbeddingField encodes. Deleted rows and pks of the wrong type are left out."""
    ref = get_ref(model_label, _field_name(model_label, field_name))
    pk_field = ref.model._meta.pk
    values = {}
    for pk in set(pks):
        try:
            values[pk_field.to_python(pk)] = pk
        except Exception:  # a pk that is not one of this table's: the row cannot exist
            continue
    texts: dict[str, str] = {}
    keys = list(values)
    for start in range(0, len(keys), 500):
        for instance in light_rows(ref, ref.manager.filter(pk__in=keys[start : start + 500])):
            text = ref.field.get_source_text(instance).strip()
            if text:
                texts[str(instance.pk)] = text
    return texts


def source_name(model_label: str, field_name: str, days: list[date]) -> str:
    """``events:app.Model.field:FIRST..LAST``: where a pair from behaviour came from."""
    span = f"{days[0]}..{days[-1]}" if days else ""
    return f"{SOURCE_PREFIX}{model_label}.{field_name}:{span}"[:200]


def pair_options(**given: Any) -> dict[str, Any]:
    """The pair options of one build: each given one (None: ``SBERT["FEEDBACK"]``'s), checked
    as ``PAIR_OPTIONS`` declares it (``ValueError`` naming the option)."""
    chosen = {}
    for option in PAIR_OPTIONS:
        value = given.get(option.name)
        value = sbert_settings.FEEDBACK[option.name.upper()] if value is None else value
        problem = option.problem(value)
        if problem:
            raise ValueError(f"{problem}.")
        chosen[option.name] = value
    return chosen


def behaviour_pairs(
    since: datetime | None = None,
    until: datetime | None = None,
    *,
    model_label: str | None = None,
    min_clients: int | None = None,
    min_relevance: float | None = None,
    negatives: str | None = None,
    eval_share: float | None = None,
) -> PairsReport:
    """Make training pairs from the clicks logged in [``since``, ``until``) and save the new
    ones; see the module's docstring. Options left None take ``SBERT["FEEDBACK"]``'s."""
    chosen = pair_options(
        min_clients=min_clients,
        min_relevance=min_relevance,
        negatives=negatives,
        eval_share=eval_share,
    )
    min_clients, min_relevance = chosen["min_clients"], chosen["min_relevance"]
    negatives, share = chosen["negatives"], chosen["eval_share"]
    report = PairsReport()
    events = clicks.between(since, until, model_label)
    report.days = click_days(events)
    if not report.days:
        return report
    report.eval_from = eval_window(report.days, share)
    visits = clicks.visits(events, report.eval_from)
    spans = network_spans(visits)
    heavy = {network for network, span in spans.items() if span > NETWORK_BUDGET}
    report.heavy_networks = len(heavy)
    kept: dict[PairKey, list[Visit]] = {}
    for key, found in visits.items():
        if visitors(found, spans) >= min_clients - 1e-9:
            # The pair records the visitors it rests on: not the networks that count for less.
            kept[key] = [v for v in found if v.network_or_client not in heavy] or found
        elif visitors(found) >= min_clients:
            report.set_aside += 1
        else:
            report.too_few_clients += 1
    if min_relevance > 0 and kept:
        wanted, report.click_models = _relevance(since, until, model_label, events, heavy)
        likely = {
            key: found
            for key, found in kept.items()
            # a row clicked outside the logged results (a later page) has no places: kept
            if wanted.get(key[1:], 1.0) >= min_relevance
        }
        report.unlikely = len(kept) - len(likely)
        kept = likely
    chosen = clicks.negatives(events, report.eval_from) if negatives != "mined" else {}
    fallback = {"unexamined": "skipped", "skipped": "unexamined"}.get(negatives, "")

    by_target: dict[tuple[str, str], list[PairKey]] = defaultdict(list)
    for key in kept:
        by_target[(key[2], key[3])].append(key)
    made: list[tuple[TrainingPair, list[Visit], str]] = []
    for (label, field_name), keys in by_target.items():
        picks = {}
        for key in keys:
            options = chosen.get(key, {})
            picks[key] = options.get(negatives) or options.get(fallback) or ""
        try:
            pks = [k[4] for k in keys] + [p for p in picks.values() if p]
            texts = row_texts(label, field_name, pks)
        except LookupError:  # the model or field is gone: its clicks teach nothing now
            report.missing_rows += len(keys)
            continue
        source = source_name(label, _field_name(label, field_name), report.days)
        for key, negative_pk in picks.items():
            split, query, _, _, clicked = key
            positive = texts.get(clicked)
            if positive is None:
                report.missing_rows += 1
                continue
            negative = texts.get(negative_pk, "") if negative_pk else ""
            if negatives != "mined" and split == "train" and not negative:
                report.without_negative += 1
                continue
            pair = TrainingPair(
                text_a=query,
                text_b=positive,
                text_negative=negative if split == "train" else "",
                split=split,
                source=source,
            )
            made.append((pair, kept[key], clicked))
        if source not in report.sources:
            report.sources.append(source)
    _save_new(made, report)
    for source in report.sources:
        keep_newest(source.rpartition(":")[0] + ":")
    return report


def _existing(pairs: list[TrainingPair]) -> dict[tuple[str, str, str], int]:
    """The pairs from behaviour already made with the same (query, row text, split) as one of
    ``pairs``, by that key: read for the builds' queries only, in chunks."""
    found: dict[tuple[str, str, str], int] = {}
    queries = sorted({p.text_a for p in pairs})
    for start in range(0, len(queries), 500):
        rows = TrainingPair.objects.filter(
            source__startswith=SOURCE_PREFIX, text_a__in=queries[start : start + 500]
        ).values_list("text_a", "text_b", "split", "pk")
        for text_a, text_b, split, pk in rows.iterator(chunk_size=2000):
            found.setdefault((text_a, text_b, split), pk)
    return found


def _save_new(made: list[tuple[TrainingPair, list[Visit], str]], report: PairsReport) -> None:
    """Save the pairs no earlier build made (same query, row text and split), and the evidence
    of each pair's visitors not recorded yet (on the new pairs and the existing ones)."""
    existing = _existing([pair for pair, _, _ in made])
    new: list[TrainingPair] = []
    evidence: dict[tuple[str, str, str], list[Visit]] = {}
    rows_of: dict[tuple[str, str, str], str] = {}
    for pair, found, object_pk in made:
        key = (pair.text_a, pair.text_b, pair.split)
        rows_of.setdefault(key, object_pk)
        if key in evidence:  # two rows with the same text: one pair, both rows' visitors
            evidence[key].extend(found)
            continue
        evidence[key] = list(found)
        if key in existing:
            report.existing += 1
        else:
            new.append(pair)
    with transaction.atomic():
        TrainingPair.objects.bulk_create(new, batch_size=1000)
        existing.update({(p.text_a, p.text_b, p.split): p.pk for p in new})
        recorded_rows = PairEvidence.objects.filter(pair__in=[existing[k] for k in evidence])
        recorded = set(recorded_rows.values_list("pair", "client"))
        rows = []
        for key, found in evidence.items():
            pk = existing[key]
            for visit in _by_client(found):
                if (pk, visit.client) not in recorded:
                    recorded.add((pk, visit.client))
                    rows.append(
                        PairEvidence(
                            pair_id=pk,
                            object_pk=rows_of[key],
                            client=visit.client,
                            network=visit.network,
                            position=visit.position,
                            clicked_at=visit.last,
                        )
                    )
        PairEvidence.objects.bulk_create(rows, batch_size=2000)
    report.created = len(new)
    report.train = sum(p.split == "train" for p in new)
    report.eval = report.created - report.train


def _by_client(found: Iterable[Visit]) -> Iterator[Visit]:
    """One visit per client: its best position and latest click."""
    merged: dict[str, Visit] = {}
    for visit in found:
        seen = merged.get(visit.client)
        if seen is not None:
            position, last = min(visit.position, seen.position), max(visit.last, seen.last)
            visit = Visit(visit.client, visit.network or seen.network, position, last)
        merged[visit.client] = visit
    return iter(merged.values())


def keep_newest(prefix: str, limit: int | None = None) -> int:
    """Delete the pairs whose ``source`` starts with ``prefix`` but the newest ``limit``
    (default ``MAX_PAIRS``); how many were deleted."""
    limit = MAX_PAIRS if limit is None else limit
    pairs = TrainingPair.objects.filter(source__startswith=prefix)
    oldest_kept = pairs.order_by("-pk").values_list("pk", flat=True)[limit - 1 : limit].first()
    if oldest_kept is None:
        return 0
    return pairs.filter(pk__lt=oldest_kept).delete()[1].get(TrainingPair._meta.label, 0)


__all__ = [
    "MAX_PAIRS",
    "NEGATIVE_CHOICES",
    "NETWORK_BUDGET",
    "SOURCE_PREFIX",
    "PairsReport",
    "Visit",
    "behaviour_pairs",
    "click_days",
    "eval_window",
    "network_spans",
    "keep_newest",
    "row_texts",
    "source_name",
    "visitors",
]
