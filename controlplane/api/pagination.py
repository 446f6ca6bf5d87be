"""Pagination on every list; an oversized page_size is capped, not refused."""
from rest_framework.exceptions import NotFound
from rest_framework.pagination import CursorPagination, PageNumberPagination

MAX_PAGE_SIZE = 200
MAX_BIGINT = 2**63 - 1


class CappedPageNumberPagination(PageNumberPagination):
    page_size_query_param = "page_size"
    max_page_size = MAX_PAGE_SIZE


class NewestFirstCursorPagination(CursorPagination):
    """For large append-only tables: stable pages without COUNT(*) or deep OFFSETs."""

    ordering = "-seq"
    page_size_query_param = "page_size"
    max_page_size = MAX_PAGE_SIZE

    def decode_cursor(self, request):
        # DRF trusts the position inside the (client-supplied) cursor; a non-integer one would
        # reach the `seq` lookup and fail with a 500 instead of "Invalid cursor".
        cursor = super().decode_cursor(request)
        position = cursor.position if cursor else None
        if position is not None and not (position.isdigit() and int(position) <= MAX_BIGINT):
            raise NotFound(self.invalid_cursor_message)
        return cursor
