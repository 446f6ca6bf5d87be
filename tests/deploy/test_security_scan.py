"""A real scanner over what would be deployed: checkov on the rendered manifests (every values set) and on
deploy/Dockerfile, hadolint on the Dockerfile. Not one failed check; every skip carries its reason.

checkov runs offline (--skip-download, no version check): without a platform key it reports no
severities, so every failed check counts, not only HIGH/CRITICAL. It runs once per session.
"""
import ast
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.deploy.conftest import ROOT, VALUES

CONFIG = ROOT / "deploy" / ".checkov.yaml"
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
OFFLINE = {"BC_SKIP_MAPPING": "TRUE", "CKV_SKIP_PACKAGE_UPDATE_CHECK": "TRUE"}


@pytest.fixture(scope="session")
def scan_dir(tmp_path_factory, rendered):
    """The rendered manifests and a copy of the Dockerfile in one folder: checkov scans one directory."""
    folder = tmp_path_factory.mktemp("rendered")
    for name, docs in rendered.items():
        (folder / f"{name}.yaml").write_text(yaml.safe_dump_all(docs, sort_keys=False))
    shutil.copyfile(DOCKERFILE, folder / "Dockerfile")
    return folder


@pytest.fixture(scope="session")
def checkov_report(scan_tool, scan_dir, tmp_path_factory) -> dict:
    """framework → checkov's JSON report, from one run over the manifests and the Dockerfile."""
    checkov = scan_tool("checkov")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path_factory.mktemp("checkov-home")), **OFFLINE}
    done = subprocess.run(
        [str(checkov), "--config-file", str(CONFIG), "--skip-download", "--output", "json",
         "--directory", str(scan_dir), "--framework", "kubernetes", "dockerfile"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode in (0, 1), done.stderr[-2000:]  # 1: some check failed (asserted below)
    report = json.loads(done.stdout)
    return {part["check_type"]: part for part in (report if isinstance(report, list) else [report])}


def failures(part: dict) -> list[str]:
    return [f"{c['check_id']} {c['check_name']} — {c['resource']} ({c['file_path']})"
            for c in part["results"]["failed_checks"]]


def test_checkov_finds_nothing_in_the_rendered_manifests(checkov_report):
    part = checkov_report["kubernetes"]
    assert not failures(part), "\n".join(failures(part))
    assert part["summary"]["parsing_errors"] == 0
    assert part["summary"]["resource_count"] >= 20 * len(VALUES) and part["summary"]["passed"] > 1000


def test_checkov_finds_nothing_in_the_dockerfile(checkov_report):
    part = checkov_report["dockerfile"]
    assert not failures(part), "\n".join(failures(part))
    assert part["summary"]["passed"] > 50


def test_every_skipped_check_says_why():
    lines = [line for line in CONFIG.read_text().splitlines() if line.strip().startswith("- ")]
    assert lines and all(re.fullmatch(r"\s*- CKV\w+\s+# .{60,}", line) for line in lines), lines
    chart = ROOT / "deploy" / "helm" / "switchyard" / "templates"
    annotations = re.findall(r"checkov\.io/skip\d+: (.*)", "".join(p.read_text() for p in chart.glob("*.yaml")))
    assert annotations and all(re.fullmatch(r"CKV\w+=.{60,}", a) for a in annotations), annotations
    inline = re.findall(r"# checkov:skip=(.*)", DOCKERFILE.read_text())
    assert inline and all(re.fullmatch(r"CKV\w+: .{60,}", s) for s in inline), inline


def test_skips_in_the_report_are_only_the_annotated_ones(checkov_report):
    skipped = {(c["check_id"], c["resource"].split(".")[-1]) for part in checkov_report.values()
               for c in part["results"]["skipped_checks"]}
    assert {check for check, _ in skipped} <= {"CKV_K8S_38", "CKV_K8S_9", "CKV_K8S_8", "CKV_DOCKER_2"}
    assert {resource for check, resource in skipped if check.startswith("CKV_K8S")} == {
        "switchyard-worker", "switchyard-beat"}


def test_hadolint_passes_on_the_dockerfile(scan_tool):
    done = subprocess.run([str(scan_tool("hadolint")), "--no-color", str(DOCKERFILE)], capture_output=True,
                          text=True, timeout=60, env={"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/")})
    assert done.returncode == 0, done.stdout + done.stderr


def test_shellcheck_passes_on_the_entrypoint_and_install_scripts(scan_tool):
    scripts = [ROOT / "deploy" / "entrypoint.sh", ROOT / "scripts" / "install_helm.sh",
               ROOT / "scripts" / "install_scan_tools.sh"]
    done = subprocess.run([str(scan_tool("shellcheck")), *map(str, scripts)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_image_context_is_an_allow_list():
    """The build context never carries var/ (generated keys, SQLite), virtualenvs, tests or the git tree."""
    rules = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    assert rules[0] == "*"
    allowed = {rule[1:].rstrip("/") for rule in rules if rule.startswith("!")}
    assert not allowed & {"var", ".venv", ".venv-engine", ".venv-scan", "tests", ".git", "tools", "node_modules"}
    assert {"controlplane", "gateway", "manage.py", "requirements.lock", "deploy/entrypoint.sh"} <= allowed


def _image_allow_list() -> set[str]:
    rules = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    return {rule[1:].rstrip("/") for rule in rules if rule.startswith("!")}


def _local_imports(folder: Path) -> set[str]:
    """The repository's own top-level packages that the modules under `folder` import."""
    local = {path.name for path in ROOT.iterdir() if (path / "__init__.py").exists()}
    found = set()
    for module in folder.rglob("*.py"):
        for node in ast.walk(ast.parse(module.read_text(), str(module))):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level
                     else [])
            found |= {name.split(".")[0] for name in names} & local
    return found


def test_the_image_carries_every_app_and_every_package_the_product_imports():
    """An app added to INSTALLED_APPS (or imported by one) but left out of the allow-list would build an
    image whose processes fail at start: every local app and everything they import is in the context."""
    from django.conf import settings

    allowed = _image_allow_list()
    apps = {app.split(".")[0] for app in settings.INSTALLED_APPS if (ROOT / app.split(".")[0]).is_dir()}
    assert apps - allowed == set()
    imported = set().union(*(_local_imports(ROOT / package) for package in allowed if (ROOT / package).is_dir()))
    assert imported - allowed == set()
    assert "requirements.lock" in allowed
