"""Which database a search reads: a read replica, if the site says so, pinned per search.

::

    SBERT = {"SEARCH": {"DATABASE": "replica"}}  # every search reads the replica
    Article.objects.using("primary").similar_to("rates")   # ...except one that names a database

A search reads its rows and the serving encoder version from the same database, chosen once
per search (``pinned()``), so a replica that lags behind the primary answers consistently with
itself (docs/deployment.md, "Read replicas").

Writes never come here: indexing, the sweep and the promotion switch read the version and take
the switch lock on the primary (``router.db_for_write``; serving/versions.py).

Without ``SEARCH["DATABASE"]`` the site's database router decides (``db_for_read``), as for any
query; a router that picks one of several replicas per call is asked once per search.
"""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured
from django.db import connections, models

from ..conf import sbert_settings


def search_database(queryset: models.QuerySet) -> str:
    """The alias a search on ``queryset`` reads from: ``.using()``'s, else
    ``SBERT["SEARCH"]["DATABASE"]``, else the router's ``db_for_read``."""
    if queryset._db is not None:
        return queryset._db
    alias = sbert_settings.SEARCH["DATABASE"]
    if alias is None:
        return queryset.db
    if alias not in connections.settings:
        known = ", ".join(sorted(connections.settings)) or "none"
        raise ImproperlyConfigured(
            f"SBERT['SEARCH']['DATABASE'] is {alias!r}, which is not a key of DATABASES "
            f"(it has: {known}). Name the read replica's alias, or set None to let the "
            "database router choose."
        )
    return alias
