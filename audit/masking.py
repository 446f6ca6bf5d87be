"""Secrets never reach an audit row: fields with secret-sounding names are masked."""
import re

MASK = "***"
# "token" only as a credential's name (token, access_token, token_hash), not a count or a limit
# (tokens_per_minute, monthly_token_budget, max_tokens), which auditors need to read.
_SECRET_NAMES = re.compile(r"(secret|password|passwd|pepper|hashed?_?key|key_hash|^hash$|^key$|^raw_key$"
                           r"|(^|_)token$|^token_(?!budget)|_token_(hash|value)$)", re.I)
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
