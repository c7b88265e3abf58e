"""evaluations/ asks what the admin's "Evaluate now" asks (issue 67, item 5): staff without
``change_judgmentlist`` measure nothing, storing needs ``add_evaluation``, reading
``view_evaluation``; through DRF's test client on real PostgreSQL with the tiny model."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission

from django_sbert.models import Evaluation

from .test_evaluations import URL, news  # noqa: F401

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.api.urls")]


def grant(user, *codenames: str) -> None:
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))


def test_evaluating_needs_the_permissions_the_admin_asks_for(client_as, news, users):  # noqa: F811
    staff = users["staff"]
    client = client_as("staff")
    # Staff alone (is_staff): nothing read, nothing measured or stored.
    assert client.get(URL).status_code == 403
    refused = client.post(URL, {"list": "news"}, format="json")
    assert refused.status_code == 403 and "change_judgmentlist" in refused.json()["detail"]
    assert not Evaluation.objects.exists()
    # change_judgmentlist: measure without storing; storing needs add_evaluation as well.
    grant(staff, "change_judgmentlist")
    staff = type(staff).objects.get(pk=staff.pk)  # a fresh permission cache
    client.force_authenticate(staff)
    measured = client.post(
        URL, {"list": "news", "modes": ["vector"], "store": False}, format="json"
    )
    assert measured.status_code == 200, measured.content
    unstored = client.post(URL, {"list": "news", "modes": ["vector"]}, format="json")
    assert unstored.status_code == 403 and "add_evaluation" in unstored.json()["detail"]
    assert not Evaluation.objects.exists()
    grant(staff, "add_evaluation", "view_evaluation")
    staff = type(staff).objects.get(pk=staff.pk)
    client.force_authenticate(staff)
    stored = client.post(URL, {"list": "news", "modes": ["vector"]}, format="json")
    assert stored.status_code == 201 and Evaluation.objects.count() == 1
    assert client.get(URL).status_code == 200
