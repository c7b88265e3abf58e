"""Pagination of search/ and similar/.

How ``k`` and pages interact: ``k`` is the size of the whole result (the top k rows, nearest
first) and pages split those k rows: ``?k=50&page_size=10`` gives 5 pages, ``count`` is the
number of rows found (at most k). The top k rows are fetched in one query per request (k is at
most SBERT["API"]["MAX_K"]), so every page comes from one consistent ranking: approximate
(HNSW) scans that re-sort rows after fetching them could otherwise repeat or skip a row at a
page boundary if each page ran its own LIMIT/OFFSET query.
"""

from __future__ import annotations

from rest_framework.pagination import PageNumberPagination

from .settings import api_settings


class SearchPagination(PageNumberPagination):
    """``?page=`` and ``?page_size=``, sized by SBERT["API"]["PAGE_SIZE"], at most
    ``api_settings.MAX_PAGE_SIZE`` (100)."""

    page_size_query_param = "page_size"

    @property  # type: ignore[override]
    def page_size(self) -> int:
        return int(api_settings.PAGE_SIZE)

    @property  # type: ignore[override]
    def max_page_size(self) -> int:
        return int(api_settings.MAX_PAGE_SIZE)
