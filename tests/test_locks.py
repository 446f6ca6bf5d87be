"""The locks (what gets installed) agree with the requirements files (where versions are chosen).

A requirement edited in a requirements*.txt without `make lock` would otherwise install the old
version silently, or not at all.
"""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# input file -> its lock (docs/operations.md, "Dependencies")
LOCKS = {
    "requirements.txt": "requirements.lock",
    "requirements-dev.txt": "requirements-dev.lock",
    "requirements-bench.txt": "requirements-bench.lock",
    "requirements-engine.txt": "requirements-engine.lock",
    "requirements-scan.txt": "requirements-scan.lock",
}
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==(\S+)")


def _name(raw: str) -> str:
    return re.sub(r"[-_.]+", "-", raw).lower()


def requirements(path: Path) -> dict[str, str]:
    """name -> pinned version of an input file, following `-r other.txt`."""
    pins: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith("-r "):
            pins.update(requirements(path.parent / line[3:].strip()))
        elif line:
            match = PIN.match(line)
            assert match, f"{path.name}: {line!r} is not pinned with =="
            pins[_name(match.group(1))] = match.group(2)
    return pins


def locked(path: Path) -> dict[str, str]:
    return {_name(m.group(1)): m.group(2) for m in map(PIN.match, path.read_text().splitlines()) if m}


@pytest.mark.parametrize("source", sorted(LOCKS))
def test_every_requirement_is_pinned_in_its_lock(source):
    wanted, lock = requirements(ROOT / source), locked(ROOT / LOCKS[source])
    assert wanted, f"{source} names no requirement"
    stale = {name: (version, lock.get(name)) for name, version in wanted.items() if lock.get(name) != version}
    assert not stale, f"{LOCKS[source]} disagrees with {source} (wanted, locked): {stale}; run `make lock`"


@pytest.mark.parametrize("lock", ["requirements.lock", "requirements-bench.lock"])
def test_partial_locks_take_the_dev_locks_versions(lock):
    """The runtime and bench locks are compiled against the dev lock: one venv holds all three."""
    dev = locked(ROOT / "requirements-dev.lock")
    differing = {name: (version, dev[name]) for name, version in locked(ROOT / lock).items()
                 if name in dev and dev[name] != version}
    assert not differing, f"{lock} and requirements-dev.lock differ: {differing}; run `make lock`"


def test_the_engine_lock_takes_the_local_cpu_torch():
    """torch only as the +cpu build (the machine's local wheel), nothing of CUDA's."""
    lock = locked(ROOT / "requirements-engine.lock")
    assert lock["torch"].endswith("+cpu")
    assert not [name for name in lock if name.startswith("nvidia-")]
