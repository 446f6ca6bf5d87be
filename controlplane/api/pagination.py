"""Pagination on every list; an oversized page_size is capped, not refused."""
from rest_framework.pagination import CursorPagination, PageNumberPagination

MAX_PAGE_SIZE = 200


class CappedPageNumberPagination(PageNumberPagination):
    page_size_query_param = "page_size"
    max_page_size = MAX_PAGE_SIZE


class NewestFirstCursorPagination(CursorPagination):
    """For large append-only tables: stable pages without COUNT(*) or deep OFFSETs."""

    ordering = "-seq"
    page_size_query_param = "page_size"
    max_page_size = MAX_PAGE_SIZE
