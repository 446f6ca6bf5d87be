"""Strict helpers that read settings from the environment.

A bad value fails at start-up with the variable's name, never later in a request.
Secrets may also come from `NAME_FILE` (a path), so they need not sit in the environment.
"""
import json
import os
import re
import secrets
from pathlib import Path
from typing import overload


class ImproperSetting(RuntimeError):
    """Raised when an environment variable holds a value we cannot use."""


@overload
def env_str(name: str, default: str) -> str: ...
@overload
def env_str(name: str, default: None = None) -> str | None: ...
def env_str(name: str, default: str | None = None) -> str | None:
    value = os.environ.get(name)
    return default if value in (None, "") else value


def env_int(name: str, default: int, *, minimum: int | None = None, maximum: int | None = None) -> int:
    raw = env_str(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperSetting(f"{name} must be an integer, got {raw!r}") from None
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise ImproperSetting(f"{name} must be between {minimum} and {maximum}, got {value}")
    return value


def env_float(name: str, default: float) -> float:
    raw = env_str(name)
    if raw is None:
        return default
    try:
        return float(raw)
    except ValueError:
        raise ImproperSetting(f"{name} must be a number, got {raw!r}") from None


def env_bool(name: str, default: bool) -> bool:
    raw = env_str(name)
    if raw is None:
        return default
    lowered = raw.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ImproperSetting(f"{name} must be a boolean (true/false), got {raw!r}")


def env_list(name: str, default: list[str]) -> list[str]:
    raw = env_str(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    value = env_str(name, default)
    if value not in choices:
        raise ImproperSetting(f"{name} must be one of {', '.join(choices)}, got {value!r}")
    return value


def env_port_range(name: str, default: str) -> tuple[int, int]:
    """"LOW-HIGH" from NAME (or the default): TCP ports, LOW ≤ HIGH, both 1024–65535."""
    value = env_str(name, default)
    found = re.fullmatch(r"\s*(\d{4,5})\s*-\s*(\d{4,5})\s*", value)
    low, high = (int(found.group(1)), int(found.group(2))) if found else (0, 0)
    if not found or not 1024 <= low <= high <= 65535:
        raise ImproperSetting(f"{name} must be a port range LOW-HIGH within 1024-65535, got {value!r}")
    return low, high


def env_json_object(name: str, default: dict) -> dict:
    """A JSON object from NAME (its members replace the default's), or the default when unset."""
    raw = env_str(name)
    if raw is None:
        return dict(default)
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise ImproperSetting(f"{name} must be a JSON object: {exc}") from None
    if not isinstance(value, dict):
        raise ImproperSetting(f"{name} must be a JSON object, got {type(value).__name__}")
    return {**default, **value}


def env_header(name: str, value: str) -> tuple[str, str] | None:
    """An HTTP header name from NAME as Django's META key with the value it must hold, or None when unset."""
    raw = env_str(name)
    if raw is None:
        return None
    if not re.fullmatch(r"[A-Za-z0-9-]{1,64}", raw):
        raise ImproperSetting(f"{name} must be an HTTP header name such as X-Forwarded-Proto, got {raw!r}")
    return ("HTTP_" + raw.upper().replace("-", "_"), value)


def env_secret(name: str, *, generated_in: Path | None = None, min_length: int = 32) -> str:
    """A secret from NAME, or the file named by NAME_FILE, or (embedded default) a generated file.

    Generating keeps a fresh single-machine install secure without a manual step; production
    sets the variable so every process and host shares the same value.
    """
    value = env_str_or_file(name)
    if value is None and generated_in is not None:
        value = _generated_secret(generated_in / name.lower())
    if value is None:
        raise ImproperSetting(f"{name} (or {name}_FILE) must be set")
    if len(value) < min_length:
        raise ImproperSetting(f"{name} must be at least {min_length} characters long")
    return value


def env_str_or_file(name: str, default: str | None = None) -> str | None:
    """NAME, or the contents of the file named by NAME_FILE: a URL holding a password need not sit in
    the environment (a mounted Kubernetes Secret, a Docker secret)."""
    value = env_str(name)
    file_path = env_str(f"{name}_FILE")
    if value is None and file_path is not None:
        try:
            value = Path(file_path).read_text().strip()
        except OSError as exc:
            raise ImproperSetting(f"{name}_FILE points at an unreadable file: {exc}") from None
        if not value:  # never fall back to a default (SQLite, a generated key) behind an empty mount
            raise ImproperSetting(f"{name}_FILE points at an empty file: {file_path}")
    return default if value is None else value


def _generated_secret(path: Path) -> str:
    if path.exists():
        return path.read_text().strip()
    path.parent.mkdir(parents=True, exist_ok=True)
    value = secrets.token_urlsafe(48)
    # Created with 0600 so other local users cannot read it.
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another process won the race: use its value
        return path.read_text().strip()
    with os.fdopen(fd, "w") as handle:
        handle.write(value)
    return value
