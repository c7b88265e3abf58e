"""The corpus the eval split is measured on: its positives plus distractors drawn from the
encoder's rows and the train pairs, the same for early stopping, the candidate and the active
version at the gate (tiny random model, real PostgreSQL)."""

from __future__ import annotations

import math

import pytest

from django_sbert import serving
from django_sbert.finetuning import gate, runs
from django_sbert.finetuning.execution import execute_run
from django_sbert.finetuning.options import Hyperparameters
from django_sbert.models import EncoderVersion, RunStatus, TrainingPair, TrainingRun
from tests.finetuning.topics import TOPICS
from tests.testapp.models import Article

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("model_dir")]


def eval_pairs() -> list[TrainingPair]:
    return TrainingPair.objects.bulk_create(
        TrainingPair(text_a=a, text_b=b, split="eval") for a, b in TOPICS
    )


def train_pairs(copies: int = 3) -> list[TrainingPair]:
    return TrainingPair.objects.bulk_create(
        TrainingPair(text_a=f"{a} {n}", text_b=f"{b} {n}") for n in range(copies) for a, b in TOPICS
    )


def query_copies() -> list[Article]:
    """Rows whose text is an eval query itself (title only): whatever the model, each is the
    nearest text to its query (cosine 1), so it outranks the query's positive."""
    return Article.objects.bulk_create(Article(title=a) for a, _ in TOPICS)


def test_distractors_are_a_seeded_sample_of_rows_and_train_positives():
    evaluation = eval_pairs()
    rows = Article.objects.bulk_create(
        [Article(title=f"row {i}", body="about something else") for i in range(30)]
        + [Article(title=TOPICS[0][1])]  # the text of an eval positive: never a distractor
    )
    train = train_pairs(copies=1)
    texts = gate.eval_distractors("default", evaluation, train, limit=12)
    assert len(texts) == len(set(texts)) == 12
    row_texts = {f"row {i}\nabout something else" for i in range(30)}
    assert set(texts) <= row_texts | {p.text_b for p in train}
    assert not set(texts) & {p.text_b for p in evaluation}
    # Deterministic: the same data, the same sample, whichever run or version asks.
    assert gate.eval_distractors("default", evaluation, train, limit=12) == texts
    everything = gate.eval_distractors("default", evaluation, train, limit=1000)
    assert set(everything) == row_texts | {p.text_b for p in train}
    assert len(rows) == 31
    # Another encoder's rows are not its corpus; the train pairs still are.
    assert set(gate.eval_distractors("other", evaluation, train)) == {p.text_b for p in train}
    # No rows and no train pairs: the eval positives alone, as before distractors existed.
    Article.objects.all().delete()
    assert gate.eval_distractors("default", evaluation) == []
    assert gate.eval_distractors("default", evaluation, train, limit=0) == []


def test_a_distractor_that_outranks_the_positive_lowers_the_metric(tiny_encoder):
    evaluation = eval_pairs()
    query_copies()
    alone = gate.eval_metrics(tiny_encoder, evaluation)
    distractors = gate.eval_distractors("default", evaluation)
    assert sorted(distractors) == sorted(a for a, _ in TOPICS)
    measured = gate.eval_metrics(tiny_encoder, evaluation, distractors)
    # Every query's positive is second at best: nDCG@10 at most 1 / log2(3).
    assert measured["eval_distractors"] == len(TOPICS) and alone["eval_distractors"] == 0
    assert measured["ndcg@10"] <= 1 / math.log2(3) + 1e-9
    assert measured["ndcg@10"] < alone["ndcg@10"]


def test_a_run_measures_early_stopping_and_its_candidate_with_the_distractors():
    query_copies()
    evaluation = eval_pairs()
    train = train_pairs()
    hyper = Hyperparameters(loss="mnrl", batch_size=4, learning_rate=1e-3, patience=2)
    pair_ids = [p.pk for p in evaluation + train]
    run = runs.create_run("default", pair_ids, hyperparameters=hyper, enqueue=False)
    assert execute_run(run.pk) == RunStatus.SUCCEEDED
    run.refresh_from_db()
    distractors = gate.eval_distractors("default", evaluation, train)
    assert run.data["eval_corpus"] == gate.corpus_record(distractors)
    assert run.data["eval_corpus"]["distractors"] == len(TOPICS) * 4  # copies and train texts
    base = serving.get_encoder("default", run.base_version)
    expected = gate.eval_metrics(base, evaluation, distractors)
    assert run.metrics_before["ndcg@10"] == pytest.approx(expected["ndcg@10"], abs=1e-6)
    assert run.metrics_before["eval_distractors"] == len(distractors)
    # Step 0 of early stopping is that measure; the kept step's is the candidate's.
    history = run.evaluations["history"]
    assert history[0][1] == pytest.approx(expected["ndcg@10"], abs=1e-6)
    candidate = EncoderVersion.objects.get(run=run)
    kept = serving.get_encoder("default", candidate.version)
    again = gate.eval_metrics(kept, evaluation, distractors)
    assert candidate.metrics["ndcg@10"] == pytest.approx(again["ndcg@10"], abs=1e-5)
    # Keyword and hybrid figures rank the same corpus.
    assert candidate.metrics["eval_distractors"] == len(distractors)
    assert "keyword_ndcg@10" in candidate.metrics


def test_the_gate_measures_both_versions_on_the_same_corpus():
    evaluation = eval_pairs()
    train = train_pairs()
    hyper = Hyperparameters(loss="mnrl", epochs=1, batch_size=4, hard_negatives=False)
    run = runs.create_run(
        "default", [p.pk for p in evaluation + train], hyperparameters=hyper, enqueue=False
    )
    assert execute_run(run.pk) == RunStatus.SUCCEEDED
    run.refresh_from_db()
    candidate = EncoderVersion.objects.get(run=run)
    active = serving.get_encoder("default", run.base_version)
    trained = serving.get_encoder("default", candidate.version)
    distractors = gate.eval_distractors("default", evaluation, train)
    assert len(distractors) == len(train)  # no rows yet: the train positives

    # The serving version is not the run's base: the gate measures it, on the run's corpus,
    # and compares it with the candidate's metrics as recorded.
    TrainingRun.objects.filter(pk=run.pk).update(base_version="another-version")
    candidate.refresh_from_db()
    verdict = gate.gate(candidate)
    assert verdict.evaluated
    assert verdict.active["ndcg@10"] == pytest.approx(
        gate.eval_metrics(active, evaluation, distractors)["ndcg@10"], abs=1e-6
    )
    assert verdict.candidate["ndcg@10"] == candidate.metrics["ndcg@10"]
    assert verdict.active["eval_distractors"] == verdict.candidate["eval_distractors"]

    # Rows added since the run: a new corpus, on which the candidate is measured again too.
    query_copies()
    now = gate.eval_distractors("default", evaluation, train)
    assert gate.corpus_digest(now) != run.data["eval_corpus"]["digest"]
    verdict = gate.gate(candidate)
    assert verdict.active["ndcg@10"] == pytest.approx(
        gate.eval_metrics(active, evaluation, now)["ndcg@10"], abs=1e-6
    )
    assert verdict.candidate["ndcg@10"] == pytest.approx(
        gate.eval_metrics(trained, evaluation, now)["ndcg@10"], abs=1e-6
    )
    assert verdict.active["eval_distractors"] == verdict.candidate["eval_distractors"] == len(now)


def test_a_row_that_holds_an_eval_answer_is_not_a_distractor():
    """Pairs cut from rows (headline -> lead paragraph): the row the pair came from contains
    the answer and is relevant to the query, so it is left out of the distractors."""
    answer = "The bank lifted its rate to fight inflation once again this year."
    evaluation = TrainingPair.objects.bulk_create(
        [
            TrainingPair(text_a="central bank raises rates", text_b=answer, split="eval"),
            TrainingPair(text_a="cup final", text_b="Cup won", split="eval"),
        ]
    )
    Article.objects.bulk_create(
        [
            Article(title="Bank raises rates", body=f"{answer} Markets fell."),  # holds it
            Article(title="Cup won", body="The club celebrated."),  # a short answer, whole line
            Article(title="Cup won twice", body="A short answer starts this line only."),
            Article(title="Other", body=f"Before it: {answer}"),  # not at a line's start
        ]
    )
    texts = gate.eval_distractors("default", evaluation)
    assert sorted(texts) == sorted(
        ["Cup won twice\nA short answer starts this line only.", f"Other\nBefore it: {answer}"]
    )
    holds = gate.PositiveIndex([answer, "Cup won"])
    assert holds(f"Title\n{answer} More.") and holds("Cup won\nbody")
    assert not holds("Cup won twice") and not holds(answer[:-5]) and not holds(f"{answer}5")
