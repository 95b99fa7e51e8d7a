"""A whole Liaison on real services, in one test process: web over HTTP, a real Celery worker
(``celery.contrib.testing``), the simulator as the vendor, and a pretend domain app."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import requests
from celery import Celery
from celery.contrib.testing.worker import start_worker
from celery.worker import state as worker_state
from flask import Flask
from sqlalchemy.orm import Session

from app import create_app
from app.cli import alembic_config
from core.states import TERMINAL
from foundation.settings import Settings
from models.client import ApiKey, hash_api_key
from service.credentials import authenticate, create_client
from tests.support.servers import CallbackRecorder, ServerThread
from webhooks.signing import generate_secret

if TYPE_CHECKING:
    from models.db import Database
    from runtime.context import Liaison

#: One per test session, shared by every app liaison_env configures (gunicorn ones included).
METRICS_TOKEN = "test-metrics-token-" + uuid.uuid4().hex
#: What a scraper or probe of ``/metrics`` and ``/readyz`` sends.
METRICS_AUTH = {"Authorization": f"Bearer {METRICS_TOKEN}"}


def liaison_env(
    *, database_url: str, broker_url: str, vendor_url: str, vendor_secret: str, public_url: str
) -> dict[str, str]:
    """Settings for tests: short retry policies so failures play out in seconds."""
    return {
        "DATABASE_URL": database_url,
        "CELERY_BROKER_URL": broker_url,
        "LIAISON_PUBLIC_URL": public_url,
        "LIAISON_PROVIDERS": "sim",
        "LIAISON_PROVIDER_SIM_BASE_URL": vendor_url,
        "LIAISON_PROVIDER_SIM_WEBHOOK_SECRETS": f"{generate_secret()},{vendor_secret}",
        "LIAISON_PROVIDER_SIM_READ_TIMEOUT_S": "2",
        "LIAISON_PROVIDER_SIM_SUBMIT_MAX_ATTEMPTS": "6",  # more than Celery's default max_retries of 3
        "LIAISON_PROVIDER_SIM_SUBMIT_BACKOFF_BASE_S": "0.2",
        "LIAISON_PROVIDER_SIM_SUBMIT_BACKOFF_CAP_S": "2",  # Retry-After: 2 is within it
        "LIAISON_RELAY_SCHEDULE_S": "0.2,0.4,0.8",
        "LIAISON_RELAY_MAX_ATTEMPTS": "4",
        "LIAISON_RELAY_TIMEOUT_S": "3",
        "LIAISON_ADMIN_TOKEN": "test-admin-token-" + uuid.uuid4().hex,
        "LIAISON_LOG_LEVEL": "warning",
        "LIAISON_METRICS_TOKEN": METRICS_TOKEN,
        # Tests read gauges right after changing what they count; test_limits.py tests the cache.
        "LIAISON_METRICS_CACHE_S": "0",
    }


def migrate(database_url: str, database_pooler: str | None = None) -> None:
    """Brings one of the tests' fresh databases to the migrations' head: a copy of a migrated
    template where it can be (tests/integration/services.py says why), else alembic's upgrade."""
    from alembic import command

    from tests.integration import services

    if database_pooler is None and services.clone_migrated(database_url):
        return
    command.upgrade(alembic_config(database_url, database_pooler), "head")


@dataclass
class Stack:
    name: str
    app: Flask
    web: ServerThread
    vendor_url: str
    callbacks: CallbackRecorder
    callback_server: ServerThread
    queue: str
    _exit: ExitStack = field(default_factory=ExitStack)
    #: a free loopback port LIAISON_OUTBOUND_ALLOW lists too, for a test's own domain app (the demo's)
    spare_port: int = 0
    #: the environment the stack's settings were read from (for a process of the test's own)
    env: dict[str, str] = field(default_factory=dict)

    @property
    def settings(self) -> Settings:
        return self.app.extensions["liaison"].settings

    @property
    def db(self) -> Database:
        return self.app.extensions["liaison"].db

    @property
    def celery(self) -> Celery:
        return self.app.extensions["celery"]

    def new_client(self, path: str | None = None) -> tuple[str, str, str]:
        """(api key, callback secret, callback path) of a fresh client."""
        path = path or f"/cb/{uuid.uuid4().hex[:8]}"
        with self.db.transaction() as session:
            _, key, secret = create_client(session, self.new_client_name(), self.callback_server.url + path)
        return key.api_key, secret, path

    @staticmethod
    def new_client_name() -> str:
        return f"client-{uuid.uuid4().hex[:8]}"

    def client_name(self, api_key: str) -> str:
        """The name of the client owning a live ``api_key``."""
        with self.db.transaction() as session:
            client = authenticate(session, api_key)
            assert client is not None, "no live key"
            return client.name

    @property
    def ctx(self) -> Liaison:
        return self.app.extensions["liaison"]

    def unpublished_task(self, api_key: str, body: dict[str, Any]) -> tuple[str, int]:
        """A task whose submit message never reached the broker (a crash right after commit):
        (correlation id, submit outbox id)."""
        from app.api.validation import parse_submit
        from models.base import utcnow
        from service import intake

        now = utcnow()
        # A plain session on the engine, not one of the app's sessionmaker: the outbox hook
        # (models.publishing) would publish the row at commit, and this row must stay unpublished.
        with Session(self.db.engine, expire_on_commit=False) as session, session.begin():
            client = authenticate(session, api_key)
            assert client is not None, "no live key"
            req = parse_submit(
                body,
                providers=self.settings.providers,
                default_provider="sim",
                client_callback_url=client.callback_url,
                now=now,
                client_callback_origins=client.callback_origins,
                outbound_allow=self.settings.outbound_allow,
            )
            result = intake.submit_task(session, client, req, None, now)
            return result.task.correlation_id, result.outbox[0].id

    def reference(self, correlation_id: str, api_key: str | None = None) -> str:
        """The task's vendor reference (what the simulator knows it by: reference and Idempotency-Key).
        Tests name their tasks uniquely, so the client is needed only where two share a name."""
        from sqlalchemy import select

        from models.task import ExternalTask

        query = select(ExternalTask.reference).where(ExternalTask.correlation_id == correlation_id)
        if api_key is not None:
            query = query.join(ApiKey, ApiKey.client_id == ExternalTask.client_id).where(
                ApiKey.key_hash == hash_api_key(api_key)
            )
        with self.db.transaction() as session:
            return session.scalars(query).one()

    def submit(
        self,
        api_key: str,
        body: dict[str, Any],
        key: str | None = None,
        url: str | None = None,
        traceparent: str | None = None,
    ) -> requests.Response:
        headers = {"Authorization": f"Bearer {api_key}"}
        if key:
            headers["Idempotency-Key"] = key
        if traceparent:
            headers["traceparent"] = traceparent
        return requests.post(f"{url or self.web.url}/api/v1/tasks", json=body, headers=headers, timeout=10)

    def get(self, api_key: str, correlation_id: str) -> dict[str, Any]:
        response = requests.get(
            f"{self.web.url}/api/v1/tasks/{correlation_id}", headers={"Authorization": f"Bearer {api_key}"}, timeout=10
        )
        response.raise_for_status()
        return response.json()

    def wait_for_task(
        self,
        api_key: str,
        correlation_id: str,
        until: Callable[[dict[str, Any]], bool] | None = None,
        timeout: float = 20,
    ) -> dict[str, Any]:
        until = until or (lambda body: body["state"] in TERMINAL)
        deadline = time.monotonic() + timeout
        while True:
            body = self.get(api_key, correlation_id)
            if until(body):
                return body
            if time.monotonic() > deadline:
                raise AssertionError(f"task {correlation_id} did not get there in {timeout}s: {body}")
            time.sleep(0.1)

    def internal(self, path: str, base_url: str | None = None, **kwargs: Any) -> requests.Response:
        """GET an internal surface (``/metrics``, ``/readyz``) with the metrics token."""
        headers = {**METRICS_AUTH, **kwargs.pop("headers", {})}
        return requests.get(
            f"{base_url or self.web.url}{path}", headers=headers, timeout=kwargs.pop("timeout", 10), **kwargs
        )

    def admin(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        headers = {"Authorization": f"Bearer {self.settings.admin_token}"}
        return requests.request(method, f"{self.web.url}/admin/v1{path}", headers=headers, timeout=10, **kwargs)

    def vendor(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        return requests.request(method, self.vendor_url + path, timeout=10, **kwargs)

    def close(self) -> None:
        self._exit.close()


def build_stack(
    name: str,
    *,
    database_url: str,
    broker_url: str,
    vendor_url: str,
    vendor_secret: str,
    tmp: Path,
    extra_env: dict[str, str] | None = None,
    relay_in_process: bool = True,
    calls_in_process: bool = True,
) -> Stack:
    """``relay_in_process=False`` (``calls_in_process=False``): the in-process worker does not
    consume the relay (calls) queue, and the test runs that queue's worker itself, the Procfile's
    line (``tests/integration/procfile_worker.py``)."""
    exit_stack = ExitStack()
    callbacks = CallbackRecorder()
    callback_server = exit_stack.enter_context(ServerThread(callbacks))
    from tests.integration.services import free_port

    port = free_port()
    env = liaison_env(
        database_url=database_url,
        broker_url=broker_url,
        vendor_url=vendor_url,
        vendor_secret=vendor_secret,
        public_url=f"http://127.0.0.1:{port}",
    )
    env["LIAISON_VAR_DIR"] = str(tmp)
    # The outbound guard refuses loopback: let exactly the pretend domain app's port through, one
    # spare port (a test's own domain app, e.g. the demo's), and whatever a test lists in
    # extra_env's LIAISON_OUTBOUND_ALLOW besides.
    extra = dict(extra_env or {})
    spare_port = free_port()
    allow = [
        callback_server.url.removeprefix("http://"),
        f"127.0.0.1:{spare_port}",
        extra.pop("LIAISON_OUTBOUND_ALLOW", ""),
    ]
    env["LIAISON_OUTBOUND_ALLOW"] = ",".join(a for a in allow if a)
    env.update(extra)
    queue = f"liaison-test-{uuid.uuid4().hex[:8]}"
    migrate(database_url, env.get("LIAISON_DATABASE_POOLER"))
    env["LIAISON_QUEUE"] = queue
    app = create_app(Settings.from_env(env))
    exit_stack.callback(app.extensions["liaison"].db.dispose)
    web = exit_stack.enter_context(ServerThread(app, port=port))
    celery = app.extensions["celery"]
    exit_stack.callback(delete_queues, celery, app.extensions["liaison"].settings)
    # One worker consumes the work, calls and relay queues (production runs one process for each).
    settings = app.extensions["liaison"].settings
    relay_queue = [settings.relay_queue] if relay_in_process else []
    relay_queue += [settings.calls_queue] if calls_in_process else []
    exit_stack.enter_context(
        running_worker(
            celery,
            pool="threads",
            concurrency=4,
            perform_ping_check=False,
            loglevel="WARNING",
            shutdown_timeout=30,
            queues=[queue, *relay_queue],
        )
    )
    return Stack(name, app, web, vendor_url, callbacks, callback_server, queue, exit_stack, spare_port, env)


@contextmanager
def running_worker(celery: Celery, **options: Any) -> Iterator[Any]:
    """``celery.contrib.testing.worker.start_worker``, stopped at once. Its exit asks the worker to
    stop and waits; the worker's event loop sees that only when its poll returns, which on RabbitMQ
    is the next timer, up to about 10 s later (most of a RabbitMQ module's teardown). A no-op
    callback on the loop wakes it now."""
    with start_worker(celery, **options) as worker:
        try:
            yield worker
        finally:
            worker_state.should_terminate = 0
            if worker.hub is not None:
                worker.hub.call_soon(lambda: None)


def delete_queues(celery: Any, settings: Settings) -> None:
    """Delete the work, calls and relay queues and the dead-letter queue. Each is declared first, as
    the worker declares it: kombu's Redis transport deletes only the bindings its channel knows of."""
    from app.celery_app import dead_letter_queue, work_queues

    with celery.connection_for_write() as conn:
        channel = conn.default_channel
        for queue in [*work_queues(settings), dead_letter_queue(settings.queue, settings.rabbitmq_queue_type)]:
            queue.bind(channel).declare()
            channel.queue_delete(queue.name)
