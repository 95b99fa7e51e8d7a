"""Reasons a person can act on (core.reasons): a failed task's reason from its outcome, and the
excerpt of a refusal's body kept with its dead letter -- bounded, and with secrets masked."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from core.reasons import REASON_LIMIT, answer_excerpt, failure_reason, redact


def test_the_reason_is_the_first_field_that_says_why() -> None:
    assert failure_reason({"error": "card declined", "message": "later"}) == "card declined"
    assert failure_reason({"code": 7, "message": "  quota exceeded "}) == "quota exceeded"
    assert failure_reason({"error": {"code": "E1", "message": "bad address"}}) == "bad address"
    assert failure_reason({"error": "", "reason": "timeout at the vendor"}) == "timeout at the vendor"


def test_no_reason_where_the_outcome_gives_none() -> None:
    for outcome in (None, "failed", ["error"], {}, {"code": 51}, {"error": 3}, {"error": {"code": 1}}):
        assert failure_reason(outcome) is None, outcome


def test_reasons_and_answers_are_bounded() -> None:
    shown = failure_reason({"error": "x" * 10_000})
    assert shown is not None and len(shown) == REASON_LIMIT and shown.endswith("…")
    answer = answer_excerpt(b"y" * 100_000)
    assert answer is not None and len(answer) == REASON_LIMIT


def test_secret_looking_values_are_masked_their_names_kept() -> None:
    text = (
        '{"api_key": "sk_live_1", "password":"hunter2", "note": "fine"} token=abc123&x=1'
        " Authorization: Bearer eyJhbGciOi.payload.sig client_secret='s3'"
    )
    shown = redact(text)
    for secret in ("sk_live_1", "hunter2", "abc123", "eyJhbGciOi", "s3'"):
        assert secret not in shown, secret
    assert '"note": "fine"' in shown and '"api_key": "[redacted]"' in shown and "x=1" in shown


def test_an_answer_carries_no_control_characters_but_newlines() -> None:
    assert answer_excerpt(b"bad\x1b[31m red\x00 \r\n line \xff") == "bad [31m red   \n line \ufffd"
    assert answer_excerpt(b"") is None and answer_excerpt(b"   ") is None and answer_excerpt(None) is None


@given(st.binary(max_size=5000))
def test_any_body_gives_a_bounded_printable_excerpt(body: bytes) -> None:
    answer = answer_excerpt(body)
    assert answer is None or 0 < len(answer) <= REASON_LIMIT
    assert not any(ord(c) < 32 and c not in "\n\t" for c in answer or "")
