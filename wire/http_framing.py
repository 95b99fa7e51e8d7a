"""Where an HTTP/1.1 request ends, found as its bytes arrive: the read-ahead of the web server
(app/gunicorn_worker.py) buffers a request off-thread until this says it is whole, so a client that
sends its head or its body slowly holds a socket and a few bytes, never an application thread.

The rules are gunicorn's own (``gunicorn/http/message.py``, ``body.py``), read from RFC 9112: the
head ends at the first CRLF CRLF; a body is ``Content-Length`` bytes or a chunked body up to its
last chunk and trailer section; a request with neither has none. Whenever the bytes are malformed
in a way gunicorn refuses while parsing the head (a bare LF, two ``Content-Length``, a transfer
coding that does not end in ``chunked``, a bad chunk size...), the verdict is READY: gunicorn's
parser then answers 400 from the bytes it has, so nothing here has to be as strict as it is, only
never laxer about where a valid request ends. Pure: bytes in, a verdict out.
"""

from __future__ import annotations

import enum

#: gunicorn's own cap on a chunk-size line (``limit_request_field_size``'s default).
MAX_CHUNK_LINE = 8190
#: What chunk framing may add to a body's bytes before the body counts as too large (a 256 KiB
#: body in 8 KiB chunks adds about 250 bytes; this allows any sane chunking and bounds the buffer).
CHUNK_OVERHEAD = 64 * 1024

_HEX = frozenset(b"0123456789abcdefABCDEF")


class Verdict(enum.Enum):
    MORE = "more"  # the request is not whole yet: keep reading
    READY = "ready"  # whole (or malformed in a way gunicorn's parser answers): hand it over
    HEAD_TOO_LARGE = "head_too_large"  # 431: no end of head within max_head_bytes
    BODY_TOO_LARGE = "body_too_large"  # 413: a body (declared or sent) over max_body_bytes


class RequestFraming:
    """Feed it a connection's bytes as they arrive; :meth:`feed` says when the first request in
    them is whole. ``buffer`` keeps every byte fed (a pipelined next request included): what the
    caller hands to the parser. Each byte is scanned a bounded number of times, so a client that
    sends one byte at a time costs linear work, not quadratic."""

    def __init__(self, max_head_bytes: int, max_body_bytes: int) -> None:
        self.max_head_bytes = max_head_bytes
        self.max_body_bytes = max_body_bytes
        self.buffer = bytearray()
        #: index just past the head's CRLF CRLF, once seen
        self.head_end: int | None = None
        #: the head asked for ``100 Continue`` before a body it has not sent yet
        self.expect_continue = False
        self._head_scan = 0  # the CRLF CRLF search resumes here
        self._lf_scan = 0  # the bare-LF check resumes here
        self._length: int | None = None  # Content-Length body: its length
        self._chunked: _Chunked | None = None

    @property
    def in_body(self) -> bool:
        """The head is whole and a body is still coming."""
        return self.head_end is not None

    def feed(self, data: bytes) -> Verdict:
        self.buffer += data
        if self.head_end is None:
            verdict = self._scan_head()
            if verdict is not Verdict.MORE or self.head_end is None:
                return verdict
        if self._length is not None:
            return Verdict.READY if len(self.buffer) - self.head_end >= self._length else Verdict.MORE
        if self._chunked is not None:
            return self._chunked.scan(self.buffer)
        return Verdict.READY

    def _scan_head(self) -> Verdict:
        buf = self.buffer
        end = buf.find(b"\r\n\r\n", max(0, self._head_scan - 3))
        self._head_scan = len(buf)
        stop = end + 4 if end >= 0 else len(buf)
        lf = buf.find(b"\n", self._lf_scan, stop)
        while lf >= 0:
            if lf == 0 or buf[lf - 1] != 0x0D:  # a bare LF: gunicorn refuses the head at once
                return Verdict.READY
            lf = buf.find(b"\n", lf + 1, stop)
        self._lf_scan = stop
        if end < 0:
            return Verdict.HEAD_TOO_LARGE if len(buf) > self.max_head_bytes else Verdict.MORE
        if stop > self.max_head_bytes:
            return Verdict.HEAD_TOO_LARGE
        self.head_end = stop
        return self._frame(bytes(buf[:end]))

    def _frame(self, head: bytes) -> Verdict:
        """The body's framing, from the head's lines (without its final CRLF CRLF)."""
        lines = head.split(b"\r\n")
        if lines and not lines[0]:  # one empty line before the request line is allowed
            lines = lines[1:]
        if not lines:
            return Verdict.READY
        lengths: list[bytes] = []
        codings: list[bytes] = []
        expect = False
        for line in lines[1:]:
            name, sep, value = line.partition(b":")
            if not sep:
                return Verdict.READY  # not a header line: gunicorn answers 400
            name, value = name.lower(), value.strip(b" \t")
            if name == b"content-length":
                lengths.append(value)
            elif name == b"transfer-encoding":
                codings += [c.strip(b" \t").lower() for c in value.split(b",")]
            elif name == b"expect" and value.lower() == b"100-continue":
                expect = True
        if codings:
            if b"chunked" not in codings or lengths or lines[0].endswith(b"HTTP/1.0"):
                return Verdict.READY  # refused by gunicorn from the head alone
            self._chunked = _Chunked(self.head_end or 0, self.max_body_bytes, self.max_head_bytes)
        elif lengths:
            if len(lengths) != 1 or not lengths[0].isdigit():
                return Verdict.READY
            self._length = int(lengths[0])
            if self._length > self.max_body_bytes:
                return Verdict.BODY_TOO_LARGE
            if self._length == 0:
                return Verdict.READY
        else:
            return Verdict.READY
        self.expect_continue = expect and len(self.buffer) == self.head_end
        return Verdict.MORE


class _Chunked:
    """A chunked body, scanned where the last scan stopped: chunk-size line, data and its CRLF,
    ..., the last chunk (size 0), then the trailer section up to its empty line."""

    def __init__(self, start: int, max_body_bytes: int, max_trailer_bytes: int) -> None:
        self.pos = start
        self.start = start
        self.max_body_bytes = max_body_bytes
        self.max_trailer_bytes = max_trailer_bytes
        self.size: int | None = None  # the current chunk's size, once its line is read
        self.trailers = False
        self.trailer_scan = 0  # the trailer section's CRLF CRLF search resumes here
        self.total = 0

    def scan(self, buf: bytearray) -> Verdict:
        if len(buf) - self.start > self.max_body_bytes + CHUNK_OVERHEAD:
            return Verdict.BODY_TOO_LARGE
        while True:
            if self.trailers:
                if buf[self.pos : self.pos + 2] == b"\r\n" or buf.find(b"\r\n\r\n", self.trailer_scan) >= 0:
                    return Verdict.READY
                if len(buf) - self.pos > self.max_trailer_bytes:
                    return Verdict.HEAD_TOO_LARGE
                self.trailer_scan = max(self.pos, len(buf) - 3)
                return Verdict.MORE
            if self.size is None:
                eol = buf.find(b"\r\n", self.pos, self.pos + MAX_CHUNK_LINE + 2)
                if eol < 0:
                    return Verdict.READY if len(buf) - self.pos > MAX_CHUNK_LINE else Verdict.MORE
                digits = bytes(buf[self.pos : eol]).split(b";", 1)[0].rstrip(b" \t")
                if not digits or not _HEX.issuperset(digits):
                    return Verdict.READY  # gunicorn answers InvalidChunkSize
                self.size = int(digits, 16)
                self.total += self.size
                if self.total > self.max_body_bytes:
                    return Verdict.BODY_TOO_LARGE
                self.pos = eol + 2
                if self.size == 0:
                    self.trailers, self.trailer_scan = True, self.pos
                continue
            end = self.pos + self.size
            if len(buf) < end + 2:
                return Verdict.MORE
            if buf[end : end + 2] != b"\r\n":
                return Verdict.READY  # gunicorn answers ChunkMissingTerminator
            self.pos, self.size = end + 2, None
