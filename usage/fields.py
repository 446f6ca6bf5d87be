"""A fixed-bucket histogram column: `bigint[]` on PostgreSQL, a JSON array in text elsewhere (SQLite)."""
import json

from django.db import models


class HistogramField(models.Field):
    """A list of bucket counts (usage.histograms.BOUNDS_MS).

    On PostgreSQL a native array, so a chart sums bucket i of thousands of rows as `SUM(column[i + 1])`
    without parsing JSON per row (jsonb extraction was half the time of the largest rollup read).
    """

    description = "Histogram bucket counts"

    def db_type(self, connection):
        return "bigint[]" if connection.vendor == "postgresql" else "text"

    def from_db_value(self, value, expression, connection):
        if value is None or isinstance(value, list):
            return value
        return json.loads(value)

    def to_python(self, value):
        return self.from_db_value(value, None, None)

    def get_db_prep_value(self, value, connection, prepared=False):
        if value is None:
            return None
        counts = [int(count) for count in value]
        return counts if connection.vendor == "postgresql" else json.dumps(counts)

    def value_to_string(self, obj):
        return json.dumps(self.value_from_object(obj))


def element_sql(table: str, column: str, index: int, vendor: str) -> str:
    """SQL for bucket `index` (0-based) of a stored histogram, as an integer (NULL when the list is empty)."""
    if vendor == "postgresql":
        return f'"{table}"."{column}"[{index + 1:d}]'
    return f"json_extract(\"{table}\".\"{column}\", '$[{index:d}]')"
