"""Bad pairs files give an error report, never a 500 or a ``DataError``, and import nothing.

Each bad input is tried through the admin's import page (the real admin, a superuser, the
Django test client) and through ``manage.py sbert_import_pairs``, against PostgreSQL: a file
that is not UTF-8, a ``label`` longer than its column, a NUL in a text, a file name longer
than ``source`` allows, a file over ``finetuning.pairs.MAX_FILE_BYTES``. Every bad
file also holds a good row, so "nothing imported" means the good row was held back too.
"""

from __future__ import annotations

import html
import io
import json
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import CommandError, call_command

from django_sbert.finetuning import pairs
from django_sbert.models import TrainingPair

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.admin.urls")]

IMPORT_URL = "/admin/django_sbert/trainingpair/import/"
LABEL_MAX = TrainingPair._meta.get_field("label").max_length
SOURCE_MAX = TrainingPair._meta.get_field("source").max_length

GOOD_ROW = "a cat sits,a kitten rests,"
LATIN1 = "text_a,text_b,label\nan apple,a fruit,\ncaf\u00e9 au lait,coffee,\n".encode("latin-1")
LONG_LABEL = "text_a,text_b,label\n{good}\nx,y,{label}\n".format(
    good=GOOD_ROW, label="l" * (LABEL_MAX + 7)
).encode()
NUL_TEXT = f"text_a,text_b,label\n{GOOD_ROW}\nbad\x00text,y,\n".encode()


@pytest.fixture
def admin_client(client):
    client.force_login(User.objects.create_superuser("root", password="pw"))
    return client


@pytest.fixture
def small_files(monkeypatch):
    """Pairs files of at most 64 bytes."""
    monkeypatch.setattr(pairs, "MAX_FILE_BYTES", 64)


def upload(client, name: str, content: bytes, **extra):
    response = client.post(IMPORT_URL, {"file": SimpleUploadedFile(name, content), **extra})
    return response, html.unescape(response.content.decode())


def write(path: Path, content: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return path


# --- a file that is not UTF-8 ---------------------------------------------------------------


def test_admin_file_not_utf8_is_a_file_error(admin_client):
    response, page = upload(admin_client, "pairs.csv", LATIN1)
    assert response.status_code == 200
    assert "The file is not UTF-8 text: line 3" in page and "Save the file as UTF-8" in page
    assert TrainingPair.objects.count() == 0


def test_command_file_not_utf8_is_a_command_error(tmp_path):
    path = write(tmp_path / "pairs.csv", LATIN1)
    with pytest.raises(CommandError, match="not UTF-8 text: line 3 holds bytes"):
        call_command("sbert_import_pairs", str(path))
    assert TrainingPair.objects.count() == 0


def test_utf16_file_is_named_as_such(tmp_path):
    path = write(tmp_path / "pairs.csv", "text_a,text_b\nx,y\n".encode("utf-16"))
    with pytest.raises(CommandError, match="UTF-16 text; save it as UTF-8"):
        call_command("sbert_import_pairs", str(path))
    assert TrainingPair.objects.count() == 0


# --- a label longer than its column ---------------------------------------------------------


def test_admin_label_over_column_length_is_a_row_error(admin_client):
    response, page = upload(admin_client, "pairs.csv", LONG_LABEL)
    assert response.status_code == 200
    assert "1 of 2 rows were rejected; nothing was imported" in page
    assert f"label is {LABEL_MAX + 7} characters long; at most {LABEL_MAX} fit" in page
    assert TrainingPair.objects.count() == 0


def test_command_label_over_column_length_is_a_row_error(tmp_path, capsys):
    path = write(tmp_path / "pairs.csv", LONG_LABEL)
    with pytest.raises(CommandError, match=r"1 of 2 rows are invalid.*nothing was imported"):
        call_command("sbert_import_pairs", str(path))
    err = capsys.readouterr().err
    assert f"pairs.csv:3: label is {LABEL_MAX + 7} characters long; at most {LABEL_MAX}" in err
    assert TrainingPair.objects.count() == 0


# --- a NUL in a text ------------------------------------------------------------------------


def test_admin_nul_in_text_is_a_row_error(admin_client):
    response, page = upload(admin_client, "pairs.csv", NUL_TEXT)
    assert response.status_code == 200
    assert "text_a contains a NUL character" in page and "remove it" in page
    assert TrainingPair.objects.count() == 0


def test_command_nul_in_text_is_a_row_error(tmp_path, capsys):
    lines = [{"text_a": "fine", "text_b": "also fine"}, {"text_a": "q", "text_b": "p\u0000s"}]
    content = "\n".join(json.dumps(line) for line in lines).encode()
    path = write(tmp_path / "pairs.jsonl", content)
    with pytest.raises(CommandError, match="1 of 2 rows are invalid"):
        call_command("sbert_import_pairs", str(path))
    assert "pairs.jsonl:2: text_b contains a NUL character" in capsys.readouterr().err
    assert TrainingPair.objects.count() == 0


# --- a file name longer than source allows --------------------------------------------------


def test_admin_long_file_name_is_cut_to_fit_source_keeping_the_extension(admin_client):
    name = "quarterly-support-tickets-" * 9 + "pairs.csv"  # 243 characters
    response, _ = upload(admin_client, name, f"text_a,text_b\n{GOOD_ROW}\n".encode())
    assert response.status_code == 302
    pair = TrainingPair.objects.get()
    assert len(pair.source) == SOURCE_MAX and pair.source.endswith("\u2026.csv")
    assert pair.source.startswith("quarterly-support-tickets-")


def test_command_long_path_records_the_file_name(tmp_path):
    path = write(tmp_path / ("d" * 120) / ("e" * 120) / "faq.csv", b"text_a,text_b\nx,y\n")
    assert len(str(path)) > SOURCE_MAX
    call_command("sbert_import_pairs", str(path))
    assert TrainingPair.objects.get().source == "faq.csv"


def test_command_source_longer_than_the_column_is_a_command_error(tmp_path):
    path = write(tmp_path / "pairs.csv", b"text_a,text_b\nx,y\n")
    with pytest.raises(CommandError, match=f"at most {SOURCE_MAX} fit; choose a shorter"):
        call_command("sbert_import_pairs", str(path), "--source", "s" * (SOURCE_MAX + 1))
    assert TrainingPair.objects.count() == 0


# --- a file over the size limit -------------------------------------------------------------


def test_admin_file_over_size_limit_is_a_file_error(admin_client, small_files):
    content = f"text_a,text_b\n{GOOD_ROW}\n".encode() * 4
    response, page = upload(admin_client, "pairs.csv", content)
    assert response.status_code == 200
    assert f"The file has {len(content)} bytes; a pairs file may have at most 64" in page
    assert "MAX_FILE_BYTES" in page
    assert TrainingPair.objects.count() == 0


def test_command_file_over_size_limit_is_a_command_error(tmp_path, small_files):
    content = f"text_a,text_b\n{GOOD_ROW}\n".encode() * 4
    path = write(tmp_path / "pairs.csv", content)
    with pytest.raises(CommandError, match=f"has {len(content)} bytes; a pairs file may have"):
        call_command("sbert_import_pairs", str(path))
    assert TrainingPair.objects.count() == 0


def test_a_stream_over_the_limit_is_refused_without_reading_it_all(small_files):
    stream = io.BytesIO(b"text_a,text_b\n" + b"x,y\n" * 100)
    with pytest.raises(pairs.PairsImportError, match="more than 64 bytes"):
        pairs.import_pairs(stream, "csv")
    assert stream.tell() == 65 and TrainingPair.objects.count() == 0


# --- other inputs that used to escape as exceptions -----------------------------------------


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ('{"text_a": "x", "text_b": "y", "split": 1}', "split must be text, got 1"),
        ('{"text_a": "x", "text_b": "y", "score": 1' + "0" * 5000 + "}", "not valid JSON"),
        ('{"text_a": "x", "text_b": "y", "score": 1' + "0" * 400 + "}", "is outside [0, 1]"),
        ('{"text_a": "x\\ud800", "text_b": "y"}', "text_a is not valid Unicode"),
        ("[" * 100_000 + "]" * 100_000, "not valid JSON (nested too deeply)"),
    ],
    ids=["split-not-text", "huge-integer", "score-overflow", "lone-surrogate", "deep-nesting"],
)
def test_odd_json_records_are_row_errors(line, reason):
    report = pairs.import_pairs(io.StringIO('{"text_a": "a", "text_b": "b"}\n' + line), "jsonl")
    assert report.errors and report.errors[0][0] == 2 and reason in report.errors[0][1]
    assert report.created == 0 and TrainingPair.objects.count() == 0


def test_csv_field_over_the_csv_limit_is_a_row_error(admin_client):
    content = b"text_a,text_b\nx,y\nx," + b"y" * 200_000 + b"\n"
    response, page = upload(admin_client, "pairs.csv", content)
    assert response.status_code == 200 and "not valid CSV" in page
    assert TrainingPair.objects.count() == 0


def test_admin_lists_at_most_200_row_errors(admin_client):
    content = b"text_a,text_b,score\n" + b"x,y,7\n" * 250
    response, page = upload(admin_client, "pairs.csv", content)
    assert response.status_code == 200 and "250 of 250 rows were rejected" in page
    assert page.count("is outside [0, 1]") == 200 and "The first 200 are listed" in page
    assert TrainingPair.objects.count() == 0


# --- the pure parts -------------------------------------------------------------------------


def test_parse_record_checks_column_lengths_and_characters():
    with pytest.raises(ValueError, match=f"label is {LABEL_MAX + 1} characters long"):
        pairs.parse_record({"text_a": "a", "text_b": "b", "label": "x" * (LABEL_MAX + 1)})
    with pytest.raises(ValueError, match="text_negative contains a NUL character"):
        pairs.parse_record({"text_a": "a", "text_b": "b", "text_negative": "n\x00"})
    pair = pairs.parse_record({"text_a": " a ", "text_b": "b", "label": "x" * LABEL_MAX})
    assert pair.pk is None and pair.text_a == "a"  # built, not saved


def test_source_for_file_fits_the_column():
    assert pairs.source_for_file("faq.csv") == "faq.csv"
    assert pairs.source_for_file("/srv/" + "x" * 300 + "/faq.jsonl") == "faq.jsonl"
    cut = pairs.source_for_file("n" * 300 + ".jsonl")
    assert len(cut) == SOURCE_MAX and cut.endswith("n\u2026.jsonl")
    assert len(pairs.source_for_file("n" * 300)) == SOURCE_MAX
