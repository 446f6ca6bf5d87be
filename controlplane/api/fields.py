"""Serializer pieces the API apps share."""
import re

from rest_framework import serializers

_SURROGATE = re.compile("[\ud800-\udfff]")


def storable_json(value) -> None:
    """Refuse NUL characters and unpaired surrogates anywhere in a JSON value, keys included.

    CharFields refuse both already; free-form JSON (engine args, simulator parameters) reached the
    database with them, where PostgreSQL's jsonb rejects them — a 500 instead of a 400 naming the field.
    """
    pending = [value]
    while pending:  # iterative: the parser allows nesting deeper than a comfortable recursion
        item = pending.pop()
        if isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
        elif isinstance(item, str):
            if "\x00" in item:
                raise serializers.ValidationError("Null characters are not allowed.")
            if _SURROGATE.search(item):
                raise serializers.ValidationError("Unpaired surrogate characters are not allowed.")
