"""An async view over the async searches, as a site would write one.

``GET search/?q=...&k=5&mode=vector|hybrid|keyword&iterate=for|aiterator`` answers the ranked
ids and, for each row, the pgvector settings and statement timeout its statement ran under
(read with ``current_setting`` inside that statement), so a test can see they were applied.
"""

from __future__ import annotations

from typing import Any

from django.db.models.expressions import RawSQL
from django.http import HttpRequest, JsonResponse

from tests.testapp.models import Article

SETTINGS_IN_EFFECT = {
    "ef_search": RawSQL("current_setting('hnsw.ef_search', true)", []),
    "iterative_scan": RawSQL("current_setting('hnsw.iterative_scan', true)", []),
    "statement_timeout": RawSQL("current_setting('statement_timeout')", []),
}


async def health(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"ok": True})


async def search(request: HttpRequest) -> JsonResponse:
    text = request.GET["q"]
    k = int(request.GET.get("k", 5))
    mode = request.GET.get("mode", "vector")
    options: dict[str, Any] = {}
    if "ef_search" in request.GET:
        options["ef_search"] = int(request.GET["ef_search"])
    if mode == "hybrid":
        found = await Article.objects.ahybrid_search(text, k=k, **options)
    elif mode == "keyword":
        found = await Article.objects.akeyword_search(text, k=k)
    else:
        found = await Article.objects.asimilar_to(text, k=k, **options)
    columns = ["pk", *SETTINGS_IN_EFFECT] + ([] if mode == "keyword" else ["similarity"])
    rows = found.annotate(**SETTINGS_IN_EFFECT).values(*columns)
    if request.GET.get("iterate") == "aiterator":
        results = [row async for row in rows.aiterator()]
    else:
        results = [row async for row in rows]
    ids = [row.pop("pk") for row in results]
    for row in results:
        row.pop("similarity", None)
    return JsonResponse({"ids": ids, "settings": results})
