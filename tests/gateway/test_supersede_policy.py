"""Which requests may be superseded, and which editor session they belong to (gateway/pipeline/supersede.py)."""
import pytest

from gateway import errors
from gateway.pipeline.supersede import is_interactive, session_identity, superseded


@pytest.mark.parametrize("kind,value,batch,expected", [
    ("completions", None, False, True),  # completions are interactive by default
    ("chat", None, False, False),  # chat only when marked
    ("completions", None, True, False),  # a batch request never is
    ("chat", b"true", False, True),
    ("completions", b"False", False, False),
    ("completions", b" 1 ", False, True),
    ("completions", b"no", False, False),
])
def test_interactive(kind, value, batch, expected):
    assert is_interactive(kind, value, batch) is expected


@pytest.mark.parametrize("value", [b"maybe", b"", b"truthy"])
def test_a_bad_interactive_value_is_a_400(value):
    with pytest.raises(errors.GatewayError) as refused:
        is_interactive("completions", value, False)
    assert refused.value.status == 400 and refused.value.code == "invalid_interactive_header"


def test_batch_and_interactive_together_is_a_400():
    with pytest.raises(errors.GatewayError):
        is_interactive("completions", b"true", True)


def test_the_session_header_names_the_session_per_key_and_endpoint():
    one = session_identity("completions", 1, b"editor-1", None, None)
    assert one == session_identity("completions", 1, b"editor-1", "someone", b"other.py")  # the header wins
    assert one != session_identity("completions", 2, b"editor-1", None, None)  # another key
    assert one != session_identity("chat", 1, b"editor-1", None, None)  # another endpoint
    assert one != session_identity("completions", 1, b"editor-2", None, None)


def test_user_and_file_name_a_session_only_together():
    both = session_identity("completions", 1, None, "dev-1", b"src/a.py")
    assert both is not None
    assert both != session_identity("completions", 1, None, "dev-2", b"src/a.py")
    assert both != session_identity("completions", 1, None, "dev-1", b"src/b.py")
    assert session_identity("completions", 1, None, "dev-1", None) is None
    assert session_identity("completions", 1, None, None, b"src/a.py") is None
    assert session_identity("completions", 1, None, 42, b"src/a.py") is None  # `user` must be a string
    assert session_identity("completions", 1, b"  ", None, None) is None


def test_an_overlong_identity_is_a_400():
    with pytest.raises(errors.GatewayError) as refused:
        session_identity("completions", 1, b"s" * 1025, None, None)
    assert refused.value.code == "invalid_session_header"


def test_the_answer_is_openai_shaped_and_not_retried():
    error = superseded()
    assert error.status == 410 and (b"x-should-retry", b"false") in error.headers
    assert b'"type":"superseded"' in error.body() and b'"code":"superseded"' in error.body()
