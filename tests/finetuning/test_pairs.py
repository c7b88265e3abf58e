"""Pairs in (CSV / JSONL import, pairs from content) and the fine-tuning commands."""

from __future__ import annotations

import io
import json

import pytest
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command

from django_sbert import serving
from django_sbert.finetuning import options, pairs, runs
from django_sbert.finetuning.examples import default_loss
from django_sbert.finetuning.execution import execute_run
from django_sbert.finetuning.gate import gate
from django_sbert.finetuning.options import Hyperparameters, adapt_hyperparameters
from django_sbert.models import EncoderVersion, RunStatus, TrainingPair, TrainingRun
from tests.testapp.models import Article

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("model_dir")]

TOPICS = [
    ("central bank raises interest rates", "the bank lifted its rate to fight inflation"),
    ("football team wins the cup", "the club took the trophy after a late goal"),
    ("new phone has a better camera", "the handset ships with an improved lens"),
    ("storm closes schools", "heavy rain and wind shut classrooms across the region"),
]


def test_jsonl_import_reads_every_column():
    lines = [
        {"text_a": "a cat", "text_b": "a kitten", "score": 0.9, "split": "eval"},
        {"text_a": "a dog", "text_b": "a car", "label": "contradiction"},
        {"text_a": "q", "text_b": "pos", "text_negative": "neg"},
    ]
    stream = io.StringIO("\n".join(json.dumps(x) for x in lines) + "\n\n")
    report = pairs.import_pairs(stream, "jsonl", source="file")
    assert report.ok and report.created == 3 and report.rows == 3
    scored, labelled, triplet = TrainingPair.objects.order_by("pk")
    assert (scored.score, scored.split, scored.kind) == (0.9, "eval", "scored")
    assert (labelled.label, labelled.split, labelled.kind) == ("contradiction", "train", "labelled")
    assert triplet.kind == "triplet" and triplet.source == "file"


def test_row_errors_name_the_line_and_the_reason():
    stream = io.StringIO(
        '{"text_a": "ok", "text_b": "fine"}\n'
        "not json\n"
        '{"text_a": "x", "text_b": "y", "scroe": 1}\n'
        '{"text_a": "x", "text_b": "y", "split": "test"}\n'
        '["a", "b"]\n'
    )
    report = pairs.import_pairs(stream, "jsonl")
    assert [line for line, _ in report.errors] == [2, 3, 4, 5]
    reasons = " | ".join(reason for _, reason in report.errors)
    assert "not valid JSON" in reasons and "unknown column(s) ['scroe']" in reasons
    assert "split 'test'" in reasons and "not a JSON object" in reasons
    assert report.created == 0 and not TrainingPair.objects.exists()
    stream.seek(0)
    assert pairs.import_pairs(stream, "jsonl", skip_invalid=True).created == 1


def test_csv_without_the_required_columns_says_so():
    report = pairs.import_pairs(io.StringIO("a,b\nx,y\n"), "csv")
    assert report.errors == [(1, "the header lacks text_a, text_b (columns: " + ", ".join(
        pairs.COLUMNS) + ")")]  # fmt: skip


def test_import_command(tmp_path, capsys):
    good = tmp_path / "pairs.csv"
    good.write_text("text_a,text_b,score\nx,y,0.5\nu,v,\n")
    call_command("sbert_import_pairs", str(good), "--split", "eval")
    assert TrainingPair.objects.filter(split="eval", source=str(good)).count() == 2
    bad = tmp_path / "bad.csv"
    bad.write_text("text_a,text_b,score\nx,y,2\n")
    with pytest.raises(CommandError, match="1 of 1 rows are invalid; nothing was imported"):
        call_command("sbert_import_pairs", str(bad))
    assert "bad.csv:2: score '2' is outside [0, 1]" in capsys.readouterr().err


def test_make_pairs_from_content():
    Article.objects.bulk_create(Article(title=a, body=b) for a, b in TOPICS * 5)
    Article.objects.create(title="no body")
    call_command("sbert_make_pairs", "testapp.Article", "title", "body", "--eval-share", "0.3")
    made = TrainingPair.objects.all()
    assert made.count() == 20
    assert {p.source for p in made} == {"testapp.Article:title->body"}
    assert 0 < made.filter(split="eval").count() < 20
    with pytest.raises(CommandError, match="no field 'nope'"):
        call_command("sbert_make_pairs", "testapp.Article", "title", "nope")


def test_default_loss_follows_the_shape_of_the_pairs():
    TrainingPair.objects.bulk_create([TrainingPair(text_a=a, text_b=b) for a, b in TOPICS])
    assert default_loss(TrainingPair.objects.all()) == "mnrl"
    TrainingPair.objects.update(score=0.5)
    assert default_loss(TrainingPair.objects.all()) == "cosine"
    TrainingPair.objects.update(score=None, label="entailment")
    assert default_loss(TrainingPair.objects.all()) == "softmax"


@pytest.mark.heavy
def test_sbert_train_sync_and_promote(capsys):
    TrainingPair.objects.bulk_create(
        [TrainingPair(text_a=f"{a} {n}", text_b=f"{b} {n}") for n in range(3) for a, b in TOPICS]
        + [TrainingPair(text_a=a, text_b=b, split="eval") for a, b in TOPICS]
    )
    Article.objects.create(title=TOPICS[0][0], body=TOPICS[0][1])
    call_command(
        "sbert_train", "--sync", "--promote", "--batch-size", "4", "--learning-rate", "1e-3",
        "--loss", "mnrl",
    )  # fmt: skip
    out = capsys.readouterr().out
    run = TrainingRun.objects.get()
    assert run.status == RunStatus.SUCCEEDED
    candidate = EncoderVersion.objects.get(run=run)
    if "Promoted" in out:
        serving.forget_serving()
        assert serving.encoder_version("default") == candidate.version
        assert Article.objects.get().embedding_version == candidate.version
    else:  # the gate may refuse a worse candidate; the command says so (CommandError)
        pytest.fail(out)


def test_bad_command_arguments_are_clear_errors():
    TrainingPair.objects.create(text_a="a", text_b="b")
    with pytest.raises(CommandError, match="learning_rate must be in"):
        call_command("sbert_train", "--learning-rate", "3", "--loss", "mnrl")
    assert not TrainingRun.objects.exists()


def test_adapt_to_content_with_simcse():
    Article.objects.bulk_create(Article(title=a, body=b) for a, b in TOPICS * 2)
    run = runs.create_run(
        "default",
        hyperparameters=Hyperparameters(loss="simcse", batch_size=4),
        content="testapp.Article.embedding",
        enqueue=False,
    )
    assert execute_run(run.pk) == RunStatus.SUCCEEDED
    run.refresh_from_db()
    assert run.data == {"content": "testapp.Article.embedding"} and run.total_steps > 0
    assert EncoderVersion.objects.filter(run=run).exists()
    with pytest.raises(ValidationError, match="'mnrl' .* or 'simcse', not 'cosent'"):
        runs.create_run(
            "default",
            hyperparameters=Hyperparameters(loss="cosent"),
            content="testapp.Article.embedding",
        )


def articles_to_adapt_to(count: int = 30) -> None:
    """Rows whose text (title, then body) has two sentences to cut a pseudo-query from."""
    Article.objects.bulk_create(
        Article(title=f"{a} (report {i})", body=f"{b}. Story number {i} says more about it.")
        for i in range(count)
        for a, b in [TOPICS[i % len(TOPICS)]]
    )


def test_adapt_to_content_with_pseudo_queries_holds_back_pairs_without_an_eval_split():
    articles_to_adapt_to()
    hyper = adapt_hyperparameters("mnrl", batch_size=4)
    assert (hyper.loss, hyper.learning_rate) == ("mnrl", 5e-5)  # the content recipe
    run = runs.create_run(
        "default", hyperparameters=hyper, content="testapp.Article.embedding", enqueue=False
    )
    assert run.data == {"content": "testapp.Article.embedding", "eval": []}
    assert execute_run(run.pk) == RunStatus.SUCCEEDED
    run.refresh_from_db()
    # 10% of the 30 pseudo-pairs held back: measured before and after, apart from the gate's
    # metrics; at most 27 trained on (those with a mined negative), batches of 4, the mnrl
    # adapt recipe's 2 epochs at most.
    assert 0 < run.total_steps <= 14
    assert set(run.metrics_before) == set(run.metrics_after) >= {"pseudo_ndcg@10"}
    assert run.metrics_after["pseudo_eval_pairs"] == 3
    # Early stopping measured the held-back pairs and kept the checkpoint they scored best.
    evaluations = run.evaluations
    assert evaluations["metric"] == "pseudo_ndcg@10" and evaluations["history"][0][0] == 0
    assert evaluations["history"][0][1] == run.metrics_before["pseudo_ndcg@10"]
    assert evaluations["best_metric"] == max(v for _, v in evaluations["history"])
    assert run.metrics_after["pseudo_ndcg@10"] == evaluations["best_metric"]
    candidate = EncoderVersion.objects.get(run=run)
    assert not gate(candidate).evaluated
    assert "adapted to content, with no eval pairs" in gate(candidate).reason


def test_adapt_to_content_by_default_learns_a_lexical_teachers_margins():
    articles_to_adapt_to()
    hyper = adapt_hyperparameters(batch_size=4)
    assert (hyper.loss, hyper.epochs, hyper.learning_rate) == ("margin_mse", 1, 2e-5)
    run = runs.create_run(
        "default", hyperparameters=hyper, content="testapp.Article.embedding", enqueue=False
    )
    assert run.data == {"content": "testapp.Article.embedding", "eval": []}
    assert execute_run(run.pk) == RunStatus.SUCCEEDED
    run.refresh_from_db()
    # 27 pseudo-pairs trained on (3 held back), one example each (holding all its teacher
    # margins), batches of 4, 1 epoch.
    assert run.total_steps == 7
    assert run.metrics_after["pseudo_eval_pairs"] == 3
    assert run.evaluations["metric"] == "pseudo_ndcg@10"
    assert EncoderVersion.objects.filter(run=run).exists()


def test_margin_mse_is_for_content_not_pairs():
    TrainingPair.objects.bulk_create(TrainingPair(text_a=a, text_b=b) for a, b in TOPICS)
    with pytest.raises(ValidationError, match="it adapts the encoder to a field"):
        runs.create_run(
            "default",
            list(TrainingPair.objects.values_list("pk", flat=True)),
            hyperparameters=Hyperparameters(loss="margin_mse"),
            enqueue=False,
        )
    assert not TrainingRun.objects.exists()


def test_adapt_to_content_is_measured_on_the_eval_split_when_there_is_one():
    articles_to_adapt_to()
    TrainingPair.objects.bulk_create(
        TrainingPair(text_a=a, text_b=b, split="eval") for a, b in TOPICS
    )
    run = runs.create_run(
        "default",
        hyperparameters=adapt_hyperparameters("mnrl", batch_size=4),
        content="testapp.Article.embedding",
        enqueue=False,
    )
    assert sorted(run.data["eval"]) == sorted(TrainingPair.objects.values_list("pk", flat=True))
    assert execute_run(run.pk) == RunStatus.SUCCEEDED
    run.refresh_from_db()
    assert 0 < run.total_steps <= 16
    assert "pseudo_ndcg@10" not in run.metrics_after  # nothing held back
    assert {"ndcg@10", "keyword_ndcg@10", "candidate_fusion_rrf_k"} <= set(run.metrics_after)
    assert run.evaluations["metric"] == "ndcg@10"  # stopped early on the eval split
    assert run.metrics_after["ndcg@10"] == run.evaluations["best_metric"]
    assert gate(EncoderVersion.objects.get(run=run)).metric == "ndcg@10"


def test_content_too_short_to_cut_pseudo_queries_is_refused_with_the_way_out():
    Article.objects.bulk_create(Article(title=f"t{i}", body="") for i in range(4))
    with pytest.raises(ValidationError, match="adapt with 'simcse' instead"):
        runs.create_run(
            "default",
            hyperparameters=adapt_hyperparameters("mnrl"),
            content="testapp.Article.embedding",
            enqueue=False,
        )


def test_the_admin_api_and_command_adapt_with_the_same_defaults(monkeypatch):
    # The default: margin_mse, 1 epoch at 2e-5, batches of 8 four-margin examples.
    assert adapt_hyperparameters() == Hyperparameters(loss="margin_mse", batch_size=8)
    assert adapt_hyperparameters(batch_size=32).batch_size == 32
    monkeypatch.setattr(options, "ADAPT_LOSS", "mnrl")
    monkeypatch.setattr(options, "ADAPT_LEARNING_RATE", 1e-4)
    assert adapt_hyperparameters(epochs=2, seed=None) == Hyperparameters(
        loss="mnrl", learning_rate=1e-4, epochs=2
    )
    articles_to_adapt_to()
    call_command(
        "sbert_train", "--content", "testapp.Article.embedding", "--sync", "--batch-size", "8"
    )
    run = TrainingRun.objects.get()
    assert (run.loss, run.hyperparameters["learning_rate"]) == ("mnrl", 1e-4)
    assert run.hyperparameters["batch_size"] == 8
