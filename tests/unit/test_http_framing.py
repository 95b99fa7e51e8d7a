"""wire.http_framing: where a request ends, fed byte runs of any size, agrees with gunicorn's own
parser on every valid request; refusals and malformed heads are settled without waiting."""

from __future__ import annotations

from types import SimpleNamespace

from gunicorn.config import Config
from gunicorn.http.parser import RequestParser
from hypothesis import given
from hypothesis import strategies as st

from app.gunicorn_worker import HeldBytes, head_limit
from wire.http_framing import RequestFraming, Verdict

MAX_BODY = 4096
HEAD = 64 * 1024


def feed_all(data: bytes, cuts: list[int]) -> list[Verdict]:
    framing = RequestFraming(HEAD, MAX_BODY)
    points = sorted({c % (len(data) + 1) for c in cuts} | {len(data)})
    verdicts, start = [], 0
    for point in points:
        if point > start:
            verdicts.append(framing.feed(data[start:point]))
            start = point
    return verdicts


def gunicorn_body(data: bytes) -> bytes:
    """The first request's body as gunicorn's parser reads it from ``data`` alone."""
    parser = RequestParser(Config(), b"", ("127.0.0.1", 1))
    parser.unreader = HeldBytes()
    parser.unreader.unread(data)
    return next(parser).body.read()


headers = st.lists(
    st.tuples(st.from_regex(r"X-[A-Za-z]{1,8}", fullmatch=True), st.from_regex(r"[a-z0-9 ]{0,20}", fullmatch=True)),
    max_size=5,
)
bodies = st.binary(max_size=MAX_BODY)
cuts = st.lists(st.integers(min_value=0, max_value=10_000), max_size=30)


def chunked(body: bytes, sizes: list[int]) -> bytes:
    out, rest = b"", body
    for size in sizes:
        if not rest:
            break
        piece, rest = rest[: max(1, size)], rest[max(1, size) :]
        out += b"%x;ext=1\r\n%s\r\n" % (len(piece), piece)
    if rest:
        out += b"%x\r\n%s\r\n" % (len(rest), rest)
    return out + b"0\r\nX-Trailer: t\r\n\r\n"


@given(headers, bodies, cuts, st.booleans(), st.lists(st.integers(1, 300), max_size=8))
def test_ready_exactly_when_the_request_is_whole_as_gunicorn_reads_it(
    extra: list[tuple[str, str]], body: bytes, cut: list[int], use_chunked: bool, sizes: list[int]
) -> None:
    lines = [b"POST /webhooks/sim HTTP/1.1", b"Host: 127.0.0.1"] + [f"{k}: {v}".encode() for k, v in extra]
    if use_chunked:
        lines.append(b"Transfer-Encoding: chunked")
        payload = chunked(body, sizes)
    else:
        lines.append(b"Content-Length: %d" % len(body))
        payload = body
    request = b"\r\n".join(lines) + b"\r\n\r\n" + payload
    pipelined = request + b"GET /healthz HTTP/1.1\r\n"  # the next request's start changes nothing

    verdicts = feed_all(request, cut)
    assert verdicts[-1] is Verdict.READY and set(verdicts[:-1]) <= {Verdict.MORE}
    assert feed_all(pipelined, cut)[-1] is Verdict.READY
    assert gunicorn_body(request) == body


def test_a_request_without_a_body_is_ready_at_the_end_of_its_head() -> None:
    framing = RequestFraming(HEAD, MAX_BODY)
    assert framing.feed(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r") is Verdict.MORE
    assert framing.feed(b"\n") is Verdict.READY


def test_oversized_bodies_and_heads_are_refused_unread() -> None:
    declared = RequestFraming(HEAD, MAX_BODY)
    assert declared.feed(b"POST / HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % (MAX_BODY + 1)) is Verdict.BODY_TOO_LARGE
    sent = RequestFraming(HEAD, MAX_BODY)
    assert sent.feed(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n") is Verdict.MORE
    assert sent.feed(b"%x\r\n" % (MAX_BODY + 1)) is Verdict.BODY_TOO_LARGE
    head = RequestFraming(1024, MAX_BODY)
    assert head.feed(b"GET / HTTP/1.1\r\n" + b"X-Pad: y\r\n" * 200) is Verdict.HEAD_TOO_LARGE


def test_heads_gunicorn_refuses_are_handed_over_at_once() -> None:
    """Gunicorn answers these 400 (or 501) from the head alone: no reason to wait for a body."""
    for head in (
        b"GET / HTTP/1.1\nHost: x\n",  # bare LF, head not even finished
        b"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n",
        b"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
        b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
        b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"POST / HTTP/1.1\r\nno colon\r\n\r\n",
    ):
        assert RequestFraming(HEAD, MAX_BODY).feed(head) is Verdict.READY, head


def test_expect_continue_is_noted_only_while_the_body_is_still_to_come() -> None:
    waiting = RequestFraming(HEAD, MAX_BODY)
    assert waiting.feed(b"POST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n") is Verdict.MORE
    assert waiting.in_body and waiting.expect_continue
    eager = RequestFraming(HEAD, MAX_BODY)
    assert eager.feed(b"POST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\nab") is Verdict.MORE
    assert not eager.expect_continue


def test_the_head_limit_covers_what_gunicorn_accepts() -> None:
    cfg = SimpleNamespace(limit_request_line=4094, limit_request_fields=100, limit_request_field_size=8190)
    assert head_limit(cfg) >= 4094 + 100 * 8192
    unlimited = SimpleNamespace(limit_request_line=0, limit_request_fields=0, limit_request_field_size=0)
    assert head_limit(unlimited) >= 8190 + 32768 * 8192
