"""Acceptance property (a): no sequence of requests with arbitrary strings loses or duplicates a usage event.

Hypothesis sends sequences of requests to a running gateway whose strings hold NULs, lone surrogates,
huge values and odd unicode — in the model, the user, the prompt or messages, and the x-request-id
header — and whatever each one is answered (200, 400, 404, a stream), every authenticated request leaves
exactly one usage row (or one event set aside in the dead letter, counted), under the id it was answered with.
"""
from __future__ import annotations

import json

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.gateway_app.conftest import MODEL, inference_key, wait_for
from usage.models import UsageEvent

pytestmark = pytest.mark.django_db(transaction=True)

SPECIAL = ["\x00", "\ud800", "\udbff", "\udc00", "\udfff", "\ud83d", "\ude00", "\uffff", "\ufffe", "\U0010ffff",
           "\u202e", "e\u0301", "😀", "漢", "\\u0000", "\\", '"', "'", "\n", "\r\n", "\t", "\x7f", "\x1b[31m"]
HUGE = ["x" * 120_000, "\x00" * 40_000, "é\ud800" * 20_000, "😀" * 30_000]
odd = st.lists(st.one_of(st.characters(), st.sampled_from(SPECIAL)), max_size=24).map("".join)
text = st.one_of(odd, odd, odd, st.sampled_from(HUGE))  # a huge value in about one string of four
# Header bytes an HTTP client can send (no CR, LF or NUL): printable ASCII, tabs, latin-1's upper half.
header_bytes = st.binary(max_size=80).map(lambda raw: bytes(b for b in raw if b == 9 or 32 <= b < 127 or b >= 128))
request_id_header = st.one_of(st.none(), st.sampled_from([b"client-id-1", b"\xff\xfe", b"a" * 200]), header_bytes)


@st.composite
def requests(draw) -> dict:
    kind = draw(st.sampled_from(["chat", "completions"]))
    payload = {"model": draw(st.one_of(st.just(MODEL), text)), "max_tokens": 2}
    if kind == "chat":
        payload["messages"] = [{"role": "user", "content": draw(text)}]
    else:
        payload["prompt"] = draw(text)
    if draw(st.booleans()):
        payload["user"] = draw(text)
    if draw(st.booleans()):
        payload["stream"] = True
    return {"kind": kind, "payload": payload, "request_id": draw(request_id_header)}


def _send(url: str, key: str, request: dict) -> httpx.Response:
    path = "/v1/chat/completions" if request["kind"] == "chat" else "/v1/completions"
    headers = {"authorization": f"Bearer {key}", "content-type": "application/json"}
    if request["request_id"] is not None:
        headers["x-request-id"] = request["request_id"]
    # JSON's \u escapes carry NULs and lone surrogates as a client's JSON library would send them.
    return httpx.post(url + path, content=json.dumps(request["payload"]).encode(), headers=headers, timeout=30)


def test_no_sequence_of_requests_with_arbitrary_strings_loses_or_duplicates_a_usage_event(gateway, tenant_a,
                                                                                        shared_pool):
    key = inference_key(tenant_a)  # a service key: no per-user rate limit to run into
    server = gateway(usage_flush_seconds=0.05)
    server.wait_until_serving(key.raw, MODEL)
    recorder = server.app.state.recorder
    sent = [0]  # requests sent so far, over every example (a late row of one example still counts)

    @settings(max_examples=20, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                     HealthCheck.data_too_large])
    @given(st.lists(requests(), min_size=1, max_size=4))
    def sequence_is_metered_once_each(sequence):
        sent[0] += len(sequence)
        answers = [_send(server.url, key.raw, request) for request in sequence]
        # The gateway's own id per request, whatever the client sent. (An answer without one is the
        # HTTP server's plain 500 for an application error: its request is still counted below.)
        ids = [answer.headers["x-request-id"] for answer in answers if "x-request-id" in answer.headers]
        assert len(set(ids)) == len(ids)

        def accounted():
            rows = UsageEvent.objects.filter(tenant=tenant_a).count()
            return rows + recorder.set_aside + recorder.lost >= sent[0] and rows

        rows = wait_for(accounted, timeout=10)
        assert rows == sent[0], ([a.status_code for a in answers], rows, sent[0], recorder.pending)  # none extra
        assert (recorder.set_aside, recorder.lost) == (0, 0)  # nothing had to be set aside, nothing lost
        stored = set(UsageEvent.objects.filter(request_id__in=ids).values_list("request_id", flat=True))
        assert stored == set(ids)  # each under the id it was answered with

    sequence_is_metered_once_each()
