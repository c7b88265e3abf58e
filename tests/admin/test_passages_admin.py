"""The admin of a model whose field has passages= (tests.testapp.models.Report): the change
page lists the row's passages with their offsets, and the search box ranks by best passage."""

from __future__ import annotations

import html

import pytest
from django.contrib.auth.models import User

from django_sbert import indexing
from tests.testapp.models import Report

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.admin.urls")]

BODY = (
    "The central bank will raise interest rates this year. The market was falling. "
    "The dog runs fast and the cat is slow. A child plays guitar and the man eats food. "
    "The party will win the election in the city. The war is over and peace is back."
)


@pytest.fixture
def staff(client):
    client.force_login(User.objects.create_superuser("boss", password="pw"))
    return client


def test_the_change_page_lists_the_rows_passages(staff):
    report = Report.objects.create(title="Long report", body=BODY)
    waiting = staff.get(f"/admin/testapp/report/{report.pk}/change/").content.decode()
    assert "Passages (embedding): 0" in waiting and "waiting for the worker" in waiting

    indexing.embed_pks(indexing.get_ref("testapp.Report", "embedding"), [report.pk])
    passages = list(Report._meta.get_field("embedding").passage_model.objects.filter(row=report))
    assert len(passages) > 2
    page = html.unescape(staff.get(f"/admin/testapp/report/{report.pk}/change/").content.decode())
    assert f"Passages (embedding): {len(passages)}" in page
    for passage in passages:
        assert passage.text in page
        assert f"<td>{passage.start}–{passage.end}</td>" in page


def test_the_search_box_ranks_by_best_passage(staff):
    Report.objects.bulk_create(Report(title=f"report {i}", body=BODY[i * 20 :]) for i in range(6))
    indexing.embed_stale(indexing.get_ref("testapp.Report", "embedding"))
    page = staff.get("/admin/testapp/report/", {"q": "the dog runs fast"})
    shown = [r.pk for r in page.context["cl"].result_list]
    assert shown == [r.pk for r in Report.objects.similar_to("the dog runs fast", k=6)]


def test_passage_text_is_shown_only_when_the_admin_shows_every_source_field(staff):
    """A ModelAdmin that leaves a source field out of its form must not show that field's text
    in the passages table: offsets yes, text no."""
    from django.contrib import admin

    from tests.testapp.admin import ReportAdmin

    report = Report.objects.create(title="Quarterly report", body=BODY)
    indexing.embed_pks(indexing.get_ref("testapp.Report", "embedding"), [report.pk])
    passages = list(Report._meta.get_field("embedding").passage_model.objects.filter(row=report))
    secret = next(p.text for p in passages if "central bank" in p.text)
    url = f"/admin/testapp/report/{report.pk}/change/"
    model_admin = admin.site._registry[Report]
    assert isinstance(model_admin, ReportAdmin)
    model_admin.exclude = ("body",)
    try:
        page = html.unescape(staff.get(url).content.decode())
    finally:
        model_admin.exclude = None
    assert f"Passages (embedding): {len(passages)}" in page
    assert f"<td>{passages[0].start}–{passages[0].end}</td>" in page
    assert "central bank" not in page and secret not in page
    assert "Text not shown" in page
    shown = html.unescape(staff.get(url).content.decode())  # the whole form again: text too
    assert secret in shown
