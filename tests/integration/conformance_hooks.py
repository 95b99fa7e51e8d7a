"""Schemathesis hooks for tests/integration/test_conformance.py (loaded from this file through
``SCHEMATHESIS_HOOKS``): a generated task submission is given what only the server can know, so
that ``positive_data_acceptance`` holds the rest of the body to the document.

The OpenAPI document states every rule of a submission's form (tests/unit/test_openapi_limits.py);
three rules depend on the server's state instead, and no schema can state them:

- the configured providers (``provider`` must name one);
- the client's callback origins and the outbound guard (``callback_url`` must lie within the one
  registered origin, the loopback callback recorder, and nothing else may be called);
- the clock (a deadline must be in the future, and the acceptance deadline not after the
  execution deadline, whichever of a timeout or a time gives each).

So a submission that names a provider, a callback URL or a deadline names the configured provider,
a URL on the recorder (its generated path kept) and deadlines from now. Every other field goes as
generated; cases generated to break the document (negative ones) and every other operation are
left as they are.
"""

from __future__ import annotations

import os
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import schemathesis

SUBMIT = "POST /api/v1/tasks"


@schemathesis.hook
def before_call(context: Any, case: Any, **kwargs: Any) -> None:
    if case.operation.label != SUBMIT or not isinstance(case.body, dict):
        return
    if case.meta is None or not case.meta.generation.mode.is_positive:
        return  # a case made to break a rule keeps what it broke
    body: dict[str, Any] = case.body
    if "provider" in body:
        body["provider"] = os.environ["LIAISON_CONTRACT_PROVIDER"]
    if isinstance(body.get("callback_url"), str):
        # Not urlsplit: the document's form takes a bracketed host that is no address, which it refuses.
        path = re.sub(r"^[^:]*://[^/?#]*", "", body["callback_url"]).split("?")[0].split("#")[0] or "/"
        body["callback_url"] = os.environ["LIAISON_CONTRACT_CALLBACK_ORIGIN"] + (path if path.startswith("/") else "/")
    _deadlines_from_now(body, datetime.now(UTC))


def _deadlines_from_now(body: dict[str, Any], now: datetime) -> None:
    """A day ahead for an acceptance deadline, two for an execution deadline; then, when both are
    given and the acceptance would come later, the acceptance given the execution's own value."""
    ahead = {"acceptance": timedelta(days=1), "execution": timedelta(days=2)}
    when: dict[str, datetime] = {}
    for name, delta in ahead.items():
        if f"{name}_deadline" in body:
            body[f"{name}_deadline"] = (now + delta).isoformat()
            when[name] = now + delta
        elif isinstance(body.get(f"{name}_timeout_s"), (int, float)):  # 60 or 60.0, as the document allows
            when[name] = now + timedelta(seconds=body[f"{name}_timeout_s"])
    if len(when) == 2 and when["acceptance"] > when["execution"]:
        for form in ("timeout_s", "deadline"):
            body.pop(f"acceptance_{form}", None)
            if f"execution_{form}" in body:
                body[f"acceptance_{form}"] = body[f"execution_{form}"]
