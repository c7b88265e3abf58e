"""The default fine-tuning recipe: what the admin, the API and sbert_train use when given no
hyperparameters, hard negatives mined from the site's rows, early stopping on the eval split
(the run page's figures), and general quality measured on a configured STS file."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch
from django.core.exceptions import ValidationError
from django.core.management import call_command

from django_sbert import indexing, serving
from django_sbert.admin.finetuning import FineTuneForm
from django_sbert.api.finetuning import TrainingRunRequestSerializer
from django_sbert.encoder.training import default_eval_every, training_precision
from django_sbert.finetuning import examples, execution, gate, negatives, runs
from django_sbert.finetuning.execution import execute_run
from django_sbert.finetuning.options import (
    EARLY_STOPPING_TOLERANCE,
    RECIPE,
    RECIPES,
    Hyperparameters,
)
from django_sbert.finetuning.quality import read_sts_file
from django_sbert.models import EncoderVersion, RunStatus, TrainingPair, TrainingRun
from tests.finetuning.topics import TOPICS
from tests.testapp.models import Article

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("model_dir")]


def make_pairs(copies: int = 3) -> None:
    TrainingPair.objects.bulk_create(
        [
            TrainingPair(text_a=f"{a} {n}", text_b=f"{b} {n}")
            for n in range(copies)
            for a, b in TOPICS
        ]
        + [TrainingPair(text_a=a, text_b=b, split="eval") for a, b in TOPICS]
    )


def embedded_articles() -> None:
    Article.objects.bulk_create(
        Article(title=f"{a} {n}", body=b) for n in range(2) for a, b in TOPICS
    )
    indexing.embed_stale(indexing.get_ref("testapp.Article", "embedding"))


def test_recipes_fill_what_is_not_given():
    mnrl = Hyperparameters(loss="mnrl")
    assert (mnrl.epochs, mnrl.learning_rate) == (
        RECIPES["mnrl"]["epochs"],
        RECIPES["mnrl"]["learning_rate"],
    )
    assert mnrl.hard_negatives and mnrl.early_stopping and mnrl.eval_every is None
    assert mnrl.tolerance == EARLY_STOPPING_TOLERANCE == 0.01
    cosent = Hyperparameters(loss="cosent")
    assert (cosent.epochs, cosent.learning_rate) == (RECIPE["epochs"], 2e-5)
    cosine = Hyperparameters(loss="cosine")  # scored pairs' default loss: its own recipe
    assert (cosine.epochs, cosine.learning_rate) == (1, 5e-5)
    given = Hyperparameters(loss="mnrl", epochs=7, learning_rate=1e-4)
    assert (given.epochs, given.learning_rate) == (7, 1e-4)
    with pytest.raises(ValidationError, match="patience must be a whole number"):
        Hyperparameters(patience=0).validate()
    with pytest.raises(ValidationError, match="tolerance must be a number from 0 to 1"):
        Hyperparameters(tolerance=-0.5).validate()


def test_a_run_stored_before_an_option_existed_trains_without_it():
    stored = {"epochs": 2, "batch_size": 8, "learning_rate": 5e-5, "patience": 3}
    options = execution._stored_options(stored)
    assert options["hard_negatives"] is False and options["early_stopping"] is False
    assert options["tolerance"] == 0.0  # the strict best step, as such runs were measured
    assert Hyperparameters(loss="mnrl", **options).epochs == 2


def test_admin_api_and_command_use_the_recipe_when_given_nothing(capsys):
    expected = Hyperparameters(loss="mnrl").as_dict()
    form = FineTuneForm(
        {
            "encoder": "default",
            "loss": "mnrl",
            # What the confirmation page posts untouched: its initial values, epochs and
            # learning rate empty, both checkboxes ticked.
            "batch_size": FineTuneForm.base_fields["batch_size"].initial,
            "warmup_ratio": FineTuneForm.base_fields["warmup_ratio"].initial,
            "patience": FineTuneForm.base_fields["patience"].initial,
            "tolerance": FineTuneForm.base_fields["tolerance"].initial,
            "hard_negatives": "on",
            "early_stopping": "on",
        }
    )
    assert form.is_valid(), form.errors
    assert form.hyperparameters().as_dict() == expected
    request = TrainingRunRequestSerializer(data={})
    assert request.is_valid(), request.errors
    assert Hyperparameters.from_options("mnrl", request.validated_data).as_dict() == expected

    make_pairs()
    call_command("sbert_train", "--sync", "--loss", "mnrl", "--batch-size", "4")
    run = TrainingRun.objects.get()
    assert run.status == RunStatus.SUCCEEDED, run.error
    # The worker records how its steps ran: the precision (TRAINING_PRECISION "auto": this
    # CPU's), the tokens per text (TRAINING_MAX_SEQ_LENGTH, at most the tiny model's 64) and
    # the length batching.
    precision = training_precision("auto")
    assert run.hyperparameters == {
        **expected,
        "batch_size": 4,
        "loss_options": {},
        "precision": precision,
        "max_seq_length": 64,
        "length_buckets": True,
    }
    assert run.evaluations["metric"] == "ndcg@10" and run.evaluations["history"][0][0] == 0


def test_default_run_mines_negatives_and_keeps_the_best_checkpoint(caplog):
    embedded_articles()
    make_pairs(copies=4)
    hyper = Hyperparameters(loss="mnrl", batch_size=4, learning_rate=1e-3, patience=2)
    pair_ids = list(TrainingPair.objects.values_list("pk", flat=True))
    run = runs.create_run("default", pair_ids, hyperparameters=hyper, enqueue=False)
    with caplog.at_level(logging.INFO, logger="django_sbert.finetuning.runs"):
        assert execute_run(run.pk) == RunStatus.SUCCEEDED
    run.refresh_from_db()
    assert f"Run {run.pk}: hard negatives for " in caplog.text
    evaluations = run.evaluations
    history = evaluations["history"]
    steps = [step for step, _ in history]
    # At most 24 triples, batch 4, the recipe's epochs: up to 6 steps an epoch, measured
    # about ten times per run.
    total = evaluations["total_steps"]
    every = default_eval_every(total)
    assert total <= 6 * hyper.epochs and steps[:3] == [0, every, 2 * every]
    assert steps[-1] == evaluations["steps"] == run.step == len(run.loss_history)
    # The step kept: the latest within the recipe's tolerance of the best measured.
    top = max(metric for _, metric in history)
    kept = [item for item in history if item[1] >= top - hyper.tolerance][-1]
    assert [evaluations["best_step"], evaluations["best_metric"]] == kept
    assert evaluations["stopped_early"] == (evaluations["steps"] < total)
    # Step 0 is the base model (metrics_before); the metrics kept are the best step's, and
    # they are the candidate's: the gate compares the kept checkpoint.
    assert history[0][1] == pytest.approx(run.metrics_before["ndcg@10"], abs=1e-6)
    assert run.metrics_after["ndcg@10"] == pytest.approx(evaluations["best_metric"], abs=1e-6)
    candidate = EncoderVersion.objects.get(run=run)
    assert candidate.metrics == run.metrics_after
    kept = serving.get_encoder("default", candidate.version)
    # Measured on the eval split and the run's distractors (the articles, the train texts).
    evaluation = list(TrainingPair.objects.filter(split="eval"))
    train = list(TrainingPair.objects.filter(pk__in=run.data["train"]))
    distractors = gate.eval_distractors("default", evaluation, train)
    assert len(distractors) == run.data["eval_corpus"]["distractors"] > 0
    measured = gate.eval_metrics(kept, evaluation, distractors)
    assert measured["ndcg@10"] == pytest.approx(evaluations["best_metric"], abs=1e-5)
    verdict = gate.gate(candidate)
    assert verdict.candidate["ndcg@10"] == run.metrics_after["ndcg@10"]


def test_a_run_without_early_stopping_or_mining_trains_every_step(caplog):
    make_pairs()
    hyper = Hyperparameters(
        loss="mnrl", epochs=1, batch_size=4, hard_negatives=False, early_stopping=False
    )
    pair_ids = list(TrainingPair.objects.values_list("pk", flat=True))
    run = runs.create_run("default", pair_ids, hyperparameters=hyper, enqueue=False)
    with caplog.at_level(logging.INFO, logger="django_sbert.finetuning.runs"):
        assert execute_run(run.pk) == RunStatus.SUCCEEDED
    run.refresh_from_db()
    assert "hard negatives" not in caplog.text
    assert run.evaluations == {} and run.total_steps == 5 and "ndcg@10" in run.metrics_after


def test_too_few_mined_negatives_train_on_the_plain_pairs(caplog, monkeypatch):
    """Mining that finds negatives for a few pairs only (the demo's tiny random model ranks
    every text alike, so most candidates look relevant) must not shrink the run to those
    few: two triples that share a text would make no batch at all."""
    make_pairs()
    pairs = [(f"{a} 0", f"{b} 0") for a, b in TOPICS]
    found = [(*pairs[0], pairs[1][1]), (*pairs[1], pairs[0][1])]  # each holds the other's text
    monkeypatch.setattr(examples, "with_hard_negatives", lambda *args, **kwargs: found)
    hyper = Hyperparameters(loss="mnrl", epochs=1, batch_size=4, early_stopping=False)
    pair_ids = list(TrainingPair.objects.values_list("pk", flat=True))
    run = runs.create_run("default", pair_ids, hyperparameters=hyper, enqueue=False)
    with caplog.at_level(logging.INFO, logger="django_sbert.finetuning.runs"):
        assert execute_run(run.pk) == RunStatus.SUCCEEDED
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.error
    assert f"hard negatives for 2 of {3 * len(TOPICS)} pairs; training on the plain pairs" in (
        caplog.text
    )
    assert run.total_steps == 5  # the plain pairs' steps, as without mining


@pytest.mark.parametrize(
    ("found", "kept"),
    [
        (6, True),  # half the pairs, apart: the triples replace them
        (5, False),  # under half
    ],
)
def test_mined_triples_replace_the_pairs_from_half_of_them(monkeypatch, found, kept):
    pairs = [(f"q{n}", f"p{n}") for n in range(12)]
    triples = [(q, p, f"n{n}") for n, (q, p) in enumerate(pairs[:found])]
    monkeypatch.setattr(examples, "with_hard_negatives", lambda *args, **kwargs: triples)
    run = TrainingRun(pk=1, encoder_name="default")
    assert examples.mined_examples(None, pairs, run, "v", []) == (triples if kept else pairs)
    # Triples that all share a text make no batch: the pairs stay whatever the share.
    shared = [(q, p, "one negative") for q, p in pairs]
    monkeypatch.setattr(examples, "with_hard_negatives", lambda *args, **kwargs: shared)
    assert examples.mined_examples(None, pairs, run, "v", []) == pairs


def test_runs_train_float32_weights_in_the_precision_of_the_setting(settings, monkeypatch):
    """The serving copy may run bf16 (PRECISION): training starts from float32 weights all
    the same, and the runs' precision (execution.PRECISION) reaches fit() and the run's
    record."""
    from django_sbert.encoder import training

    make_pairs()
    encoders = settings.SBERT["ENCODERS"]
    bf16 = {**encoders["default"], "PRECISION": "bfloat16"}
    settings.SBERT = {
        **settings.SBERT,
        "ENCODERS": {**encoders, "default": bf16},
    }
    monkeypatch.setattr(execution, "PRECISION", "float32")
    assert next(serving.get_encoder("default").transformer.parameters()).dtype == torch.bfloat16
    given = []
    real_fit = training.fit

    def fit(encoder, *args, **kwargs):
        given.append(({p.dtype for p in encoder.parameters()}, kwargs["options"].precision))
        return real_fit(encoder, *args, **kwargs)

    monkeypatch.setattr(training, "fit", fit)
    hyper = Hyperparameters(
        loss="mnrl", epochs=1, batch_size=4, hard_negatives=False, early_stopping=False
    )
    pair_ids = list(TrainingPair.objects.values_list("pk", flat=True))
    run = runs.create_run("default", pair_ids, hyperparameters=hyper, enqueue=False)
    assert execute_run(run.pk) == RunStatus.SUCCEEDED, run.error
    run.refresh_from_db()
    assert given == [({torch.float32}, "float32")]
    assert run.hyperparameters["precision"] == "float32"


def test_mining_corpus_reads_the_stored_vectors_of_the_base_version():
    embedded_articles()
    version = serving.encoder_version("default")
    stale = Article.objects.order_by("pk").first()
    Article.objects.filter(pk=stale.pk).update(embedding_version="another-version")
    texts, vectors = negatives.mining_corpus("default", version)
    ref = indexing.get_ref("testapp.Article", "embedding")
    rows = list(Article.objects.exclude(pk=stale.pk).order_by("pk"))
    assert texts == [ref.field.get_source_text(row).strip() for row in rows]
    assert np.allclose(np.asarray(vectors), np.asarray([row.embedding for row in rows]))
    assert negatives.mining_corpus("default", version, limit=3)[0] == texts[:3]
    assert negatives.mining_corpus("default", "no-such-version") == ([], [])
    # The negatives come from those rows: every mined negative is a row's text or a pair's.
    # (The tiny random model ranks everything alike: max_ratio=1 lets any lower score in.)
    pairs = [(f"{a} 0", f"{b} 0") for a, b in TOPICS]
    encoder = serving.get_encoder("default", version)
    triples = negatives.with_hard_negatives(
        encoder, pairs, encoder_name="default", version=version, max_ratio=1.0
    )
    allowed = set(texts) | {p for _, p in pairs}
    assert triples and all(n in allowed and n != p for _, p, n in triples)


def test_a_configured_sts_file_is_measured_before_and_after(settings, tmp_path):
    sts = tmp_path / "sts.tsv"
    sts.write_text(
        "sentence_a\tsentence_b\tscore\n"
        + "".join(f"{a}\t{b}\t{4.0 + i % 2}\n" for i, (a, b) in enumerate(TOPICS))
        + f"{TOPICS[0][0]}\t{TOPICS[1][1]}\t0.5\n{TOPICS[2][0]}\t{TOPICS[3][1]}\t0\n",
        encoding="utf-8",
    )
    assert len(read_sts_file(sts)) == 8
    settings.SBERT = {
        **settings.SBERT,
        "TRAINING": {**settings.SBERT.get("TRAINING", {}), "STS_FILE": str(sts)},
    }
    make_pairs()
    hyper = Hyperparameters(loss="mnrl", epochs=1, batch_size=4, hard_negatives=False)
    pair_ids = list(TrainingPair.objects.values_list("pk", flat=True))
    run = runs.create_run("default", pair_ids, hyperparameters=hyper, enqueue=False)
    assert execute_run(run.pk) == RunStatus.SUCCEEDED
    run.refresh_from_db()
    for metrics in (run.metrics_before, run.metrics_after):
        assert -1 <= metrics["general_sts_spearman"] <= 1
    bad = tmp_path / "bad.tsv"
    bad.write_text("a\tb\t1\nonly one column\n", encoding="utf-8")
    with pytest.raises(ValueError, match="line 2: expected"):
        read_sts_file(bad)
