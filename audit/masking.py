"""Secrets never reach an audit row: fields with secret-sounding names are masked."""
import re

MASK = "***"
_SECRET_NAMES = re.compile(r"(secret|password|passwd|token|pepper|hashed?_?key|key_hash|^hash$|^key$|^raw_key$)", re.I)
_SWITCHYARD_KEY = re.compile(r"sy_[a-z]+_[A-Za-z0-9]{20,}")


def mask_secrets(value):
    """A copy of `value` with secret fields replaced and any Switchyard key cut to its prefix."""
    if isinstance(value, dict):
        return {k: (MASK if _SECRET_NAMES.search(str(k)) else mask_secrets(v)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [mask_secrets(item) for item in value]
    if isinstance(value, str):
        return _SWITCHYARD_KEY.sub(lambda m: m.group(0)[:16] + "…", value)
    return value
