"""Notifications on real services: a real SMTP server (aiosmtpd) and a loopback chat webhook receive
what a real worker sends, once per notice, through two beats at once, a burst and a mail server
that says "later"."""

from __future__ import annotations

import email
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from email.message import Message
from typing import Any, cast

import pytest
from aiosmtpd.controller import Controller
from sqlalchemy import select

from core.notifications import DigestRule
from models.attention import Incident
from models.base import utcnow
from service.incidents import IncidentKind, open_incident
from service.notices import Routes, dispatch
from tests.integration import services
from tests.integration.conftest import PAIRS, _stack
from tests.integration.stack import Stack
from tests.support.servers import CallbackRecorder, ServerThread

WINDOW_S = 1  # a burst is gathered for a second before its digest goes
CHAT_PATH = "/services/T000/B000/chat"


@dataclass
class MailSink:
    """aiosmtpd's handler: keeps every message it accepts; ``later`` answers 451 to that many DATA
    commands first (a mail server that is busy)."""

    received: list[Message] = field(default_factory=list)
    later: int = 0
    refused: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        with self.lock:
            if self.later:
                self.later -= 1
                self.refused += 1
                return "451 4.3.0 try again later"
            self.received.append(email.message_from_bytes(envelope.content))
        return "250 OK"

    def subjects(self, containing: str = "") -> list[str]:
        with self.lock:
            return [str(m["Subject"]) for m in self.received if containing in str(m["Subject"])]

    def bodies(self, containing: str) -> list[Message]:
        with self.lock:
            # single-part mails: decode=True gives the body's bytes
            return [m for m in self.received if containing in cast(bytes, m.get_payload(decode=True)).decode()]

    def wait_for(self, predicate: Callable[[list[str]], bool], containing: str, timeout: float = 20) -> list[str]:
        deadline = time.monotonic() + timeout
        while not predicate(self.subjects(containing)):
            if time.monotonic() > deadline:
                raise AssertionError(f"mail for {containing!r} did not arrive: {self.subjects()}")
            time.sleep(0.05)
        return self.subjects(containing)


@pytest.fixture(scope="module")
def smtp() -> Iterator[tuple[MailSink, int]]:
    sink = MailSink()
    port = services.free_port()
    controller = Controller(sink, hostname="127.0.0.1", port=port)
    controller.start()
    yield sink, port
    controller.stop()


@pytest.fixture(scope="module")
def chat() -> Iterator[tuple[CallbackRecorder, ServerThread]]:
    recorder = CallbackRecorder(default_status=200)
    with ServerThread(recorder) as server:
        yield recorder, server


@pytest.fixture(scope="module", params=PAIRS, ids=lambda c: f"{c[0]}-{c[1]}")
def notify_stack(
    request: pytest.FixtureRequest,
    vendor: ServerThread,
    vendor_secret: str,
    tmp_path_factory: pytest.TempPathFactory,
    smtp: tuple[MailSink, int],
    chat: tuple[CallbackRecorder, ServerThread],
) -> Iterator[Stack]:
    extra = {
        "LIAISON_NOTIFY_EMAIL_KINDS": "*",
        "LIAISON_SMTP_HOST": "127.0.0.1",
        "LIAISON_SMTP_PORT": str(smtp[1]),
        "LIAISON_SMTP_SECURITY": "none",
        "LIAISON_NOTIFY_EMAIL_FROM": "liaison@test.invalid",
        "LIAISON_NOTIFY_EMAIL_TO": "oncall@test.invalid,second@test.invalid",
        "LIAISON_NOTIFY_CHAT_KINDS": "submit_failed,unknown_job",
        "LIAISON_NOTIFY_CHAT_URL": chat[1].url + CHAT_PATH,
        "LIAISON_OUTBOUND_ALLOW": chat[1].url.removeprefix("http://"),
        "LIAISON_NOTIFY_BACKOFF_BASE_S": "0.2",
        "LIAISON_NOTIFY_BACKOFF_CAP_S": "1",
        "LIAISON_NOTIFY_DIGEST_THRESHOLD": "3",
        "LIAISON_NOTIFY_DIGEST_WINDOW_S": str(WINDOW_S),
    }
    for stack in _stack(request, vendor, vendor_secret, tmp_path_factory, extra_env=extra):
        # The PostgreSQL database is the session's: notices other modules' incidents left pending
        # would make this module's first message a burst. Settle them unsent (no channel).
        with stack.db.transaction() as session:
            dispatch(session, utcnow(), Routes(), DigestRule())
        yield stack


def beats(stack: Stack, n: int = 2) -> None:
    """``n`` dispatch runs at once, as ``n`` beats would start them: half through the broker to the
    real worker, half in this process, all released together."""
    settings = stack.settings
    routes = Routes(email=settings.notify_email_kinds, chat=settings.notify_chat_kinds)
    rule = DigestRule(settings.notify_digest_threshold, settings.notify_digest_window_s)
    start = threading.Barrier(n - n // 2)

    def in_process() -> None:
        start.wait(timeout=10)
        with stack.db.transaction() as session:
            dispatch(session, utcnow(), routes, rule)

    threads = [threading.Thread(target=in_process) for _ in range(n - n // 2)]
    for thread in threads:
        thread.start()
    for _ in range(n // 2):
        stack.celery.send_task("liaison.dispatch_notifications")
    for thread in threads:
        thread.join(timeout=30)


def _open(stack: Stack, kind: str, subjects: list[str]) -> None:
    """Open the incidents at one instant: a burst falls inside one digest window by construction,
    however long the machine takes to write it."""
    now = utcnow()
    with stack.db.transaction() as session:
        for subject in subjects:
            open_incident(session, kind, subject, f"detail of {subject}", now)


def test_a_failed_task_mails_once_posts_to_chat_and_mails_its_resolution(
    notify_stack: Stack, smtp: tuple[MailSink, int], chat: tuple[CallbackRecorder, ServerThread]
) -> None:
    sink, recorder = smtp[0], chat[0]
    api_key, _, _ = notify_stack.new_client()
    cid = f"notify-{uuid.uuid4().hex[:8]}"
    # the vendor answers 503 past the retry budget: the system's fault, so a submit_failed incident
    # opens (a caller's refusal, such as {"reject": true}, opens none)
    body = {"correlation_id": cid, "input": {"simulate": {"transient_failures": 100}}}
    assert notify_stack.submit(api_key, body).status_code == 202
    assert notify_stack.wait_for_task(api_key, cid)["outcome"]["fault"] == "system"
    beats(notify_stack)
    (subject,) = sink.wait_for(lambda s: len(s) == 1, containing=cid)
    assert subject.startswith("[Liaison] incident: submit_failed")
    posts = recorder.wait_for(lambda rs: any(cid in r.body.decode() for r in rs), timeout=20)
    (post,) = [r for r in posts if cid in r.body.decode()]
    assert post.path == CHAT_PATH and post.json()["text"] == subject
    with sink.lock:
        (mail,) = [m for m in sink.received if cid in str(m["Subject"])]
    assert mail["To"] == "oncall@test.invalid, second@test.invalid" and mail["Message-ID"].endswith("@liaison.notify>")

    with notify_stack.db.transaction() as session:
        incident_id = session.scalars(select(Incident.id).where(Incident.correlation_id == cid)).one()
    resolved = notify_stack.admin("POST", f"/incidents/{incident_id}/resolve", json={"note": "vendor fixed"})
    assert resolved.status_code == 200
    beats(notify_stack)
    subjects = sink.wait_for(lambda s: len(s) == 2, containing=cid)
    assert sorted(s.split(":")[0] for s in subjects) == ["[Liaison] incident", "[Liaison] resolved"]
    print(f"\n{notify_stack.name}: the SMTP server received", *subjects, sep="\n  ")
    time.sleep(1)  # a late duplicate would have arrived by now
    assert len(sink.subjects(cid)) == 2


def test_two_beats_at_once_send_each_notice_once(notify_stack: Stack, smtp: tuple[MailSink, int]) -> None:
    sink = smtp[0]
    tag = uuid.uuid4().hex[:8]
    time.sleep(WINDOW_S)  # the earlier tests' messages are out of the window
    _open(notify_stack, IncidentKind.DEADLINE_EXCEEDED, [f"task:{tag}-1", f"task:{tag}-2"])
    beats(notify_stack, n=4)
    sink.wait_for(lambda s: len(s) == 2, containing=tag)
    beats(notify_stack, n=2)
    time.sleep(1.5)
    assert len(sink.subjects(tag)) == 2


def test_a_burst_is_one_digest_per_channel(
    notify_stack: Stack, smtp: tuple[MailSink, int], chat: tuple[CallbackRecorder, ServerThread]
) -> None:
    sink, recorder = smtp[0], chat[0]
    tag = uuid.uuid4().hex[:8]
    _open(notify_stack, IncidentKind.UNKNOWN_JOB, [f"job:{tag}-{i}" for i in range(60)])
    beats(notify_stack)  # a burst: held
    time.sleep(WINDOW_S + 0.2)
    beats(notify_stack)
    deadline = time.monotonic() + 20
    while not (mails := sink.bodies(f"job:{tag}-0")) and time.monotonic() < deadline:
        time.sleep(0.05)
    (mail,) = mails
    assert str(mail["Subject"]) == "[Liaison] 60 notices: unknown_job"
    digest = cast(bytes, mail.get_payload(decode=True)).decode()
    assert "… and 10 more" in digest
    print(f"\n{notify_stack.name}: one digest: {mail['Subject']}", *digest.splitlines()[:4], sep="\n  ")
    posts = recorder.wait_for(lambda rs: any(f"job:{tag}-0" in r.body.decode() for r in rs), timeout=20)
    (post,) = [r for r in posts if f"job:{tag}-0" in r.body.decode()]
    assert post.json()["text"] == "[Liaison] 60 notices: unknown_job"
    time.sleep(0.5)
    assert len(sink.bodies(tag)) == 1  # none went alone, none twice


def test_a_mail_server_that_says_later_gets_the_message_on_a_retry(
    notify_stack: Stack, smtp: tuple[MailSink, int]
) -> None:
    sink = smtp[0]
    tag = uuid.uuid4().hex[:8]
    time.sleep(WINDOW_S)
    with sink.lock:
        sink.later, refused_before = 2, sink.refused
    _open(notify_stack, IncidentKind.RELAY_FAILED, [f"outbox:{tag}"])
    beats(notify_stack)
    sink.wait_for(lambda s: len(s) == 1, containing=tag)
    assert sink.refused == refused_before + 2


def test_an_operator_mutes_a_kind_over_the_api_and_the_cli(notify_stack: Stack, smtp: tuple[MailSink, int]) -> None:
    sink = smtp[0]
    kind = IncidentKind.ORPHAN_UNBOUND
    assert (
        notify_stack.admin("PUT", f"/notification-mutes/{kind}", json={"by": "alice", "note": "noisy"}).status_code
        == 201
    )
    again = notify_stack.admin("PUT", f"/notification-mutes/{kind}", json={"by": "bob"})
    assert again.status_code == 200 and again.json()["muted_by"] == "alice"
    assert notify_stack.admin("PUT", "/notification-mutes/no_such_kind", json={"by": "alice"}).status_code == 422
    assert notify_stack.admin("PUT", f"/notification-mutes/{kind}", json={}).status_code == 422
    assert [m["kind"] for m in notify_stack.admin("GET", "/notification-mutes").json()["items"]] == [kind]

    tag = uuid.uuid4().hex[:8]
    _open(notify_stack, kind, [f"orphan:{tag}-muted"])
    beats(notify_stack)
    cli = notify_stack.app.test_cli_runner()
    assert f"{kind} unmuted" in cli.invoke(args=["liaison", "notifications", "unmute", kind]).output
    assert "nothing is muted" in cli.invoke(args=["liaison", "notifications", "mutes"]).output
    assert notify_stack.admin("DELETE", f"/notification-mutes/{kind}").status_code == 404
    _open(notify_stack, kind, [f"orphan:{tag}-heard"])
    time.sleep(WINDOW_S)
    beats(notify_stack)
    sink.wait_for(lambda s: len(s) == 1, containing=f"orphan:{tag}-heard")
    assert sink.subjects(f"orphan:{tag}-muted") == []
    muted = cli.invoke(args=["liaison", "notifications", "mute", kind, "--by", "carol"])
    assert muted.exit_code == 0 and f"{kind} muted" in muted.output
    assert notify_stack.admin("DELETE", f"/notification-mutes/{kind}").status_code == 204
