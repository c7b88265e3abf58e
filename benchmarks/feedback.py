"""Learning from clicks on SciFact: simulated visitors search, click, and the encoder learns.

The site: the SciFact abstracts as ``testapp.Article`` rows (``--rows``, default 0: all 5,183),
embedded by all-MiniLM-L6-v2. The SciFact *train* claims are split in two halves with a fixed
seed: visitors search for the claims of one half; the other half is held back and only measured
(nDCG@10 over its qrels). Nothing from ../shared/eval is read.

Visitors (``--sessions``, seeded): each picks a claim of its half, types it (some shortened to
their first words, some with a typo: two neighbouring letters swapped), searches
(``Article.objects.similar_to``, or ``hybrid_search`` with ``--mode hybrid``) and looks at the
top 10 through a position-based click model: the result at rank r is examined with probability
1 / r^0.7; an examined result is clicked with probability 0.9 when it is relevant to the claim
(qrels), 0.1 otherwise. Sessions are spread over ``--days`` days; each visitor searches from a
network drawn from ``HONEST_NETWORKS`` /24s (so some visitors share one, as in an office). Each
search and its clicks are written as the search log writes them (``SearchLog``: the first page
as ``[[pk, position, score], ...]``, a hashed visitor id; ``SearchEvent`` per click), by this
process. With ``--http`` the site writes them instead: gunicorn serves the REST API, each
visitor searches with ``GET search/`` and reports each click to ``sbert/click/`` with the
result's signed token (``simulate_http``).

Then the code the loop runs: ``feedback.pairs.behaviour_pairs`` (clicks from at least
``--min-clients`` visitors on rows the click model finds at least ``--min-relevance`` likely
wanted, the last tenth of the days as the eval split, negatives ``--negatives``: one or
several of mined, unexamined, skipped, each trained and measured in turn; ``gold`` trains on
the visitors' claims' labelled pairs instead, for comparison, ``gold-shown`` on those a first
page showed, ``right`` on the mined pairs less the wrong ones, ``full`` on those less the
pairs of claims typed shortened or misspelt), a run with the default recipe
(``runs.create_run`` + ``execute_run``, what the worker does; ``--epochs`` and
``--max-pairs`` shorten it; ``--train-seeds`` trains the same pairs once per seed), and the
gate's verdict on the candidate. Both the base model and each candidate are measured the same
way on the held-back claims: ``encoder.metrics.retrieval_metrics`` over every row's text (an
exact ranking).

    HF_HUB_OFFLINE=1 .venv/bin/python -m benchmarks.feedback --sessions 5000
    HF_HUB_OFFLINE=1 .venv/bin/python -m benchmarks.feedback --sessions 200 --rows 800 \\
        --epochs 1 --max-pairs 32 --min-clients 1 --eval-distractors 100   # a smoke run
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from benchmarks.common import DATA, add_json_option, cpu_line, load_average, write_json
from benchmarks.django_setup import article_model

SCIFACT = DATA / "scifact"
MODEL = "all-MiniLM-L6-v2"
EXAMINE_POWER = 0.7  # P(examined at rank r) = 1 / r^0.7
CLICK_RELEVANT, CLICK_OTHER = 0.9, 0.1
GOLD = "gold"  # --negatives gold: the qrels' pairs of the visitors' claims, for comparison
GOLD_SHOWN = "gold-shown"  # only those whose abstract a visitor's first page showed
RIGHT = "right"  # the behaviour pairs (mined negatives) less those the qrels call wrong
FULL = "full"  # the behaviour pairs (mined negatives) less those of claims typed otherwise
SHORTENED, TYPO = 0.15, 0.10  # shares of sessions typing the claim shortened / with a typo
HONEST_NETWORKS = 20_000  # /24 networks visitors search from (5,000 sessions: some share one)


def visitor_address(rng: random.Random) -> str:
    """An address on one of ``HONEST_NETWORKS`` networks (10.x.y.0/24), a random host."""
    network = rng.randrange(HONEST_NETWORKS)
    return f"10.{network // 256}.{network % 256}.{rng.randrange(1, 255)}"


def normalized(query: str) -> str:
    """``query`` as the search log groups it (``feedback.log.normalize_query``)."""
    from django_sbert.feedback.log import normalize_query

    return normalize_query(query)


def relevant_to(data: dict, qid: str | None, did: str | None) -> bool:
    """Whether the qrels call abstract ``did`` relevant to claim ``qid``."""
    return bool(qid) and did in data["relevant"].get(qid, ())


def load(rows: int, seed: int) -> dict:
    """SciFact's corpus and train claims; the claims halved (visitors / held back)."""
    corpus = {}
    for line in (SCIFACT / "corpus.jsonl").open(encoding="utf-8"):
        doc = json.loads(line)
        corpus[doc["_id"]] = (doc.get("title", ""), doc["text"])
    queries = {}
    for line in (SCIFACT / "queries-train.jsonl").open(encoding="utf-8"):
        doc = json.loads(line)
        queries[doc["_id"]] = doc["text"]
    relevant: dict[str, set[str]] = {}
    for line in (SCIFACT / "qrels-train.tsv").read_text().splitlines()[1:]:
        qid, did, score = line.split("\t")
        if int(score) > 0 and did in corpus:
            relevant.setdefault(qid, set()).add(did)
    ids = sorted(q for q in queries if q in relevant)
    random.Random(seed).shuffle(ids)
    half = len(ids) // 2
    judged = sorted({d for q in ids for d in relevant[q]})
    others = sorted(set(corpus) - set(judged))
    random.Random(seed).shuffle(others)
    docs = judged + (others if rows <= 0 else others[: max(0, rows - len(judged))])
    return {
        "corpus": {d: corpus[d] for d in docs},
        "queries": queries,
        "relevant": relevant,
        "visitors": ids[:half],
        "held": ids[half:],
    }


def typed(claim: str, rng: random.Random) -> str:
    """What a visitor types for ``claim``: as is, its first words, or with a typo."""
    draw = rng.random()
    words = claim.split()
    if draw < SHORTENED and len(words) > 4:
        return " ".join(words[: max(3, int(len(words) * 0.6))])
    if draw < SHORTENED + TYPO:
        long_words = [i for i, w in enumerate(words) if len(w) > 3]
        if long_words:
            i = rng.choice(long_words)
            word = words[i]
            j = rng.randrange(len(word) - 1)
            words[i] = word[:j] + word[j + 1] + word[j] + word[j + 2 :]
            return " ".join(words)
    return claim


def simulate(data: dict, pk_of: dict[str, int], args: argparse.Namespace) -> dict:
    """Run the sessions: search, click by the click model, write the log; returns counts."""
    from django.utils import timezone

    from django_sbert.conf import sbert_settings
    from django_sbert.feedback.visitors import network_key_of
    from django_sbert.models import SearchEvent, SearchLog
    from django_sbert.serving import serving_version

    Article = article_model()
    addresses = random.Random(f"{args.seed}-networks")
    search = getattr(Article.objects, "hybrid_search" if args.mode == "hybrid" else "similar_to")
    doc_of = {pk: did for did, pk in pk_of.items()}
    rng = random.Random(args.seed)
    version = serving_version("default")
    start = timezone.now() - timedelta(days=args.days)
    most = int(sbert_settings.FEEDBACK["MAX_QUERY_LENGTH"])
    logs, events = [], []
    clicks = 0
    asked = data.setdefault("asked", {})  # normalised query typed -> the claim it came from
    for session in range(args.sessions):
        qid = rng.choice(data["visitors"])
        query = typed(data["queries"][qid], rng)[:most]
        asked[normalized(query)] = qid
        when = start + timedelta(seconds=args.days * 86400 * session / args.sessions)
        began = time.perf_counter()
        ranked = list(search(query, k=10))
        latency = 1000 * (time.perf_counter() - began)
        client = hashlib.sha256(f"visitor-{args.seed}-{session}".encode()).hexdigest()
        log = SearchLog(
            query=query,
            normalized=normalized(query),
            mode=args.mode,
            model_label="testapp.Article",
            field="embedding",
            encoder_name="default",
            version=version,
            results=[
                [str(row.pk), position, round(float(getattr(row, "similarity", 0.0) or 0.0), 4)]
                for position, row in enumerate(ranked, start=1)
            ],
            result_count=len(ranked),
            client=client,
            network=network_key_of(visitor_address(addresses)),
            latency_ms=latency,
            created_at=when,
        )
        logs.append(log)
        gold = data["relevant"][qid]
        for position, row in enumerate(ranked, start=1):
            if rng.random() >= 1 / position**EXAMINE_POWER:
                continue
            chance = CLICK_RELEVANT if doc_of.get(row.pk) in gold else CLICK_OTHER
            if rng.random() < chance:
                clicks += 1
                events.append(
                    SearchEvent(
                        search=log,
                        object_pk=str(row.pk),
                        position=position,
                        kind="click",
                        client=client,
                        created_at=when + timedelta(seconds=3 + position),
                    )
                )
    SearchLog.objects.bulk_create(logs, batch_size=1000)
    SearchEvent.objects.bulk_create(events, batch_size=1000)
    return {"searches": len(logs), "clicks": clicks}


def simulate_http(data: dict, pk_of: dict[str, int], args: argparse.Namespace) -> dict:
    """The same visitors over HTTP: gunicorn (2 sync processes, the documented hooks,
    ``benchmarks._feedback_settings``) serves the REST API on this database; each session GETs
    ``search/`` and POSTs each click to ``sbert/click/`` with the result's click token, as
    ``clicks.js`` does, so the site's own code logs the search (after the response) and stores
    the click. The searches come in minutes here, not over days: their rows are then spread
    over ``--days`` in the order they came, each click a few seconds after its search."""
    import json as json_module
    from concurrent.futures import ThreadPoolExecutor
    from http.client import HTTPConnection
    from urllib.parse import urlencode

    from django.db import connection
    from django.utils import timezone

    from benchmarks.feedback_overhead import start_gunicorn
    from django_sbert.conf import sbert_settings
    from django_sbert.models import SearchEvent, SearchLog

    doc_of = {pk: did for did, pk in pk_of.items()}
    picks = random.Random(args.seed)
    sessions = [picks.choice(data["visitors"]) for _ in range(args.sessions)]
    log_path = Path(tempfile.mkdtemp(prefix="sbert-feedback-")) / "gunicorn.log"
    server, port = start_gunicorn(2, log_path)
    asked = data.setdefault("asked", {})
    most = int(sbert_settings.FEEDBACK["MAX_QUERY_LENGTH"])

    def call(method: str, path: str, address: str, body: str | None = None) -> tuple[int, bytes]:
        http = HTTPConnection("127.0.0.1", port, timeout=60)  # sync workers close it
        # The visitor's address, as the one proxy the site trusts (NUM_PROXIES 1) reports it.
        headers = {"X-Forwarded-For": address}
        if body:
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        http.request(method, path, body=body, headers=headers)
        response = http.getresponse()
        payload = response.read()
        http.close()
        return response.status, payload

    def session(number: int) -> int:
        rng = random.Random(f"{args.seed}-{number}")  # the same clicks whatever thread runs it
        address = visitor_address(random.Random(f"{args.seed}-{number}-address"))
        qid = sessions[number]
        query = typed(data["queries"][qid], rng)
        params = {"model": "testapp.article", "q": query, "k": 10, "mode": args.mode}
        status, body = call("GET", f"/api/sbert/search/?{urlencode(params)}", address)
        if status != 200:
            raise RuntimeError(f"search answered {status}: {body[:300]!r}")
        results = json_module.loads(body)["results"]
        gold, clicked = data["relevant"][qid], 0
        for position, result in enumerate(results, start=1):
            if rng.random() >= 1 / position**EXAMINE_POWER:
                continue
            chance = CLICK_RELEVANT if doc_of.get(int(result["id"])) in gold else CLICK_OTHER
            if rng.random() < chance:
                status, body = call(
                    "POST", "/sbert/click/", address, urlencode({"token": result["click_token"]})
                )
                if status != 202:
                    raise RuntimeError(f"click answered {status}: {body[:300]!r}")
                clicked += 1
        asked[normalized(query[:most])] = qid  # as the log cuts it
        return clicked

    try:
        with ThreadPoolExecutor(4) as pool:  # two processes, each kept busy
            counts = list(pool.map(session, range(args.sessions)))
    finally:
        server.terminate()
        server.wait(30)
    logged = SearchLog.objects.count()
    clicks = sum(counts)
    if logged != args.sessions or SearchEvent.objects.count() != clicks:
        raise RuntimeError(
            f"{logged} searches and {SearchEvent.objects.count()} clicks stored for "
            f"{args.sessions} sessions and {clicks} clicks answered 202"
        )
    log = connection.ops.quote_name(SearchLog._meta.db_table)
    event = connection.ops.quote_name(SearchEvent._meta.db_table)
    start = timezone.now() - timedelta(days=args.days)
    step = args.days * 86400 / args.sessions
    with connection.cursor() as cursor:
        cursor.execute(
            f"WITH o AS (SELECT id, row_number() OVER (ORDER BY created_at, id) - 1 AS n "
            f"FROM {log}) UPDATE {log} s SET created_at = %s + o.n * %s * interval '1 second' "
            "FROM o WHERE s.id = o.id",
            [start, step],
        )
        cursor.execute(
            f"UPDATE {event} e SET created_at = s.created_at + (3 + e.position) * "
            f"interval '1 second' FROM {log} s WHERE s.id = e.search_id"
        )
    return {"searches": logged, "clicks": clicks}


def held_metrics(encoder: object, data: dict) -> dict:
    """nDCG@10 / Recall@10 (in %) of ``encoder`` on the held-back claims, over every row."""
    from django_sbert.encoder.metrics import retrieval_metrics

    corpus = {did: f"{title}\n{text}" for did, (title, text) in data["corpus"].items()}
    queries = {qid: data["queries"][qid] for qid in data["held"]}
    relevant = {qid: data["relevant"][qid] & set(corpus) for qid in data["held"]}
    result = retrieval_metrics(encoder, queries, corpus, relevant, k=10)
    return {"ndcg@10": 100 * result["ndcg@10"], "recall@10": 100 * result["recall@10"]}


def claim_and_abstract(data: dict, query: str, text: str) -> tuple[str | None, str | None]:
    """The claim a pair's query was typed for, and the abstract its row text is."""
    if "by_text" not in data:
        corpus = data["corpus"].items()
        data["by_text"] = {f"{title[:300]}\n{text}".strip(): did for did, (title, text) in corpus}
    return data["asked"].get(normalized(query)), data["by_text"].get(text.strip())


def pair_rightness(data: dict, pairs: object) -> list[tuple[int, str, bool]]:
    """(pk, split, whether the pair's row is relevant (qrels) to the claim the visitors
    typed)."""
    rightness = []
    for pk, split, query, text in pairs.values_list("pk", "split", "text_a", "text_b"):
        qid, did = claim_and_abstract(data, query, text)
        rightness.append((pk, split, relevant_to(data, qid, did)))
    return rightness


def full_claims(data: dict) -> set[str]:
    """The visitors' claims as typed in full, normalised as the search log stores queries."""
    return {normalized(data["queries"][q]) for q in data["visitors"]}


def coverage(data: dict, pairs: object) -> str:
    """The train pairs against the labelled ones: how many labelled (claim, abstract) pairs of
    the visitors' claims a first page showed and how many the pairs hold, and how many pairs
    are right for a claim typed in full or otherwise (shortened, misspelt), or wrong."""
    full = full_claims(data)
    held, variants, wrong = set(), 0, 0
    for query, text in pairs.filter(split="train").values_list("text_a", "text_b"):
        qid, did = claim_and_abstract(data, query, text)
        if not relevant_to(data, qid, did):
            wrong += 1
        else:
            held.add((qid, did))
            variants += normalized(query) not in full
    shown = shown_abstracts(data)
    labelled = [(q, d) for q in data["visitors"] for d in data["relevant"][q] & set(data["corpus"])]
    seen = sum(d in shown.get(q, ()) for q, d in labelled)
    return (
        f"of {len(labelled)} labelled pairs of the visitors' claims, a first page showed {seen} "
        f"and the train pairs hold {len(held)}; {variants} right pairs of shortened or "
        f"misspelt claims, {wrong} wrong pairs"
    )


def pair_precision(data: dict, pairs: object) -> dict[str, float]:
    """Share of the pairs, per split, whose row is relevant (qrels) to the claim the visitors
    typed: how much of what behaviour teaches is right."""
    right, total = {"train": 0, "eval": 0}, {"train": 0, "eval": 0}
    for _, split, is_right in pair_rightness(data, pairs):
        total[split] += 1
        right[split] += is_right
    return {split: right[split] / total[split] if total[split] else 0.0 for split in total}


def shown_abstracts(data: dict) -> dict[str, set[str]]:
    """For each visitors' claim, the abstracts its searches (as typed, any variant) showed on
    the first page: all that clicks can ever make pairs of."""
    from django_sbert.models import SearchLog

    doc_of = {str(pk): did for did, pk in data["pk_of"].items()}
    shown: dict[str, set[str]] = {}
    for normalized, results in SearchLog.objects.values_list("normalized", "results"):
        qid = data["asked"].get(normalized)
        if qid:
            shown.setdefault(qid, set()).update(doc_of.get(str(r[0]), "") for r in results)
    return shown


def wanted_rows(queries: set[str], bar: float) -> dict[str, set[str]]:
    """For each of ``queries``: the texts of the rows clicked for it that the click model
    finds at least ``bar`` likely wanted, however few visitors clicked them."""
    from django_sbert.feedback.pairs import _relevance, row_texts

    chances, _ = _relevance(None, None, None)
    found: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for (query, label, field, pk), chance in chances.items():
        if query in queries and chance >= bar:
            found.setdefault((label, field), []).append((query, pk))
    wanted: dict[str, set[str]] = {}
    for (label, field), rows in found.items():
        texts = row_texts(label, field, [pk for _, pk in rows])
        for query, pk in rows:
            if pk in texts:
                wanted.setdefault(query, set()).add(texts[pk])
    return wanted


def negatives_wanted(data: dict, pairs: object, bars: list[float]) -> list[str]:
    """How many of the hard negatives a run mines for the train ``pairs`` the qrels call
    relevant to the claim (false negatives), and, for each bar of the click model's relevance,
    how many of those a miner told the rows visitors clicked and the model finds that likely
    wanted could leave out, and how many right negatives it would lose with them."""
    from django_sbert.finetuning.examples import examples_for
    from django_sbert.finetuning.negatives import with_hard_negatives
    from django_sbert.serving import get_encoder, serving_version

    examples, _ = examples_for("mnrl", list(pairs.filter(split="train")))
    version = serving_version("default")
    triples = with_hard_negatives(
        get_encoder("default", version), examples, encoder_name="default", version=version
    )
    relevant = []
    for query, _, negative in triples:
        qid, did = claim_and_abstract(data, query, negative)
        relevant.append(relevant_to(data, qid, did))
    lines = [f"{sum(relevant)} of {len(triples)} mined negatives are relevant to the claim"]
    for bar in bars:
        wanted = wanted_rows({q for q, *_ in triples}, bar)
        caught = [n in wanted.get(q, ()) for q, _, n in triples]
        right = sum(c and r for c, r in zip(caught, relevant, strict=True))
        lines.append(
            f"clicked rows the click model finds at least {bar} likely wanted: {right} of "
            f"them, and {sum(caught) - right} negatives the qrels call not relevant"
        )
    return lines


def gold_pairs(data: dict, seed: int, shown_only: bool = False) -> object:
    """The labelled pairs of the visitors' claims instead of their clicks: (claim, each abstract
    the qrels call relevant), a seeded tenth of the claims as the eval split. What the
    behaviour pairs are measured against. ``shown_only``: only the abstracts the visitors'
    searches showed (``shown_abstracts``), what perfect judges of the first page would give."""
    from django_sbert.feedback.pairs import PairsReport
    from django_sbert.models import TrainingPair

    claims = sorted(data["visitors"])
    held = set(random.Random(seed).sample(claims, max(1, len(claims) // 10)))
    shown = shown_abstracts(data) if shown_only else {}
    pairs = []
    for qid in claims:
        claim = data["queries"][qid]
        data["asked"].setdefault(normalized(claim), qid)
        for did in sorted(data["relevant"][qid] & set(data["corpus"])):
            if shown_only and did not in shown.get(qid, ()):
                continue
            title, text = data["corpus"][did]
            split = "eval" if qid in held else "train"
            row_text = f"{title[:300]}\n{text}"
            pairs.append(TrainingPair(text_a=claim, text_b=row_text, split=split, source=GOLD))
    TrainingPair.objects.bulk_create(pairs)
    train = sum(p.split == "train" for p in pairs)
    return PairsReport(created=len(pairs), train=train, eval=len(pairs) - train)


def train_and_measure(
    data: dict,
    negatives: str,
    args: argparse.Namespace,
    train_seed: int | None = None,
    min_relevance: float | None = None,
) -> dict:
    """Pairs from the log with ``negatives``, a default run, the gate's verdict, and the
    candidate measured on the held-back claims."""
    from django_sbert.feedback.pairs import SOURCE_PREFIX, behaviour_pairs
    from django_sbert.finetuning import runs
    from django_sbert.finetuning.execution import execute_run
    from django_sbert.finetuning.gate import stored_verdict
    from django_sbert.finetuning.options import Hyperparameters
    from django_sbert.models import EncoderVersion, TrainingPair, TrainingRun
    from django_sbert.serving import get_encoder

    TrainingPair.objects.all().delete()
    started = time.perf_counter()
    if negatives in (GOLD, GOLD_SHOWN):
        report = gold_pairs(data, args.seed, shown_only=negatives == GOLD_SHOWN)
        behaviour = TrainingPair.objects.filter(source=GOLD)
    else:
        report = behaviour_pairs(
            min_clients=args.min_clients,
            min_relevance=min_relevance,
            negatives="mined" if negatives in (RIGHT, FULL) else negatives,
        )
        behaviour = TrainingPair.objects.filter(source__startswith=SOURCE_PREFIX)
        if negatives == RIGHT:
            wrong = [pk for pk, _, right in pair_rightness(data, behaviour) if not right]
            TrainingPair.objects.filter(pk__in=wrong, split="train").delete()
        if negatives == FULL:
            full = full_claims(data)
            behaviour.filter(split="train").exclude(text_a__in=full).delete()
    pair_seconds = time.perf_counter() - started
    precision = pair_precision(data, behaviour)
    print(
        f"[{negatives}] {report.describe()} ({pair_seconds:.1f} s); the clicked row is relevant "
        f"to the claim in {precision['train']:.1%} of the train pairs, {precision['eval']:.1%} "
        "of the eval pairs"
    )
    for label, model in report.click_models.items():
        print(f"[{negatives}] click model of {label}: {model.describe()}")
    train = list(behaviour.filter(split="train").order_by("pk").values_list("pk", flat=True))
    if args.max_pairs:
        train = random.Random(args.seed).sample(train, min(args.max_pairs, len(train)))
    ids = train + list(behaviour.filter(split="eval").values_list("pk", flat=True))
    seed = args.seed if train_seed is None else train_seed
    options = {"epochs": args.epochs, "seed": seed, "batch_size": args.batch_size}
    if args.no_early_stopping:
        options["early_stopping"] = False
    hyper = Hyperparameters.from_options("mnrl", options)
    started = time.perf_counter()
    run = runs.create_run("default", ids, hyperparameters=hyper, enqueue=False)
    status = execute_run(run.pk)
    run = TrainingRun.objects.get(pk=run.pk)
    train_seconds = time.perf_counter() - started
    if status != "succeeded":
        raise SystemExit(f"run {status}: {run.error}")
    candidate = EncoderVersion.objects.get(run=run)
    verdict = stored_verdict(candidate)
    started = time.perf_counter()
    after = held_metrics(get_encoder("default", candidate.version), data)
    print(
        f"[{negatives}] run {run.pk} on {len(train)} train pairs: {run.step} steps, kept step "
        f"{(run.evaluations or {}).get('best_step')}; gate: "
        f"{'passed' if verdict and verdict.passed else 'refused'} "
        f"({verdict.describe() if verdict else '-'}); held-back claims: {after}"
    )
    return {
        "pairs": {"train": report.train, "eval": report.eval, "used_train": len(train)},
        "unlikely": report.unlikely,
        "click_model": {label: m.describe() for label, m in report.click_models.items()},
        "precision": precision,
        "steps": run.step,
        "kept_step": (run.evaluations or {}).get("best_step"),
        "gate": verdict.describe() if verdict else "",
        "gate_passed": bool(verdict and verdict.passed),
        "after": after,
        "seconds": {
            "pairs": round(pair_seconds, 1),
            "training run": round(train_seconds, 1),
            "measure": round(time.perf_counter() - started, 1),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=5000)
    parser.add_argument("--rows", type=int, default=0, help="corpus rows; 0: all 5,183")
    parser.add_argument("--days", type=int, default=30, help="days the sessions span")
    parser.add_argument("--mode", choices=("vector", "hybrid"), default="vector")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--http",
        action="store_true",
        help="visitors search and click over HTTP (gunicorn, the REST API and sbert/click/)",
    )
    parser.add_argument(
        "--train-seeds",
        help="comma-separated: train each run once per seed on the same pairs (default: --seed)",
    )
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--min-clients", type=int, help="distinct visitors a pair needs; default: the setting's"
    )
    parser.add_argument(
        "--min-relevance",
        help="how likely the click model must find a pair wanted; default: the setting's; "
        "comma-separated: each trained and measured",
    )
    parser.add_argument(
        "--pairs-only",
        action="store_true",
        help="make the pairs and report their precision for each --min-relevances, then stop",
    )
    parser.add_argument(
        "--min-relevances",
        default="0,0.5,0.9",
        help="with --pairs-only: comma-separated bars, each BAR or VISITORS:BAR",
    )
    parser.add_argument(
        "--negatives",
        default="mined",
        help="comma-separated: mined, unexamined, skipped (each trained and measured); gold: "
        "the visitors' claims' labelled pairs instead of their clicks; gold-shown: only those "
        "whose abstract a first page showed; right: the mined pairs less the wrong ones; full: the "
        "mined pairs less those of claims typed shortened or misspelt",
    )
    parser.add_argument("--epochs", type=int, help="default: the recipe's")
    parser.add_argument("--batch-size", type=int, help="default: the recipe's")
    parser.add_argument("--max-pairs", type=int, help="train on at most this many pairs")
    parser.add_argument(
        "--no-early-stopping",
        action="store_true",
        help="train every step of the recipe and keep the last (default: the recipe's early "
        "stopping on the eval split, which keeps its best step)",
    )
    parser.add_argument(
        "--eval-distractors", type=int, help="finetuning.gate.EVAL_DISTRACTORS (the gate)"
    )
    add_json_option(parser)
    args = parser.parse_args()

    from benchmarks.django_setup import setup_django

    sbert = {
        "ENCODERS": {"default": {"MODEL": MODEL, "THREADS": args.threads, "BATCH_SIZE": 32}},
        "AUTO_EMBED": False,
        "MODEL_DIR": tempfile.mkdtemp(prefix="sbert-bench-models-"),
    }
    setup_django(sbert)
    from django_sbert.conf import sbert_settings
    from django_sbert.finetuning import gate

    if args.eval_distractors is not None:
        gate.EVAL_DISTRACTORS = args.eval_distractors

    if args.min_clients is None:
        args.min_clients = int(sbert_settings.FEEDBACK["MIN_CLIENTS"])
    from django_sbert import indexing
    from django_sbert.feedback import analytics
    from django_sbert.models import SearchLog
    from django_sbert.serving import get_encoder

    print(cpu_line())
    timings: dict[str, float] = {}
    data = load(args.rows, args.seed)
    print(
        f"SciFact train claims: {len(data['visitors'])} searched by visitors, "
        f"{len(data['held'])} held back; corpus {len(data['corpus'])} rows; "
        f"{args.sessions} sessions over {args.days} days; load average {load_average()}"
    )
    Article = article_model()
    started = time.perf_counter()
    Article.objects.all().delete()
    SearchLog.objects.all().delete()
    objs = Article.objects.bulk_create(
        Article(title=title[:300], body=text) for title, text in data["corpus"].values()
    )
    pk_of = data["pk_of"] = {did: obj.pk for did, obj in zip(data["corpus"], objs, strict=True)}
    indexing.embed_stale(indexing.get_ref("testapp.Article", "embedding"))
    timings["embed corpus"] = time.perf_counter() - started

    started = time.perf_counter()
    simulated = (simulate_http if args.http else simulate)(data, pk_of, args)
    timings["sessions"] = time.perf_counter() - started
    summary = analytics.summary(analytics.Window.days(args.days + 1))
    print(
        f"{simulated['searches']} searches, {simulated['clicks']} clicks in "
        f"{timings['sessions']:.1f} s; click-through {summary['click_rate']:.3f}, MRR of the "
        f"first click {summary['mrr']:.3f}"
    )

    if args.pairs_only:
        from django_sbert.feedback.pairs import SOURCE_PREFIX, behaviour_pairs
        from django_sbert.models import TrainingPair

        for item in args.min_relevances.split(","):
            visitors, _, bar_text = item.rpartition(":")
            bar, clients = float(bar_text), int(visitors or args.min_clients)
            TrainingPair.objects.filter(source__startswith=SOURCE_PREFIX).delete()
            started = time.perf_counter()
            report = behaviour_pairs(min_clients=clients, min_relevance=bar)
            seconds = time.perf_counter() - started
            precision = pair_precision(
                data, TrainingPair.objects.filter(source__startswith=SOURCE_PREFIX)
            )
            print(
                f"{clients} visitors, min relevance {bar}: {report.train} train / "
                f"{report.eval} eval pairs, "
                f"{report.unlikely} left out as chance clicks ({seconds:.1f} s); relevant: train "
                f"{precision['train']:.1%}, eval {precision['eval']:.1%}"
            )
            made = TrainingPair.objects.filter(source__startswith=SOURCE_PREFIX)
            print(f"  {coverage(data, made)}")
            for line in negatives_wanted(data, made, [0.0, 0.05, 0.1, 0.2, 0.3, 0.5]):
                print(f"  {line}")
            for label, model in report.click_models.items():
                print(f"  click model of {label}: {model.describe()}")
        return
    started = time.perf_counter()
    before = held_metrics(get_encoder("default"), data)
    timings["measure base"] = time.perf_counter() - started
    print(f"base model on the held-back claims: {before}")
    results = {}
    train_seeds = [int(v) for v in args.train_seeds.split(",")] if args.train_seeds else [None]
    bars = [float(v) for v in args.min_relevance.split(",")] if args.min_relevance else [None]
    for negatives in [n.strip() for n in args.negatives.split(",") if n.strip()]:
        for bar in bars:
            for train_seed in train_seeds:
                name = negatives if bar is None else f"{negatives}, min relevance {bar}"
                name += "" if train_seed is None else f", training seed {train_seed}"
                results[name] = train_and_measure(data, negatives, args, train_seed, bar)

    print(f"\non the {len(data['held'])} held-back claims      nDCG@10   Recall@10")
    print(
        f"  {'all-MiniLM-L6-v2 (base)':<34s}{before['ndcg@10']:7.2f}   {before['recall@10']:8.2f}"
    )
    for negatives, result in results.items():
        after = result["after"]
        label = f"after clicks, negatives {negatives}"
        print(f"  {label:<34s}{after['ndcg@10']:7.2f}   {after['recall@10']:8.2f}")
    for name, seconds in timings.items():
        print(f"  {name:<32s} {seconds:7.1f} s")
    print(f"load average at the end: {load_average()}")
    write_json(
        args.json,
        {
            "sessions": simulated,
            "click_rate": summary["click_rate"],
            "mrr": summary["mrr"],
            "before": before,
            "runs": results,
            "seconds": {k: round(v, 1) for k, v in timings.items()},
        },
    )


if __name__ == "__main__":
    main()
