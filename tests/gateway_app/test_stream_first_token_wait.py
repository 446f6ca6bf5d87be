"""A stream's wait for its first token is bounded by the first-byte timeout, not the idle timeout: vLLM sends
a stream's headers at once and its first event with the first token, so a request waiting in a busy engine's
queue is before its first byte, not idle between tokens (in issue 16's real-vLLM burst, streams queued behind
two rounds of long answers were cut with a 504 event after the 30-s idle timeout)."""
import pytest

from tests.gateway_app.conftest import MODEL, wait_for
from tests.gateway_app.helpers import usage_rows

pytestmark = pytest.mark.django_db(transaction=True)


def stream(server, alice, name: str):
    return server.post("/v1/completions", alice.key.raw, {"model": MODEL, "prompt": name, "stream": True})


def test_a_stream_queued_longer_than_the_idle_timeout_gets_its_tokens(gateway, alice, scripted_engine):
    server = gateway(idle_timeout=1.0, first_byte_timeout=20.0)
    server.wait_until_serving(alice.key.raw, MODEL)
    answer = stream(server, alice, "stream-queued-3s")
    assert answer.status_code == 200 and '"text":"def"' in answer.text and "error" not in answer.text
    assert answer.text.rstrip().endswith("data: [DONE]")
    (row,) = wait_for(lambda: usage_rows(model_name=MODEL), timeout=10)
    assert row.outcome == "ok" and row.ttft_ms >= 2500


def test_a_stream_whose_first_token_misses_the_first_byte_timeout_ends_with_a_504_event(gateway, alice,
                                                                                         scripted_engine):
    server = gateway(idle_timeout=0.5, first_byte_timeout=1.5)
    server.wait_until_serving(alice.key.raw, MODEL)
    answer = stream(server, alice, "stream-queued-3s")
    assert answer.status_code == 200 and '"code":"upstream_timeout"' in answer.text.replace(" ", "")
    (row,) = wait_for(lambda: usage_rows(model_name=MODEL), timeout=10)
    assert row.outcome == "timeout" and row.ttft_ms is None
