"""A real OTLP/HTTP trace receiver on loopback, for tests and the e2e benchmark's ``--otlp``: it
decodes each ``POST /v1/traces`` (``ExportTraceServiceRequest``, protobuf, gzip or not) and keeps
the spans, flattened to what a test asserts on."""

from __future__ import annotations

import gzip
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


@dataclass(frozen=True)
class Span:
    service: str
    name: str
    trace_id: str  # 32 hex
    span_id: str  # 16 hex
    parent_id: str  # 16 hex, "" for a root span
    kind: int
    #: every attribute, the span's and its events' (``<event name>.<key>``), as exported
    attributes: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    #: the trace ids of its links
    linked: tuple[str, ...] = ()

    def texts(self) -> list[str]:
        """Every string the span exported: its name, attribute values (lists flattened)."""
        found = [self.name]
        for value in self.attributes.values():
            found.extend(str(v) for v in (value if isinstance(value, list) else [value]))
        return found

    def line(self) -> str:
        return f"{self.service:<15} {self.name:<45} {self.trace_id} {self.span_id} {self.parent_id or '-':<16}"


def _service(resource: Any) -> str:
    for attribute in resource.attributes:
        if attribute.key == "service.name":
            return str(attribute.value.string_value)
    return "?"


def _value(value: Any) -> Any:
    """An OTLP ``AnyValue`` as Python (arrays as lists)."""
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, kind) if kind else None


def _attributes(span: Any) -> dict[str, Any]:
    found = {a.key: _value(a.value) for a in span.attributes}
    for event in span.events:
        found.update({f"{event.name}.{a.key}": _value(a.value) for a in event.attributes})
    return found


def decode(body: bytes, detail: bool = True) -> list[Span]:
    """The spans of one export request; ``detail=False`` leaves attributes and links out (a sink)."""
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    spans = []
    for resource_spans in request.resource_spans:
        service = _service(resource_spans.resource)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans.append(
                    Span(
                        service,
                        span.name,
                        span.trace_id.hex(),
                        span.span_id.hex(),
                        span.parent_span_id.hex(),
                        int(span.kind),
                        _attributes(span) if detail else {},
                        tuple(link.trace_id.hex() for link in span.links) if detail else (),
                    )
                )
    return spans


class OtlpReceiver:
    """``with OtlpReceiver() as receiver:`` -- ``receiver.url`` is what OTEL_EXPORTER_OTLP_ENDPOINT names;
    ``keep=False`` counts spans without keeping them (a benchmark's sink)."""

    def __init__(self, keep: bool = True) -> None:
        self._lock = threading.Lock()
        self._spans: list[Span] = []
        self.count = 0
        self.keep = keep
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path != "/v1/traces":
                    self.send_response(404)
                    self.end_headers()
                    return
                receiver._add(decode(body, detail=receiver.keep))
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet: the test prints what it needs."""

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="otlp-receiver", daemon=True)

    def _add(self, spans: list[Span]) -> None:
        with self._lock:
            self.count += len(spans)
            if self.keep:
                self._spans.extend(spans)

    def spans(self) -> list[Span]:
        with self._lock:
            return list(self._spans)

    def __enter__(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self._server.shutdown()
        self._server.server_close()
