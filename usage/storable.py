"""Values every supported database stores: the usage tables' boundary rules, the same on PostgreSQL and SQLite.

A request's strings come from its client (the model name, the prompt's start): whatever they hold,
the row must be storable, or one request would fail the batch it shares with other tenants' requests.
- NUL (U+0000): PostgreSQL's text types reject it. Stored as the six characters `\\u0000`.
- Lone surrogates (U+D800–U+DFFF, which JSON's `\\ud800` escapes can produce): no UTF-8 encoding
  exists, so neither driver can send them. Stored as their escape, e.g. `\\ud800`. (A proper pair
  arriving as two code points is two lone surrogates here, and is escaped the same way.)
- Longer than the column (`max_length`): cut to it, after escaping (varchar(n) rejects more).
- Integers outside the column's range (an engine reporting 2**40 tokens): clamped to the range
  PostgreSQL's column type holds, on SQLite too, so both backends store the same number.
The escapes are visible, so the row still shows what was asked. A client's own literal text
`\\u0000` reads the same: the escape is for people reading the row, not a reversible encoding.
"""
from __future__ import annotations

import re
from operator import itemgetter

from django.db.backends.base.operations import BaseDatabaseOperations
from django.db.models import CharField, ForeignKey, TextField

NUL_ESCAPE = "\\u0000"
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
# PostgreSQL's ranges (the base operations' table; SQLite's own would allow 64 bits everywhere).
_INTEGER_RANGES = BaseDatabaseOperations.integer_field_ranges
_INT64_MAX = 2**63 - 1


def storable_text(value: str, max_length: int | None = None) -> str:
    """`value` with NUL and lone surrogates escaped, cut to `max_length`."""
    if value.isascii():
        if "\x00" in value:
            value = value.replace("\x00", NUL_ESCAPE)
    else:
        value = _LONE_SURROGATE.sub(_escape, value.replace("\x00", NUL_ESCAPE))
    return value if max_length is None or len(value) <= max_length else value[:max_length]


def _escape(match: re.Match) -> str:
    return f"\\u{ord(match.group()):04x}"


def text_columns(fields) -> tuple[tuple[int, int | None], ...]:
    """(position, max_length) of every text column among `fields`."""
    return tuple((index, field.max_length) for index, field in enumerate(fields)
                 if isinstance(field, (CharField, TextField)))


def integer_columns(fields) -> tuple[tuple[int, int, int, bool], ...]:
    """(position, lowest, highest, nullable) of every integer column narrower than 64 bits among `fields`
    (counts, statuses). 64-bit columns and foreign keys hold ids the database handed out, which fit."""
    found = []
    for index, field in enumerate(fields):
        bounds = _INTEGER_RANGES.get(field.get_internal_type())
        if bounds is not None and bounds[1] < _INT64_MAX and not isinstance(field, ForeignKey):
            found.append((index, *bounds, field.null))
    return tuple(found)


class BatchSanitizer:
    """Makes a batch of rows (lists of one model's values, `fields` in the rows' order) storable in place.

    Checked a column at a time, so the usual batch costs a few C-level passes per column (a join,
    `isascii`, a NUL search, the longest length, min and max), and only a column with something to
    change is walked row by row."""

    __slots__ = ("_texts", "_integers")

    def __init__(self, fields):
        self._texts = tuple((itemgetter(index), index, limit) for index, limit in text_columns(fields))
        self._integers = tuple((itemgetter(index), index, lowest, highest, nullable)
                               for index, lowest, highest, nullable in integer_columns(fields))

    def __call__(self, rows: list[list]) -> None:
        for value_of, index, limit in self._texts:
            column = list(map(value_of, rows))
            if not _plain_texts(column, limit):
                for row in rows:
                    if row[index].__class__ is str:
                        row[index] = storable_text(row[index], limit)
        for value_of, index, lowest, highest, nullable in self._integers:
            column = list(map(value_of, rows))
            if nullable and None in column:
                column = [value for value in column if value is not None]
            if column and not _within(column, lowest, highest):
                for row in rows:
                    value = row[index]
                    if value.__class__ is int and not lowest <= value <= highest:
                        row[index] = min(max(value, lowest), highest)


def _plain_texts(column: list, limit: int | None) -> bool:
    """Every value a str that needs no change (False also when some value is not a str)."""
    try:
        joined = "".join(column)
    except TypeError:
        return False
    if "\x00" in joined or (limit is not None and max(map(len, column), default=0) > limit):
        return False
    if joined.isascii():
        return True
    try:  # lone surrogates cannot be encoded (a pair split over two values neither)
        joined.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _within(column: list, lowest: int, highest: int) -> bool:
    try:
        return lowest <= min(column) and max(column) <= highest
    except TypeError:  # not numbers: the database's own error names the value
        return True
