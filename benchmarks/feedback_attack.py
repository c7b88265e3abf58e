"""Clicks an attacker scripts beside simulated visitors: can they steer the encoder?

The site and the honest visitors of ``benchmarks.feedback``: the SciFact abstracts as rows,
all-MiniLM-L6-v2, ``--sessions`` visitors over ``--days`` days searching (``--mode``) with the
claims of one half of SciFact's train claims, clicking by a position-based click model, each
from a network of ``benchmarks.feedback.HONEST_NETWORKS``. Nothing from ../shared/eval is read.

For each of ``--shares`` (a share of all searches), an attacker adds searches from
``--attack-networks`` networks (a different address of them at every search, no cookies: a new
client key every time), spread over the same days, so both the train and the eval windows hold
its clicks. It picks ``--targets`` claims of the visitors' half and, for each, a row the first
page shows at position 6 to 10 (varied by target) that the qrels call not relevant; each of its
searches types a target claim and clicks that row, and one search in three first clicks the
first result, as a visitor would.

Then what the loop does at its defaults (``AUTO_PROMOTE`` on): pairs from the clicks
(``feedback.pairs.behaviour_pairs``), the loop's plan (``feedback.loop.plan``: the newest pairs,
eval pairs no train visitor made, signals of a script), a run with the default recipe
(``runs.create_run`` + ``execute_run``, the worker's code, the guard included), the gate's
verdict (``gate.stored_verdict``) and what ``AUTO_PROMOTE`` would decide (``loop.refusal``).
Each share reports the targeted rows' median rank for their claims before and after (an exact
cosine ranking over every row), the attacker's pairs among the run's, the flags, the verdict,
the decision, and nDCG@10 on the held-back claims (the honest gain). Share 0 is the honest
visitors alone.

    HF_HUB_OFFLINE=1 .venv/bin/python -m benchmarks.feedback_attack --shares 0,0.05,0.1,0.2
    HF_HUB_OFFLINE=1 .venv/bin/python -m benchmarks.feedback_attack --sessions 300 \\
        --rows 800 --shares 0.2 --targets 10 --epochs 1     # a smoke run
"""

from __future__ import annotations

import argparse
import hashlib
import random
import statistics
import tempfile
import time
from datetime import timedelta
from typing import Any

import numpy as np

from benchmarks.common import add_json_option, cpu_line, load_average, write_json
from benchmarks.django_setup import article_model
from benchmarks.feedback import MODEL, held_metrics, load, normalized, simulate
from django_sbert.encoder.metrics import VectorCache

ATTACK_PREFIX = "attacker"  # the attacker's client keys are hashes of this and a number
FIRST_CLICK_SHARE = 1 / 3  # of its searches also click the first result


def corpus_text(data: dict, did: str) -> str:
    title, text = data["corpus"][did]
    return f"{title}\n{text}"  # as held_metrics ranks them


def choose_targets(data: dict, args: argparse.Namespace) -> list[dict]:
    """``--targets`` claims of the visitors' half, each with a row the site's first page shows
    at position 6 to 10 that is not relevant to it."""
    Article = article_model()
    search = getattr(Article.objects, "hybrid_search" if args.mode == "hybrid" else "similar_to")
    doc_of = {pk: did for did, pk in data["pk_of"].items()}
    rng = random.Random(f"{args.seed}-attack")
    claims = sorted(data["visitors"])
    rng.shuffle(claims)
    targets = []
    for qid in claims:
        if len(targets) == args.targets:
            break
        query = data["queries"][qid]
        ranked = list(search(query, k=10))
        wanted = 6 + len(targets) % 5
        for position in [wanted, *range(6, 11)]:
            if position <= len(ranked):
                did = doc_of.get(ranked[position - 1].pk)
                if did and did not in data["relevant"][qid]:
                    targets.append(
                        {"qid": qid, "query": query, "did": did, "shown": ranked}
                        | {"position": position}
                    )
                    break
    return targets


def attack(data: dict, targets: list[dict], sessions: int, args: argparse.Namespace) -> int:
    """Write the attacker's ``sessions`` searches and clicks to the log; returns its clicks."""
    from django.utils import timezone

    from django_sbert.feedback.visitors import network_key_of
    from django_sbert.models import SearchEvent, SearchLog
    from django_sbert.serving import serving_version

    rng = random.Random(f"{args.seed}-attack-sessions")
    version = serving_version("default")
    start = timezone.now() - timedelta(days=args.days)
    logs, events = [], []
    for number in range(sessions):
        target = targets[number % len(targets)]
        network = number % args.attack_networks
        address = f"198.51.{network}.{rng.randrange(1, 255)}"
        when = start + timedelta(seconds=rng.uniform(0, args.days * 86400))
        client = hashlib.sha256(f"{ATTACK_PREFIX}-{args.seed}-{number}".encode()).hexdigest()
        ranked = target["shown"]
        log = SearchLog(
            query=target["query"],
            normalized=normalized(target["query"]),
            mode=args.mode,
            model_label="testapp.Article",
            field="embedding",
            encoder_name="default",
            version=version,
            results=[[str(row.pk), position, 0.5] for position, row in enumerate(ranked, 1)],
            result_count=len(ranked),
            client=client,
            network=network_key_of(address),
            created_at=when,
        )
        logs.append(log)
        clicked = [target["position"]]
        if rng.random() < FIRST_CLICK_SHARE:
            clicked.insert(0, 1)
        for offset, position in enumerate(clicked):
            events.append(
                SearchEvent(
                    search=log,
                    object_pk=str(ranked[position - 1].pk),
                    position=position,
                    kind="click",
                    client=client,
                    created_at=when + timedelta(seconds=4 + 5 * offset),
                )
            )
    SearchLog.objects.bulk_create(logs, batch_size=1000)
    SearchEvent.objects.bulk_create(events, batch_size=1000)
    return len(events)


def target_ranks(encoder: Any, data: dict, targets: list[dict]) -> list[int]:
    """Each target row's rank for its claim among every row, by cosine."""
    dids = list(data["corpus"])
    corpus = encoder.encode([corpus_text(data, d) for d in dids])
    index = {did: i for i, did in enumerate(dids)}
    ranks = []
    for target in targets:
        query = encoder.encode(target["query"])
        scores = corpus @ query
        ranks.append(1 + int(np.sum(scores > scores[index[target["did"]]])))
    return ranks


def attacker_pairs(data: dict, targets: list[dict], ids: list[int]) -> int:
    """How many of the pairs ``ids`` are a target claim with its target row."""
    from django_sbert.models import TrainingPair

    wanted = set()
    for target in targets:
        title, text = data["corpus"][target["did"]]
        wanted.add((normalized(target["query"]), f"{title[:300]}\n{text}".strip()))
    found = TrainingPair.objects.filter(pk__in=ids).values_list("text_a", "text_b")
    return sum((a, b.strip()) in wanted for a, b in found)


def busiest_networks(exclude_attacker: bool = True) -> list[int]:
    """The most (query, row) pairs one network clicked, for the five busiest networks of the
    honest visitors."""
    from django.db.models import Count

    from django_sbert.models import SearchEvent

    clicks = SearchEvent.objects.filter(kind="click")
    if exclude_attacker:
        clicks = clicks.exclude(search__network__in=ATTACK_NETWORK_KEYS)
    spans = (
        clicks.values("search__network")
        .annotate(pairs=Count("search__normalized", distinct=True))
        .order_by("-pairs")
    )
    return [row["pairs"] for row in spans[:5]]


ATTACK_NETWORK_KEYS: list[str] = []  # filled by main()


def one_share(
    share: float, data: dict, targets: list[dict], base: Any, args: argparse.Namespace
) -> dict:
    """Add the attacker's searches for ``share``, run what the loop runs, measure."""
    from django_sbert.feedback import loop
    from django_sbert.feedback.pairs import behaviour_pairs
    from django_sbert.finetuning import runs
    from django_sbert.finetuning.examples import default_loss
    from django_sbert.finetuning.execution import execute_run
    from django_sbert.finetuning.gate import stored_verdict
    from django_sbert.finetuning.options import Hyperparameters
    from django_sbert.models import EncoderVersion, SearchLog, TrainingPair, TrainingRun
    from django_sbert.serving import get_encoder

    TrainingPair.objects.all().delete()
    TrainingRun.objects.all().delete()
    attackers = [
        hashlib.sha256(f"{ATTACK_PREFIX}-{args.seed}-{n}".encode()).hexdigest()
        for n in range(args.most_attack_sessions)
    ]
    SearchLog.objects.filter(client__in=attackers).delete()
    sessions = round(args.sessions * share / (1 - share)) if share else 0
    clicks = attack(data, targets, sessions, args) if sessions else 0
    started = time.perf_counter()
    report = behaviour_pairs()
    found = loop.plan("default")
    result: dict[str, Any] = {
        "attack searches": sessions,
        "attack clicks": clicks,
        "pairs": report.describe(),
        "heavy networks": report.heavy_networks,
        "attacker pairs made": attacker_pairs(
            data, targets, list(TrainingPair.objects.values_list("pk", flat=True))
        ),
        "run": found.why or "started",
        "flags": found.flags,
    }
    before_ranks = target_ranks(base, data, targets)
    result["target median rank before"] = statistics.median(before_ranks)
    print(f"[share {share}] {sessions} attacker searches, {clicks} clicks; {report.describe()}")
    if not found.ready:
        print(f"[share {share}] no run: {found.why}")
        result["target median rank after"] = result["target median rank before"]
        return result
    result["attacker pairs trained"] = attacker_pairs(data, targets, found.train)
    result["attacker pairs judged"] = attacker_pairs(data, targets, found.evaluation)
    train = TrainingPair.objects.filter(pk__in=found.train)
    options = {"seed": args.seed}
    if args.epochs:
        options["epochs"] = args.epochs
    hyper = Hyperparameters.from_options(default_loss(train), options)
    run = runs.create_run(
        "default", found.train + found.evaluation, hyperparameters=hyper, enqueue=False
    )
    run.data = {**run.data, loop.MARK: {"flags": found.flags}}
    TrainingRun.objects.filter(pk=run.pk).update(data=run.data)
    status = execute_run(run.pk)
    run.refresh_from_db()
    if status != "succeeded":
        raise SystemExit(f"run {status}: {run.error}")
    candidate = EncoderVersion.objects.get(run=run)
    verdict = stored_verdict(candidate)
    refused = loop.refusal(candidate)
    trained = VectorCache(get_encoder("default", candidate.version))
    after_ranks = target_ranks(trained, data, targets)
    after = held_metrics(trained, data)
    result.update(
        {
            "train / eval pairs": [len(found.train), len(found.evaluation)],
            "kept step": (run.evaluations or {}).get("best_step"),
            "gate": verdict.describe() if verdict else "",
            "gate passed": bool(verdict and verdict.passed),
            "auto promote": refused or "promotes it",
            "target median rank after": statistics.median(after_ranks),
            "target ranks": list(zip(before_ranks, after_ranks, strict=True)),
            "after": after,
            "seconds": round(time.perf_counter() - started, 1),
        }
    )
    print(
        f"[share {share}] run on {len(found.train)} train / {len(found.evaluation)} eval pairs "
        f"({result['attacker pairs trained']} / {result['attacker pairs judged']} the "
        f"attacker's); flags {found.flags or 'none'}; gate "
        f"{'passed' if result['gate passed'] else 'refused'} ({result['gate']}); AUTO_PROMOTE: "
        f"{result['auto promote']}; targets' median rank {result['target median rank before']}"
        f" -> {result['target median rank after']}; held-back nDCG@10 {after['ndcg@10']:.2f}"
    )
    # The next share measures against the base model again.
    EncoderVersion.objects.filter(pk=candidate.pk).delete()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=5000, help="honest visitors' searches")
    parser.add_argument("--rows", type=int, default=0, help="corpus rows; 0: all 5,183")
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--mode", choices=("vector", "hybrid"), default="hybrid")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--shares", default="0,0.05,0.1,0.2", help="attacker's share of searches")
    parser.add_argument("--targets", type=int, default=40, help="claims the attacker targets")
    parser.add_argument("--attack-networks", type=int, default=4)
    parser.add_argument("--epochs", type=int, help="default: the recipe's")
    parser.add_argument("--threads", type=int, default=2)
    add_json_option(parser)
    args = parser.parse_args()
    shares = [float(v) for v in args.shares.split(",")]
    if any(not 0 <= s < 1 for s in shares):
        parser.error("--shares: each in [0, 1)")
    args.most_attack_sessions = max(round(args.sessions * s / (1 - s)) for s in shares) + 1

    from benchmarks.django_setup import setup_django

    setup_django(
        {
            "ENCODERS": {"default": {"MODEL": MODEL, "THREADS": args.threads, "BATCH_SIZE": 32}},
            "AUTO_EMBED": False,
            "MODEL_DIR": tempfile.mkdtemp(prefix="sbert-bench-models-"),
            "FEEDBACK": {"AUTO_PROMOTE": True, "LOOP_DAYS": None},
        }
    )
    from django_sbert import indexing
    from django_sbert.models import SearchLog
    from django_sbert.serving import get_encoder

    print(cpu_line())
    data = load(args.rows, args.seed)
    Article = article_model()
    Article.objects.all().delete()
    SearchLog.objects.all().delete()
    objs = Article.objects.bulk_create(
        Article(title=title[:300], body=text) for title, text in data["corpus"].values()
    )
    data["pk_of"] = {did: obj.pk for did, obj in zip(data["corpus"], objs, strict=True)}
    indexing.embed_stale(indexing.get_ref("testapp.Article", "embedding"))
    honest = simulate(data, data["pk_of"], argparse.Namespace(**vars(args), http=False))
    from django_sbert.feedback.visitors import network_key_of

    ATTACK_NETWORK_KEYS.extend(network_key_of(f"198.51.{n}.1") for n in range(args.attack_networks))
    print(f"honest visitors: the busiest networks clicked for {busiest_networks()} queries")
    print(
        f"{honest['searches']} honest searches, {honest['clicks']} clicks over {args.days} days; "
        f"load average {load_average()}"
    )
    targets = choose_targets(data, args)
    base = VectorCache(get_encoder("default"))
    before = held_metrics(base, data)
    print(f"base model on the held-back claims: {before}; {len(targets)} targets")
    results = {}
    for share in shares:
        results[str(share)] = one_share(share, data, targets, base, args)

    print(f"\n{'share':>6} {'run':>8} {'attacker pairs':>15} {'targets rank':>13} "
          f"{'gate':>8} {'auto':>8} {'nDCG@10':>8} {'gain':>6}")  # fmt: skip
    for share, result in results.items():
        after = result.get("after", before)["ndcg@10"]
        print(
            f"{share:>6} {('yes' if result['run'] == 'started' else 'no'):>8} "
            f"{result.get('attacker pairs trained', 0):>15} "
            f"{result['target median rank before']:>6} -> {result['target median rank after']:<4}"
            f"{('passed' if result.get('gate passed') else 'refused'):>8} "
            f"{('yes' if result.get('auto promote') == 'promotes it' else 'no'):>8} "
            f"{after:8.2f} {after - before['ndcg@10']:+6.2f}"
        )
    print(f"load average at the end: {load_average()}")
    write_json(args.json, {"before": before, "shares": results, "honest": honest})


if __name__ == "__main__":
    main()
