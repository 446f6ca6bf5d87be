"""SWITCHYARD_RUNTIME_BACKENDS checked at start: every entry a backend class path, a label and options.

Only the shape is checked here (settings cannot import the fleet app); `manage.py check` imports
each class (fleet/checks.py), so a typo in a path fails at start, not in the first reconcile.
"""
import re

from controlplane.env import ImproperSetting

NAME = re.compile(r"[a-z][a-z0-9-]{0,15}")  # stored in Deployment.runtime_backend (16 characters)
DOTTED = re.compile(r"[A-Za-z_][\w]*(\.[A-Za-z_]\w*)+")


def runtime_backends(raw: dict, variable: str) -> dict[str, dict]:
    """name → {"class": dotted path, "label": text, "options": dict}; entries set to null are dropped."""
    backends = {}
    for name, entry in raw.items():
        if entry is None:
            continue
        if not NAME.fullmatch(name):
            raise ImproperSetting(f"{variable}: backend name {name!r} must be 1-16 of a-z, 0-9 and '-', "
                                  "starting with a letter")
        backends[name] = _entry(name, entry, variable)
    if not backends:
        raise ImproperSetting(f"{variable} must name at least one runtime backend")
    return backends


def _entry(name: str, entry, variable: str) -> dict:
    if isinstance(entry, str):
        entry = {"class": entry}
    if not isinstance(entry, dict) or not DOTTED.fullmatch(str(entry.get("class", ""))):
        raise ImproperSetting(f'{variable}: {name!r} needs a "class" holding a dotted path, got {entry!r}')
    unknown = set(entry) - {"class", "label", "options"}
    options = entry.get("options", {})
    if unknown or not isinstance(options, dict):
        raise ImproperSetting(f"{variable}: {name!r} takes only class, label and options (an object)")
    return {"class": entry["class"], "label": str(entry.get("label") or name), "options": options}
