"""Judgment lists filled from CSV, JSON Lines, TREC qrels and the eval pairs, all or nothing."""

from __future__ import annotations

import io
import json

import pytest
from django.contrib.contenttypes.models import ContentType
from django.core.management import CommandError, call_command
from django.db import IntegrityError, transaction

from django_sbert.encoder.metrics import ranking_metrics
from django_sbert.evaluation import judgments
from django_sbert.exceptions import JudgmentsImportError, SbertError
from django_sbert.models import JudgedQuery, Judgment, JudgmentList, TrainingPair
from tests.testapp.models import Article

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("model_dir")]

TOPICS = [
    ("bank", "Central bank raises rates", "The bank lifted its rate to fight inflation."),
    ("cup", "Football team wins the cup", "The club took the trophy after a late goal."),
    ("phone", "New phone has a better camera", "The handset ships with an improved lens."),
    ("storm", "Storm closes schools", "Heavy rain and wind shut classrooms across the region."),
]


@pytest.fixture
def articles() -> dict[str, Article]:
    """One article per topic, its category the topic's document id."""
    return {
        doc: Article.objects.create(title=title, body=body, category=doc)
        for doc, title, body in TOPICS
    }


@pytest.fixture
def judgment_list() -> JudgmentList:
    return JudgmentList.objects.create(
        name="news", content_type=ContentType.objects.get_for_model(Article), field="embedding"
    )


def grades(judgment_list: JudgmentList) -> dict[str, dict[str, int]]:
    return {
        q.text: {j.object_pk: j.grade for j in q.judgments.all()}
        for q in judgment_list.queries.prefetch_related("judgments")
    }


def test_csv_with_row_pks(articles, judgment_list):
    bank, cup = articles["bank"].pk, articles["cup"].pk
    text = (
        f"query,object_pk,grade\ninterest rates,{bank},3\ninterest rates,{cup},0\nsoccer,{cup},2\n"
    )
    report = judgments.import_csv(io.StringIO(text), judgment_list)
    assert report.ok and (report.rows, report.queries, report.judgments) == (3, 2, 3)
    assert grades(judgment_list) == {
        "interest rates": {str(bank): 3, str(cup): 0},
        "soccer": {str(cup): 2},
    }
    assert str(judgment_list) == "news" and str(JudgedQuery.objects.get(text="soccer")) == "soccer"


def test_jsonl_with_document_ids_mapped_by_a_dict(articles, judgment_list):
    lines = [
        {"query": "weather", "doc_id": "w1", "grade": 3},
        {"query": "weather", "doc_id": "w2", "grade": 1},
        {"query": "camera", "object_pk": articles["phone"].pk, "grade": "2"},
    ]
    stream = io.BytesIO(("\n".join(json.dumps(x) for x in lines) + "\n\n").encode())
    doc_ids = {"w1": articles["storm"], "w2": articles["bank"].pk}  # a row, or its pk
    report = judgments.import_jsonl(stream, judgment_list, doc_ids=doc_ids)
    assert report.ok and report.judgments == 3
    assert grades(judgment_list) == {
        "weather": {str(articles["storm"].pk): 3, str(articles["bank"].pk): 1},
        "camera": {str(articles["phone"].pk): 2},
    }


def test_trec_qrels_with_a_queries_file_and_the_doc_id_field(articles, judgment_list, tmp_path):
    qrels = tmp_path / "test.qrels"
    qrels.write_text("q1 0 bank 2\nq1 0 storm 0\nq2 0 cup 3\n")
    queries = tmp_path / "queries.tsv"
    queries.write_text("q1\twho sets interest rates\nq2\twinning the trophy\nq3\tunused\n")
    report = judgments.import_trec_qrels(qrels, judgment_list, queries=queries, doc_ids="category")
    assert report.ok and (report.queries, report.judgments) == (2, 3)
    assert grades(judgment_list) == {
        "who sets interest rates": {str(articles["bank"].pk): 2, str(articles["storm"].pk): 0},
        "winning the trophy": {str(articles["cup"].pk): 3},
    }


def test_beir_qrels_with_jsonl_queries_through_the_command(articles, tmp_path):
    qrels = tmp_path / "qrels.tsv"
    qrels.write_text("query-id\tcorpus-id\tscore\n7\tphone\t1\n8\tstorm\t1\n")
    queries = tmp_path / "queries.jsonl"
    queries.write_text(
        json.dumps({"_id": "7", "text": "better lens"})
        + "\n"
        + json.dumps({"_id": "8", "text": "rain shuts schools", "metadata": {}})
        + "\n"
    )
    out = io.StringIO()
    call_command(
        "sbert_import_judgments",
        "beir",
        "testapp.Article.embedding",
        str(qrels),
        "--queries",
        str(queries),
        "--doc-id-field",
        "category",
        stdout=out,
    )
    assert "Imported 2 judgments (2 new queries) into new judgment list 'beir'" in out.getvalue()
    made = JudgmentList.objects.get(name="beir")
    assert (made.content_type.model_class(), made.field) == (Article, "embedding")
    assert grades(made) == {
        "better lens": {str(articles["phone"].pk): 1},
        "rain shuts schools": {str(articles["storm"].pk): 1},
    }


def test_eval_pairs_match_the_row_that_holds_text_b(articles, judgment_list):
    TrainingPair.objects.bulk_create(
        [
            TrainingPair(
                text_a="what did the central bank do",
                text_b=TOPICS[0][2],  # the body: a line of the row's text (title, body)
                text_negative=TOPICS[3][2],
                split="eval",
            ),
            TrainingPair(text_a="sports final", text_b=TOPICS[1][1], split="eval"),  # the title
            TrainingPair(text_a="not on the site", text_b="A text no row holds.", split="eval"),
            TrainingPair(text_a="training only", text_b=TOPICS[2][2], split="train"),
            TrainingPair(text_a="scored", text_b=TOPICS[2][2], score=0.4, split="eval"),
        ]
    )
    report = judgments.from_eval_pairs(judgment_list)
    assert grades(judgment_list) == {
        "what did the central bank do": {
            str(articles["bank"].pk): judgments.PAIR_GRADE,
            str(articles["storm"].pk): 0,  # its hard negative
        },
        "sports final": {str(articles["cup"].pk): judgments.PAIR_GRADE},
    }
    unmatched = TrainingPair.objects.get(text_a="not on the site")
    assert report.unmatched == [unmatched.pk] and report.rows == 3
    # Again through the command, into a list of its own.
    out, err = io.StringIO(), io.StringIO()
    call_command(
        "sbert_import_judgments",
        "held-out",
        "testapp.Article.embedding",
        "--from-eval-pairs",
        stdout=out,
        stderr=err,
    )
    assert "Imported 3 judgments (2 new queries)" in out.getvalue()
    assert "1 of 3 eval pairs have a text_b that is no row's text" in err.getvalue()


def test_eval_pairs_that_match_no_row_are_refused(articles, judgment_list):
    with pytest.raises(JudgmentsImportError, match="No eval pairs"):
        judgments.from_eval_pairs(judgment_list)
    TrainingPair.objects.create(text_a="q", text_b="Nothing like any row.", split="eval")
    with pytest.raises(JudgmentsImportError, match="None of the 1 eval pairs"):
        judgments.from_eval_pairs(judgment_list)
    assert not JudgedQuery.objects.exists()


def test_a_bad_file_is_refused_whole_with_each_line_named(articles, judgment_list):
    bank = articles["bank"].pk
    text = (
        "query,object_pk,grade\n"
        f"rates,{bank},3\n"  # good
        f"rates,{bank},5\n"  # grade out of range
        "rates,999999,1\n"  # no such row
        f"rates,{bank},1\n"  # the row is graded on line 2 already
        f",{bank},1\n"  # no query
        "cup,nonsense,1\n"  # not a pk at all
    )
    report = judgments.import_csv(io.StringIO(text), judgment_list)
    assert [line for line, _ in report.errors] == [3, 4, 5, 6, 7]
    why = dict(report.errors)
    assert "grade '5' is not one of 0, 1, 2, 3" in why[3]
    assert why[4] == "no testapp.Article has pk '999999'"
    assert "graded for this query already, on line 2" in why[5]
    assert why[6] == "query is empty"
    assert not JudgedQuery.objects.exists() and not Judgment.objects.exists()
    # --skip-invalid keeps the good line.
    assert judgments.import_csv(io.StringIO(text), judgment_list, skip_invalid=True).judgments == 1


def test_the_command_refuses_a_bad_file_and_keeps_no_list(articles, tmp_path):
    bad = tmp_path / "graded.jsonl"
    bad.write_text(
        json.dumps({"query": "rates", "object_pk": articles["bank"].pk, "grade": 2})
        + "\nnot json\n"
        + json.dumps({"query": "rates", "doc_id": "bank", "grade": 1, "note": "x"})
        + "\n"
    )
    err = io.StringIO()
    with pytest.raises(CommandError, match=r"2 of 3 lines are invalid; nothing was imported "):
        call_command(
            "sbert_import_judgments", "fresh", "testapp.Article.embedding", str(bad), stderr=err
        )
    assert f"{bad}:2: not valid JSON" in err.getvalue()
    assert f"{bad}:3: unknown column(s) ['note']" in err.getvalue()
    assert not JudgmentList.objects.filter(name="fresh").exists()


def test_whole_file_problems_raise_judgments_import_error(articles, judgment_list, tmp_path):
    with pytest.raises(JudgmentsImportError, match="not UTF-8"):
        judgments.import_csv(
            io.BytesIO(b"query,object_pk,grade\nr\xe9sum\xe9,1,1\n"), judgment_list
        )
    queries = tmp_path / "queries.txt"
    queries.write_text("q1 has no tab\n")
    with pytest.raises(JudgmentsImportError, match="Queries file, line 1"):
        judgments.import_trec_qrels(
            io.StringIO("q1 0 bank 1\n"), judgment_list, queries=queries, doc_ids="category"
        )
    with pytest.raises(JudgmentsImportError, match="no field 'doc'"):
        judgments.import_trec_qrels(
            io.StringIO("q1 0 bank 1\n"), judgment_list, queries={"q1": "x"}, doc_ids="doc"
        )
    assert issubclass(JudgmentsImportError, SbertError) and issubclass(
        JudgmentsImportError, ValueError
    )


def test_importing_again_regrades_and_adds(articles, judgment_list):
    bank, cup = articles["bank"].pk, articles["cup"].pk
    judgments.import_csv(io.StringIO(f"query,object_pk,grade\nrates,{bank},1\n"), judgment_list)
    report = judgments.import_csv(
        io.StringIO(f"query,object_pk,grade\nrates,{bank},3\nrates,{cup},0\n"), judgment_list
    )
    assert report.ok and (report.queries, report.judgments) == (0, 2)
    assert grades(judgment_list) == {"rates": {str(bank): 3, str(cup): 0}}


def test_the_database_keeps_grades_0_to_3_and_one_query_text_per_list(judgment_list):
    query = JudgedQuery.objects.create(judgment_list=judgment_list, text="q")
    with pytest.raises(IntegrityError), transaction.atomic():
        Judgment.objects.create(query=query, object_pk="1", grade=4)
    with pytest.raises(IntegrityError), transaction.atomic():
        JudgedQuery.objects.create(judgment_list=judgment_list, text="q")
    Judgment.objects.create(query=query, object_pk="1", grade=2)
    with pytest.raises(IntegrityError), transaction.atomic():
        Judgment.objects.create(query=query, object_pk="1", grade=1)


def test_a_list_from_eval_pairs_scores_the_tiny_models_search(articles, judgment_list, embed):
    """The list feeds the shared metrics as ``{query: {pk: grade}}``."""
    embed(*articles.values())
    TrainingPair.objects.bulk_create(
        TrainingPair(text_a=title.lower(), text_b=body, split="eval") for _, title, body in TOPICS
    )
    judgments.from_eval_pairs(judgment_list)
    relevant = judgments.relevance(judgment_list)
    assert relevant == grades(judgment_list) and len(relevant) == 4
    rankings = {
        query: [str(a.pk) for a in Article.objects.similar_to(query, k=4)] for query in relevant
    }
    metrics = ranking_metrics(rankings, relevant, 10, corpus_size=4)
    assert metrics["queries"] == 4 and metrics["recall@10"] == 1.0  # the whole corpus ranked
    assert 0 < metrics["ndcg@10"] <= 1.0 and metrics["no_relevant@10"] == 0.0
