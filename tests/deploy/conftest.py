"""Fixtures for tests/deploy: the Helm chart rendered by a real `helm`, and the scanners.

No cluster is needed: `helm lint` and `helm template` render offline. The tools come from `make helm`
(tools/helm/helm) and `make scan-tools` (.venv-scan: checkov, hadolint); `make test` installs both.
Without them these tests skip, unless SWITCHYARD_REQUIRE_DEPLOY_TOOLS=1 (CI), which fails instead.
"""
import os
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "switchyard"
HELM = ROOT / "tools" / "helm" / "helm"
SCAN_BIN = ROOT / ".venv-scan" / "bin"
RELEASE = "switchyard"
NAMESPACE = "switchyard"
# Values sets every test sees rendered: the defaults, the production example, and the trial mode.
VALUES = {
    "default": [],
    "production": ["-f", str(CHART / "values-production.yaml")],
    "trial": ["--set", "trial.enabled=true"],
}


def require_tool(path: Path, how: str) -> Path:
    if path.exists():
        return path
    message = f"{path.relative_to(ROOT)} is missing: run `{how}`"
    if os.environ.get("SWITCHYARD_REQUIRE_DEPLOY_TOOLS") == "1":
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="session")
def helm_env(tmp_path_factory) -> dict:
    """Helm's cache, config and data in a throw-away folder: nothing read from or written to $HOME."""
    home = tmp_path_factory.mktemp("helm-home")
    return {"PATH": "/usr/bin:/bin", "HOME": str(home), "HELM_CACHE_HOME": str(home / "cache"),
            "HELM_CONFIG_HOME": str(home / "config"), "HELM_DATA_HOME": str(home / "data")}


@pytest.fixture(scope="session")
def helm(helm_env):
    binary = require_tool(HELM, "make helm")

    def run(*args: str, check: bool = True) -> subprocess.CompletedProcess:
        done = subprocess.run([str(binary), *args], env=helm_env, capture_output=True, text=True, timeout=120)
        if check:
            assert done.returncode == 0, done.stdout + done.stderr
        return done
    return run


def template_args(*extra: str) -> list[str]:
    return ["template", RELEASE, str(CHART), "--namespace", NAMESPACE, *extra]


@pytest.fixture(scope="session")
def render(helm):
    """render(*helm args) → the rendered objects (dicts), hooks included."""
    def run(*extra: str) -> list[dict]:
        return [doc for doc in yaml.safe_load_all(helm(*template_args(*extra)).stdout) if doc]
    return run


@pytest.fixture(scope="session")
def rendered(render) -> dict[str, list[dict]]:
    """Each values set of VALUES, rendered once per session."""
    return {name: render(*args) for name, args in VALUES.items()}


@pytest.fixture(scope="session")
def scan_tool():
    def find(name: str) -> Path:
        return require_tool(SCAN_BIN / name, "make scan-tools")
    return find


def objects(docs: list[dict], kind: str) -> list[dict]:
    return [doc for doc in docs if doc["kind"] == kind]


def named(docs: list[dict], kind: str, name: str) -> dict:
    (found,) = [doc for doc in docs if doc["kind"] == kind and doc["metadata"]["name"] == name]
    return found


def pod_spec(workload: dict) -> dict:
    return workload["spec"]["template"]["spec"]


def all_containers(workload: dict) -> list[dict]:
    spec = pod_spec(workload)
    return spec.get("initContainers", []) + spec["containers"]
