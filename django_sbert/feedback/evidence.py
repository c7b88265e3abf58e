"""What the pairs from behaviour rest on, read back: independent eval pairs, attack signals,
and the pairs forgetting deletes.

Every pair from behaviour has ``PairEvidence`` rows: the visitors who made it (client and
network keys), where they clicked it and when (``feedback.pairs``). The loop uses them so that
no visitor writes both a run's lesson and its exam, and so that a run whose pairs look scripted
is shown to staff rather than promoted::

    eval_ids = independent_eval(train_ids, eval_ids)   # eval pairs no train visitor made
    flags = attack_signals(train_ids, since=previous_run_start)   # [] or reasons
    pairs_of_clients([key])                            # what forgetting a client deletes

The signals (module constants, each a share of a run's train pairs, read only for runs of at
least ``SIGNAL_MIN_PAIRS`` pairs):

* *concentrated*: ``CONCENTRATED_SHARE`` of the pairs were clicked only from networks that made
  ``MANY_PAIRS`` pairs or more each (honest visitors of a network click a few queries' rows);
* *low positions*: ``LOW_SHARE`` of the pairs were never clicked above position
  ``LOW_POSITION`` (visitors mostly click what they are shown first);
* *new rows*: ``NEW_ROW_SHARE`` of the pairs are on rows no one clicked, for any query,
  before ``since`` (the loop's previous run);
* *burst*: ``BURST_SHARE`` of the visits behind the pairs came in one hour.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from datetime import datetime

from django.db.models import QuerySet

from ..models import PairEvidence, SearchEvent, TrainingPair

SIGNAL_MIN_PAIRS = 10
MANY_PAIRS = 3
CONCENTRATED_SHARE = 0.2
LOW_POSITION = 6
LOW_SHARE = 0.5
NEW_ROW_SHARE = 0.5
BURST_SHARE = 0.2
BURST_MIN_VISITS = 20


def independent_eval(train_ids: Iterable[int], eval_ids: Iterable[int]) -> list[int]:
    """The eval pairs of ``eval_ids`` that no client and no network behind a train pair of
    ``train_ids`` helped make: a visitor's clicks may teach a run or judge it, not both. Pairs
    without evidence (not from behaviour) are kept."""
    evidence = PairEvidence.objects.filter(pair_id__in=list(train_ids))
    clients = evidence.values("client")
    networks = evidence.exclude(network="").values("network")
    kept = (
        TrainingPair.objects.filter(pk__in=list(eval_ids))
        .exclude(evidence__client__in=clients)
        .exclude(evidence__network__in=networks)
        .order_by("pk")
    )
    return list(kept.values_list("pk", flat=True))


def _network(row: PairEvidence) -> str:
    return row.network or f"client:{row.client}"


def attack_signals(train_ids: Sequence[int], *, since: datetime | None = None) -> list[str]:
    """Why the pairs ``train_ids`` look scripted rather than learned from many visitors (see
    the module's docstring); empty when they do not, or when there are too few to tell."""
    rows = list(
        PairEvidence.objects.filter(pair_id__in=list(train_ids)).only(
            "pair_id", "object_pk", "client", "network", "position", "clicked_at"
        )
    )
    by_pair: dict[int, list[PairEvidence]] = defaultdict(list)
    for row in rows:
        by_pair[row.pair_id].append(row)
    total = len(by_pair)
    if total < SIGNAL_MIN_PAIRS:
        return []
    flags = []
    pairs_of_network: Counter[str] = Counter()
    for found in by_pair.values():
        pairs_of_network.update({_network(r) for r in found})
    concentrated = sum(
        all(pairs_of_network[_network(r)] >= MANY_PAIRS for r in found)
        for found in by_pair.values()
    )
    if concentrated >= CONCENTRATED_SHARE * total:
        flags.append(
            f"concentrated: {concentrated} of {total} pairs were clicked only from networks "
            f"that made {MANY_PAIRS} pairs or more each"
        )
    low = sum(min(r.position for r in found) >= LOW_POSITION for found in by_pair.values())
    if low >= LOW_SHARE * total:
        flags.append(
            f"low positions: {low} of {total} pairs were never clicked above position "
            f"{LOW_POSITION}"
        )
    if since is not None:
        rows_clicked = {r.object_pk for r in rows}
        before = set(
            SearchEvent.objects.filter(
                kind="click", created_at__lt=since, object_pk__in=rows_clicked
            ).values_list("object_pk", flat=True)
        )
        new = sum(all(r.object_pk not in before for r in found) for found in by_pair.values())
        if new >= NEW_ROW_SHARE * total:
            flags.append(f"new rows: {new} of {total} pairs are on rows nobody clicked before")
    hours = Counter(r.clicked_at.replace(minute=0, second=0, microsecond=0) for r in rows)
    if len(rows) >= BURST_MIN_VISITS and hours:
        hour, busiest = hours.most_common(1)[0]
        if busiest >= BURST_SHARE * len(rows):
            flags.append(
                f"burst: {busiest} of the {len(rows)} visits behind the pairs came in the hour "
                f"from {hour:%Y-%m-%d %H:00}"
            )
    return flags


def pairs_of_clients(keys: Iterable[str]) -> QuerySet[TrainingPair]:
    """The pairs from behaviour any of the client ``keys`` helped make."""
    return TrainingPair.objects.filter(
        pk__in=PairEvidence.objects.filter(client__in=list(keys)).values("pair_id")
    )


__all__ = ["attack_signals", "independent_eval", "pairs_of_clients"]
