"""Liaison's adapter for Acme Orders, a fictional vendor no profile can describe: its API speaks XML,
and its callbacks carry ``Acme-Signature: t=<unix>,sig=<base64 HMAC-SHA256 of "<t>:" + body>``.

Acme's API (under the provider's base URL):

- ``POST /v2/orders`` ``<order ref="…"><input>JSON</input><notify>URL</notify></order>`` → the order;
  a second order with the same ``ref`` is the first (Acme deduplicates on it).
- ``GET /v2/orders?ref=…`` → ``<orders>`` holding the order for that ref, or none.
- ``GET /v2/orders/<id>`` → ``<order id state>`` with ``<result>JSON</result>`` once it is DONE.
- ``POST /v2/orders/<id>/void`` → cancels it (voiding twice is no error).
- Callbacks: ``<event id type order state><result>JSON</result></event>``, ``type`` one of
  ``order.accepted``, ``order.state`` (PENDING, WORKING, DONE, FAILED, VOID) or ``order.note``.

Everything is read bounded: a body with a DOCTYPE (entities) is refused before parsing, the result
JSON is parsed within Liaison's outcome limits, and every id is a short token.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
from typing import Any
from urllib.parse import quote
from xml.etree import ElementTree

from wire.bounded_json import InvalidJson, strict_loads
from workers.providers.plugin import (
    AdapterContext,
    EventType,
    JobSnapshot,
    MalformedEvent,
    Parsed,
    PermanentError,
    ProviderSettings,
    SignatureError,
    StaleTimestamp,
    SubmitJob,
    VendorEvent,
    Verified,
)

#: Acme's order states and what each means to Liaison.
STATES = {"PENDING": "queued", "WORKING": "running", "DONE": "succeeded", "FAILED": "failed", "VOID": "canceled"}
_TOKEN = re.compile(r"[A-Za-z0-9._:-]{1,200}")
_SIGNATURE = re.compile(r"t=(\d{1,12}),sig=([A-Za-z0-9+/=]{1,200})")


class NotAcme(ValueError):
    """A body that is not the XML Acme writes."""


def parse_xml(body: bytes, root: str) -> ElementTree.Element:
    """``body`` as an element named ``root``; no DOCTYPE (so no entity can expand), else NotAcme."""
    if b"<!" in body:
        raise NotAcme("a DOCTYPE, entity or comment is not Acme's")
    try:
        element = ElementTree.fromstring(body)
    except (ElementTree.ParseError, ValueError) as exc:
        raise NotAcme(f"not XML: {exc}") from None
    if element.tag != root:
        raise NotAcme(f"root element is <{element.tag[:50]}>, not <{root}>")
    return element


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """Acme's signature of a callback: base64 of HMAC-SHA256 of ``"<t>:" + body`` keyed with the secret."""
    mac = hmac.new(secret.encode(), f"{timestamp}:".encode() + body, hashlib.sha256).digest()
    return base64.b64encode(mac).decode()


class AcmeAdapter:
    """Acme Orders, for ``LIAISON_PROVIDER_<NAME>_KIND=plugin`` / ``_ADAPTER=acme``."""

    #: the Content-Type of its callbacks (Liaison refuses any other with 415)
    media_types = ("application/xml",)

    def __init__(self, settings: ProviderSettings, context: AdapterContext) -> None:
        if not settings.webhook_secrets or not all(settings.webhook_secrets):
            raise ValueError("Acme signs its callbacks: set WEBHOOK_SECRETS to its signing secret(s)")
        self.name = settings.name
        self.settings = settings
        self.context = context

    # --- outbound ---

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/xml", "Content-Type": "application/xml"}
        if self.settings.api_key:
            headers["X-Acme-Key"] = self.settings.api_key
        return headers

    def _broken(self, why: str) -> PermanentError:
        return PermanentError(f"{self.name}: Acme's answer refused: {why}")

    def _order(self, element: ElementTree.Element) -> tuple[str, str]:
        order_id, state = element.get("id", ""), element.get("state", "")
        if not _TOKEN.fullmatch(order_id):
            raise self._broken("order without a valid id")
        return order_id, state

    def _answer(self, body: bytes, root: str) -> ElementTree.Element:
        try:
            return parse_xml(body, root)
        except NotAcme as exc:
            raise self._broken(str(exc)) from None

    def submit(self, job: SubmitJob) -> str:
        order = ElementTree.Element("order", ref=job.reference)
        ElementTree.SubElement(order, "input").text = json.dumps(job.input)
        ElementTree.SubElement(order, "notify").text = self.context.webhook_url
        response = self.context.http.request(
            "POST", "/v2/orders", idempotent=False, headers=self._headers(), data=ElementTree.tostring(order)
        )
        return self._order(self._answer(response.content, "order"))[0]

    def cancel(self, job_id: str) -> None:
        self.context.http.request("POST", f"/v2/orders/{quote(job_id, safe='')}/void", idempotent=True)

    def status(self, job_id: str) -> JobSnapshot:
        response = self.context.http.request(
            "GET", f"/v2/orders/{quote(job_id, safe='')}", idempotent=True, headers=self._headers()
        )
        element = self._answer(response.content, "order")
        order_id, state = self._order(element)
        ours = STATES.get(state)
        if ours is None:
            raise self._broken("an order state Acme does not document")
        try:
            outcome = self._result(element)
        except MalformedEvent as exc:
            raise self._broken(str(exc)) from None
        return JobSnapshot(order_id, ours, outcome)

    def find(self, reference: str) -> str | None:
        response = self.context.http.request(
            "GET", "/v2/orders", idempotent=True, headers=self._headers(), params={"ref": reference}
        )
        for order in self._answer(response.content, "orders").findall("order"):
            if order.get("ref") == reference:
                return self._order(order)[0]
        return None

    # --- inbound ---

    def verify(self, headers: Any, body: bytes, now_s: float, tolerance_s: int) -> Verified:
        offered = next((v for k, v in headers.items() if isinstance(k, str) and k.lower() == "acme-signature"), None)
        if not isinstance(offered, str):
            raise SignatureError("missing_header")
        match = _SIGNATURE.fullmatch(offered.strip())
        if match is None:
            raise SignatureError("malformed_header")
        timestamp = int(match.group(1))
        if not any(
            hmac.compare_digest(signature(s, timestamp, body), match.group(2)) for s in self.settings.webhook_secrets
        ):
            raise SignatureError("bad_signature")
        if abs(now_s - timestamp) > tolerance_s:
            raise StaleTimestamp("stale")
        try:
            event_id = parse_xml(body, "event").get("id", "")
        except NotAcme:
            raise SignatureError("malformed_body") from None
        if not _TOKEN.fullmatch(event_id):
            raise SignatureError("no_event_id")
        return Verified(event_id)

    def interpret(self, body: bytes) -> Parsed:
        try:
            event = parse_xml(body, "event")
        except NotAcme as exc:
            raise MalformedEvent(str(exc)) from None
        kind, order_id = event.get("type", ""), event.get("order", "")
        if not _TOKEN.fullmatch(order_id):
            raise MalformedEvent("an event without a valid order id")
        if kind == "order.accepted":
            return Parsed(VendorEvent(EventType.ACCEPTED, order_id), kind)
        if kind != "order.state":
            return Parsed(None, kind[:200])  # order.note and whatever Acme adds: nothing to apply
        ours = STATES.get(event.get("state", ""))
        if ours is None:
            raise MalformedEvent("an order state Acme does not document")
        if ours not in ("succeeded", "failed", "canceled"):
            return Parsed(None, f"{kind}:{ours}")  # not final: nothing to apply
        return Parsed(VendorEvent(EventType.COMPLETED, order_id, ours, self._result(event)), kind)

    def _result(self, element: ElementTree.Element) -> Any:
        """The ``<result>`` JSON, parsed within Liaison's outcome limits; None without one."""
        result = element.find("result")
        if result is None or not result.text:
            return None
        limits = self.context.outcome_limits
        if len(result.text) > limits.max_bytes:
            raise MalformedEvent("result past the outcome size limit")
        try:
            outcome = strict_loads(result.text.encode(), max_depth=limits.max_depth, what="result")
        except InvalidJson as exc:
            raise MalformedEvent(f"result: {exc}") from None
        if not isinstance(outcome, dict):
            raise MalformedEvent("result is not a JSON object")
        return outcome
