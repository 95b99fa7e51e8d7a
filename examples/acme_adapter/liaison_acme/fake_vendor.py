"""A fake of Acme Orders on loopback, for tests: its API (see ``liaison_acme.adapter``) in a thread,
and its callbacks, signed as Acme signs them. It keeps the conformance kit's ``LoopbackVendor``
promises (``workers.providers.conformance``) and is what Liaison's own end-to-end test runs against.
It listens on 127.0.0.1 only and sends callbacks only to the URL an order names.
"""

from __future__ import annotations

import itertools
import json
import socket
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit
from xml.etree import ElementTree

from liaison_acme.adapter import STATES, parse_xml, signature


@dataclass
class Order:
    id: str
    ref: str
    notify: str
    input: Any
    state: str = "PENDING"
    voided: bool = False
    result: dict[str, Any] | None = None


@dataclass
class FakeAcme:
    """Acme's API on ``base_url``; ``secrets[0]`` signs its callbacks."""

    secrets: tuple[str, ...] = ("acme-test-secret-0123456789abcdef",)
    statuses: dict[str, str] = field(default_factory=lambda: dict(STATES))
    dated: bool = True
    orders: dict[str, Order] = field(default_factory=dict)
    submits: int = 0
    _lose_next: bool = False
    _ids: Any = field(default_factory=lambda: itertools.count(1))
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None

    # --- running ---

    def start(self) -> FakeAcme:
        vendor = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # quiet
                return

            def do_GET(self) -> None:
                vendor._get(self)

            def do_POST(self) -> None:
                vendor._post(self)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    @property
    def base_url(self) -> str:
        assert self._server is not None, "start() it first"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    # --- the API ---

    @staticmethod
    def _reply(handler: BaseHTTPRequestHandler, status: int, element: ElementTree.Element | None = None) -> None:
        body = ElementTree.tostring(element) if element is not None else b""
        handler.send_response(status)
        handler.send_header("Content-Type", "application/xml")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    @staticmethod
    def _element(order: Order) -> ElementTree.Element:
        element = ElementTree.Element("order", id=order.id, ref=order.ref, state=order.state)
        if order.result is not None:
            ElementTree.SubElement(element, "result").text = json.dumps(order.result)
        return element

    def _get(self, handler: BaseHTTPRequestHandler) -> None:
        url = urlsplit(handler.path)
        with self._lock:
            if url.path == "/v2/orders":
                ref = parse_qs(url.query).get("ref", [""])[0]
                orders = ElementTree.Element("orders")
                for order in self.orders.values():
                    if order.ref == ref:
                        orders.append(self._element(order))
                return self._reply(handler, 200, orders)
            if url.path.startswith("/v2/orders/"):
                found = self.orders.get(unquote(url.path.removeprefix("/v2/orders/")))
                if found is not None:
                    return self._reply(handler, 200, self._element(found))
        self._reply(handler, 404)

    def _post(self, handler: BaseHTTPRequestHandler) -> None:
        url = urlsplit(handler.path)
        body = handler.rfile.read(int(handler.headers.get("Content-Length", "0")))
        if url.path == "/v2/orders":
            return self._create(handler, body)
        if url.path.startswith("/v2/orders/") and url.path.endswith("/void"):
            with self._lock:
                order = self.orders.get(unquote(url.path.removeprefix("/v2/orders/").removesuffix("/void")))
                if order is not None:
                    order.voided, order.state = True, "VOID"
                    return self._reply(handler, 200, self._element(order))
        self._reply(handler, 404)

    def _create(self, handler: BaseHTTPRequestHandler, body: bytes) -> None:
        element = parse_xml(body, "order")
        ref = element.get("ref", "")
        with self._lock:
            self.submits += 1
            order = next((o for o in self.orders.values() if o.ref == ref), None)
            if order is None:  # Acme deduplicates on ref
                order = Order(
                    f"A-{next(self._ids)}",
                    ref,
                    element.findtext("notify", ""),
                    json.loads(element.findtext("input", "null")),
                )
                self.orders[order.id] = order
            lose, self._lose_next = self._lose_next, False
        if lose:  # the order is made, the answer never comes
            handler.close_connection = True
            handler.connection.shutdown(socket.SHUT_RDWR)
            return
        self._reply(handler, 201, self._element(order))

    # --- the conformance kit's LoopbackVendor ---

    def jobs_for(self, reference: str) -> int:
        with self._lock:
            return sum(1 for o in self.orders.values() if o.ref == reference)

    def lose_next_submit_answer(self) -> None:
        with self._lock:
            self._lose_next = True

    def set_status(self, job_id: str, status: str) -> None:
        with self._lock:
            self.orders[job_id].state = status

    def canceled(self, job_id: str) -> bool:
        with self._lock:
            return self.orders[job_id].voided

    def event(self, kind: str, job_id: str, reference: str) -> bytes:
        types = {
            "accepted": ("order.accepted", "PENDING"),
            "succeeded": ("order.state", "DONE"),
            "failed": ("order.state", "FAILED"),
            "canceled": ("order.state", "VOID"),
            "unknown": ("order.note", "WORKING"),
        }
        kind_, state = types[kind]
        element = ElementTree.Element("event", id=f"E-{next(self._ids)}", type=kind_, order=job_id, state=state)
        if kind == "succeeded":
            ElementTree.SubElement(element, "result").text = json.dumps({"answer": 42})
        return ElementTree.tostring(element)

    def sign(self, body: bytes, now_s: float, secret: str | None = None) -> dict[str, str]:
        timestamp = int(now_s)
        return {
            "Content-Type": "application/xml",
            "Acme-Signature": f"t={timestamp},sig={signature(secret or self.secrets[0], timestamp, body)}",
        }

    # --- driving an order to its end, as Acme would ---

    def finish(self, job_id: str, state: str = "DONE", result: dict[str, Any] | None = None) -> int:
        """Put the order in ``state`` and send its signed ``order.state`` callback to the URL it
        names; return the HTTP status of the answer."""
        with self._lock:
            order = self.orders[job_id]
            order.state, order.result = state, result
        element = ElementTree.Element("event", id=f"E-{next(self._ids)}", type="order.state", order=job_id, state=state)
        if result is not None:
            ElementTree.SubElement(element, "result").text = json.dumps(result)
        body = ElementTree.tostring(element)
        request = urllib.request.Request(order.notify, data=body, headers=self.sign(body, time.time()), method="POST")
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:  # the notify URL: the test's loopback
                return int(answer.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)
