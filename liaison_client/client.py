"""``LiaisonClient``: submit, get, list and cancel tasks, and page a task's timeline, over Liaison's HTTP API.

One ``requests.Session`` per client (connections are reused); thread-safe as far as ``requests``
is, which is fine for one client per thread or a process-wide one used from a few threads.
Every error is a :class:`~liaison_client.errors.LiaisonError`; every answer is a dataclass.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any, Literal, Self
from urllib.parse import quote

import requests

from liaison_client.errors import TransportError, UnexpectedResponse, problem_from
from liaison_client.models import Page, Task, TaskState, TimelineEntry, TimelinePage

__version__ = "0.1.0"
USER_AGENT = f"liaison-client/{__version__}"
#: (connect, read) seconds: a submit is one short database transaction on Liaison's side.
DEFAULT_TIMEOUT: tuple[float, float] = (5.0, 30.0)


def _when(value: datetime | str) -> str:
    """A deadline as the API takes it. A naive datetime has no offset and Liaison refuses it (422)."""
    return value.isoformat() if isinstance(value, datetime) else value


class LiaisonClient:
    """A domain app's handle on one Liaison, authenticated by its API key.

    >>> client = LiaisonClient("https://liaison.example", api_key)        # doctest: +SKIP
    >>> task = client.submit({"sku": "A1"}, correlation_id="order-42", idempotency_key="order-42")
    >>> client.get("order-42").state
    'accepted'
    """

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float | tuple[float, float] = DEFAULT_TIMEOUT,
        session: requests.Session | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self._session = session or requests.Session()
        self._headers = {"Authorization": f"Bearer {api_key}", "User-Agent": USER_AGENT, "Accept": "application/json"}

    def __repr__(self) -> str:  # never the key
        return f"LiaisonClient({self.base_url!r})"

    def close(self) -> None:
        self._session.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- the API -------------------------------------------------------------------------------

    def submit(
        self,
        input: Any,
        *,
        correlation_id: str | None = None,
        provider: str | None = None,
        callback_url: str | None = None,
        acceptance_timeout_s: int | None = None,
        acceptance_deadline: datetime | str | None = None,
        execution_timeout_s: int | None = None,
        execution_deadline: datetime | str | None = None,
        on_deadline: Literal["escalate", "cancel"] | None = None,
        heartbeat_timeout_s: int | None = None,
        priority: int | None = None,
        concurrency_key: str | None = None,
        idempotency_key: str | None = None,
    ) -> Task:
        """Hand Liaison a task (``POST /api/v1/tasks``); it is ``requested`` on return.

        ``input`` (an object or a string) goes to the vendor as is. Give ``correlation_id`` to name
        the task yourself (else Liaison makes a UUID); the same id again returns the existing task.
        ``idempotency_key`` makes a retry after a timeout safe: the same key and body return the
        same task, a different body is a :class:`~liaison_client.errors.Conflict`. Give a timeout
        in seconds or an aware deadline for acceptance and execution, not both; unset, the
        provider's defaults apply. ``heartbeat_timeout_s``: no vendor event for that long makes
        Liaison ask the vendor (and escalate if it does not answer). ``priority``: 1 (most urgent)
        to 5, ordering your own waiting tasks (default: your client's, 3). ``concurrency_key``: at
        most your client's limit (1) of tasks with that key are open at the vendor at once; a
        waiting task says why in ``Task.waiting``. Field problems raise
        :class:`~liaison_client.errors.ValidationFailed` listing each one.
        """
        body: dict[str, Any] = {"input": input}
        optional: dict[str, Any] = {
            "correlation_id": correlation_id,
            "provider": provider,
            "callback_url": callback_url,
            "acceptance_timeout_s": acceptance_timeout_s,
            "acceptance_deadline": _when(acceptance_deadline) if acceptance_deadline is not None else None,
            "execution_timeout_s": execution_timeout_s,
            "execution_deadline": _when(execution_deadline) if execution_deadline is not None else None,
            "on_deadline": on_deadline,
            "heartbeat_timeout_s": heartbeat_timeout_s,
            "priority": priority,
            "concurrency_key": concurrency_key,
        }
        body.update({k: v for k, v in optional.items() if v is not None})
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key is not None else {}
        return self._task(self._request("POST", "/api/v1/tasks", json=body, headers=headers))

    def get(self, correlation_id: str) -> Task:
        """The task with the start of its ``timeline`` (``GET /api/v1/tasks/<id>``): the oldest 200
        entries at most, and ``timeline_next_cursor`` when there are more. NotFound if it is not yours."""
        return self._task(self._request("GET", f"/api/v1/tasks/{quote(correlation_id, safe='')}"))

    def timeline(self, correlation_id: str, *, cursor: str | None = None, limit: int | None = None) -> TimelinePage:
        """One page of the task's timeline, oldest first (``limit`` 1 to 500, default 200), after
        ``cursor`` (a task's ``timeline_next_cursor`` or a page's ``next_cursor``; None: from the start)."""
        params: dict[str, str | int] = {}
        if cursor is not None:
            params["cursor"] = cursor
        if limit is not None:
            params["limit"] = limit
        path = f"/api/v1/tasks/{quote(correlation_id, safe='')}/timeline"
        data = self._request("GET", path, params=params)
        try:
            return TimelinePage.from_json(data)
        except (ValueError, TypeError) as exc:
            raise UnexpectedResponse(f"GET {path}: {exc}") from None

    def iter_timeline(self, correlation_id: str, page_size: int = 500) -> Iterator[TimelineEntry]:
        """Every entry of the task's timeline, oldest first, fetching pages as it goes."""
        cursor: str | None = None
        while True:
            page = self.timeline(correlation_id, cursor=cursor, limit=page_size)
            yield from page.entries
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def list(self, state: TaskState | None = None, limit: int = 50, cursor: str | None = None) -> Page:
        """One page of your tasks, newest first (``limit`` 1 to 200). Pass the page's
        ``next_cursor`` back as ``cursor`` for the next one, or use :meth:`iter_tasks`."""
        params: dict[str, str | int] = {"limit": limit}
        if state is not None:
            params["state"] = state
        if cursor is not None:
            params["cursor"] = cursor
        data = self._request("GET", "/api/v1/tasks", params=params)
        try:
            return Page.from_json(data)
        except (ValueError, TypeError) as exc:
            raise UnexpectedResponse(f"GET /api/v1/tasks: {exc}") from None

    def iter_tasks(self, state: TaskState | None = None, page_size: int = 100) -> Iterator[Task]:
        """Every task (in ``state``, if given), newest first, fetching pages as it goes."""
        cursor: str | None = None
        while True:
            page = self.list(state=state, limit=page_size, cursor=cursor)
            yield from page.tasks
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def cancel(self, correlation_id: str, reason: str | None = None, idempotency_key: str | None = None) -> Task:
        """Ask for cancellation. The task is ``cancel_requested`` (or already ``canceled``, if the
        vendor never saw it) and ends ``canceled`` once the vendor confirms. A final task raises
        :class:`~liaison_client.errors.Conflict` whose ``state`` says how it ended."""
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key is not None else {}
        path = f"/api/v1/tasks/{quote(correlation_id, safe='')}/cancel"
        json_body = {"reason": reason} if reason is not None else None
        return self._task(self._request("POST", path, json=json_body, headers=headers))

    # -- plumbing ------------------------------------------------------------------------------

    def _request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict[str, str | int] | None = None,
        headers: dict[str, str] | None = None,
    ) -> Any:
        """The answer's JSON, or the typed error for a 4xx/5xx or a failed connection."""
        try:
            response = self._session.request(
                method,
                self.base_url + path,
                json=json,
                params=params,
                headers={**self._headers, **(headers or {})},
                timeout=self.timeout,
            )
        except requests.RequestException as exc:
            raise TransportError(f"{method} {path}: {type(exc).__name__}: {exc}") from exc
        if response.status_code >= 400:
            try:
                body: Any = response.json()
            except ValueError:
                body = None
            raise problem_from(response.status_code, response.reason or "", body, response.headers.get("Retry-After"))
        try:
            return response.json()
        except ValueError:
            raise UnexpectedResponse(f"{method} {path}: HTTP {response.status_code} without a JSON body") from None

    @staticmethod
    def _task(data: Any) -> Task:
        try:
            return Task.from_json(data)
        except (ValueError, TypeError) as exc:
            raise UnexpectedResponse(f"not a task: {exc}") from None


__all__ = ["DEFAULT_TIMEOUT", "LiaisonClient"]
