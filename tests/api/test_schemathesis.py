"""schemathesis over the whole REST API: every operation, as every kind of caller, answers as its schema says.

Requests go in-process to the Django WSGI app (no network) as a platform admin, a tenant owner, a developer
(personal key), a developer-role service key, an auditor, an inference-only key or nobody; each inside a
savepoint that is rolled back, so one request's DELETE does not change what the next sees. Path ids are
aimed at objects that exist (a tenant with members, keys and quotas; a model with versions; a deployment
with an instance; audit events), so writes reach the services instead of stopping at a 404. A second,
deterministic test reads every object through every GET route and checks each answer the same way.

Checks: not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance.
`KNOWN_DIFFERENCES` is the allow-list, each with why (docs/api.md lists the same). Examples per operation:
SWITCHYARD_FUZZ_EXAMPLES (default 12, derandomized so CI is repeatable); set SWITCHYARD_FUZZ_REPORT to a
file path to log every finding as JSON lines instead of failing (for exploring with more examples).
"""
import hashlib
import json
import os

import hypothesis
import pytest
import schemathesis
from django.db import transaction
from schemathesis.checks import not_a_server_error
from schemathesis.generation.meta import TestPhase
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.api.world import APP, build_world, one_connection, openapi_document

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
EXAMPLES = int(os.environ.get("SWITCHYARD_FUZZ_EXAMPLES", "12"))
REPORT = os.environ.get("SWITCHYARD_FUZZ_REPORT")

# (operation label, failure code) → why the difference is accepted. Codes: ST101 server error,
# ST103 undocumented status, ST105 undocumented content type, ST108 body does not match its schema.
KNOWN_DIFFERENCES: dict[tuple[str, str], str] = {}


schema = schemathesis.openapi.from_dict(openapi_document())


@pytest.fixture(autouse=True)
def one_connection_for_the_test():
    with one_connection():
        yield


@pytest.fixture
def fuzz_world(alice, bob, charlie):
    return build_world(alice, charlie)


def _aim(case, world) -> None:
    """Point slugs at tenant A and integer ids at existing rows (or, one time in n+1, leave them as generated)."""
    params = case.path_parameters or {}
    segments = case.operation.path.strip("/").split("/")
    for name, value in params.items():
        if name in ("slug", "tenant_slug"):
            params[name] = "tenant-a"
            continue
        kind = _kind(segments, name)
        if kind in world.ids and isinstance(value, int) and not isinstance(value, bool):
            choices = world.ids[kind] + [value]
            params[name] = choices[value % len(choices)]


def _kind(segments: list[str], name: str) -> str | None:
    placeholder = "{" + name + "}"
    if placeholder not in segments:
        return None
    before = segments[segments.index(placeholder) - 1]
    return {"model_pk": "models", "instance_id": "instances", "seq": "events"}.get(name) or (
        before if before != "versions" else "versions")


# The schema's own examples (valid requests, a few per operation) go out as every caller. Generated cases go
# out as one caller each, picked by a hash of the request so a case always goes out as the same caller
# (Hypothesis replays and shrinks it): all seven would cost seven times as long. The two callers who get past the
# permission checks, and so reach the services, come up twice as often.
CALLERS = ("platform", "owner", "developer", "dev-service", "auditor", "inference", "anonymous")
CALLER_ROTATION = CALLERS + ("platform", "owner")


def _callers_for(case) -> tuple[str, ...]:
    if case.meta is not None and case.meta.phase.name == TestPhase.EXAMPLES:
        return CALLERS
    request = [case.operation.label, case.path_parameters, case.query, case.headers, case.body]
    digest = hashlib.sha256(json.dumps(request, sort_keys=True, default=repr).encode()).digest()
    return (CALLER_ROTATION[digest[0] % len(CALLER_ROTATION)],)


def _call(case, world, caller: str):
    """In a savepoint that is rolled back: every case starts from the same world."""
    key = world.callers.get(caller)
    with transaction.atomic():
        response = case.call(app=APP, headers={"Authorization": f"Bearer {key}"} if key else None)
        transaction.set_rollback(True)
    return response


def _findings(case, response, caller: str) -> list[str]:
    try:
        case.validate_response(response, checks=CHECKS)
    except BaseExceptionGroup as group:
        failures = list(group.exceptions)
    except AssertionError as failure:
        failures = [failure]
    else:
        return []
    found = []
    for failure in failures:
        code = getattr(failure, "code", "?")
        if (case.operation.label, code) in KNOWN_DIFFERENCES:
            continue
        found.append(f"[{caller}] {code} {failure}\n    {case.as_curl_command()}")
        if REPORT:
            with open(REPORT, "a") as report:
                report.write(json.dumps({"op": case.operation.label, "caller": caller, "code": code,
                                         "status": response.status_code, "failure": str(failure)[:2000],
                                         "body": response.text[:500], "curl": case.as_curl_command()}) + "\n")
    return found


@schema.parametrize()
@hypothesis.settings(max_examples=EXAMPLES, deadline=None, derandomize=not REPORT, database=None,
                     suppress_health_check=list(hypothesis.HealthCheck))
def test_every_operation_answers_as_documented(case, fuzz_world):
    _aim(case, fuzz_world)
    found = []
    for caller in _callers_for(case):
        found += _findings(case, _call(case, fuzz_world, caller), caller)
    assert REPORT or not found, "\n".join(found)


READERS = ("platform", "owner", "dev-service")
FORMATS = {"/api/v1/usage/breakdown/": ["json", "csv"], "/api/v1/usage/costs/": ["json", "csv"],
           "/api/v1/audit/export": ["jsonl", "csv"]}


def _reads(world):
    """Every GET operation with its path ids set to each existing object (model and version paired)."""
    for result in schema.get_all_operations():
        operation = result.ok()
        if operation.method.upper() != "GET":
            continue
        for params in _every_object(operation.path, world):
            for fmt in FORMATS.get(operation.path, [None]):
                yield operation, params, ({"format": fmt} if fmt else {})


def _every_object(path: str, world):
    segments = path.strip("/").split("/")
    names = [segment[1:-1] for segment in segments if segment.startswith("{")]
    if not names:
        return [{}]
    combos = [{}]
    for name in names:
        kind = "tenant" if name in ("slug", "tenant_slug") else _kind(segments, name)
        # A route of a kind the world does not build is read by the generated cases only.
        values = ["tenant-a"] if kind == "tenant" else world.ids.get(kind, [])
        combos = [{**combo, name: value} for combo in combos for value in values]
    return combos


def test_every_read_of_every_object_matches_its_schema(fuzz_world):
    """Deterministic: each object of the world read through every GET route, as the callers who see it, conforms.

    Generated ids rarely hit a service key, a tenant-wide quota or a shared pool; these reads always do.
    """
    found, reads = [], 0
    for operation, params, query in _reads(fuzz_world):
        for caller in READERS:
            case = operation.Case(path_parameters=params, query=query)
            response = _call(case, fuzz_world, caller)
            reads += response.status_code == 200
            found += _findings(case, response, caller)
    assert not found, "\n".join(found)
    assert reads > 100  # the world was really read, not 404'd
