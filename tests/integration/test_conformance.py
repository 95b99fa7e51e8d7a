"""The real server against its own OpenAPI document: schemathesis (its CLI, as an operator would run
it) generates requests for every documented operation, valid and invalid, with a real client API key
and the admin token, and checks every answer: no 5xx, status, content type, headers and body as
documented, invalid input refused, valid input accepted (``positive_data_acceptance``: a request the
document allows is not refused as malformed, 400 or 422), auth not ignored. What a submission's
acceptance depends on besides its form (the providers, the client's origins, the clock) is filled
in by tests/integration/conformance_hooks.py.

Bounded: a few examples per operation, one schemathesis worker, a fixed seed (a failure
reproduces). Traffic goes only to the stack's loopback web server; the stack's own database (a fresh
SQLite file, a fresh PostgreSQL database), so replaying "every open dead letter" touches this
module's rows only. The client's callbacks may only go to the loopback callback recorder (its one
registered origin), so no generated callback_url is ever called.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from service.credentials import create_client
from tests.integration import services
from tests.integration.stack import Stack, build_stack
from tests.support.servers import ServerThread

pytestmark = pytest.mark.integration

MAX_EXAMPLES = 10
SEED = 9
#: gives a generated submission the provider, callback origin and clock only the server knows
HOOKS = Path(__file__).with_name("conformance_hooks.py")
CONFIG = """
[auth.openapi.ApiKey]
bearer = "${LIAISON_CONTRACT_API_KEY}"

[auth.openapi.AdminToken]
bearer = "${LIAISON_CONTRACT_ADMIN_TOKEN}"
"""


#: One stack keeps the run short; PostgreSQL, because it refuses more than SQLite does (NUL in
#: text, integers past 64 bits), so a 5xx hiding there shows.
@pytest.fixture(scope="module", params=[("postgres", "rabbitmq")], ids=lambda c: f"{c[0]}-{c[1]}")
def contract_stack(
    request: pytest.FixtureRequest, vendor: ServerThread, vendor_secret: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    db, broker = request.param
    broker_url = services.BROKERS[broker]
    services.require(broker_url, broker)
    tmp = tmp_path_factory.mktemp(f"contract-{db}-{broker}")
    database_name = None
    if db == "postgres":
        database_url, database_name = services.create_postgres_database()
    else:
        database_url = f"sqlite:///{tmp / 'liaison.db'}"
    # A submit rate that lets the run reach the success paths (429 itself is tests/integration/test_limits.py's).
    extra = {"LIAISON_CLIENT_SUBMIT_RATE_PER_S": "1000", "LIAISON_CLIENT_SUBMIT_BURST": "1000"}
    stack = build_stack(
        f"contract-{db}-{broker}",
        database_url=database_url,
        broker_url=broker_url,
        vendor_url=vendor.url,
        vendor_secret=vendor_secret,
        tmp=tmp,
        extra_env=extra,
    )
    try:
        yield stack
    finally:
        stack.close()
        if database_name:
            services.drop_postgres_database(database_name)


def _summary(output: str) -> str:
    """Schemathesis's closing line, e.g. ``==== No issues found in 12.34s ====``."""
    lines = [line.strip() for line in output.splitlines() if re.fullmatch(r"=+ .+ =+", line.strip())]
    return lines[-1] if lines else "(no summary line)"


def test_every_documented_operation_answers_as_documented(contract_stack: Stack, tmp_path: Path) -> None:
    stack = contract_stack
    origin = stack.callback_server.url
    with stack.db.transaction() as session:
        _, key, _ = create_client(session, stack.new_client_name(), f"{origin}/cb/contract", (origin,))
    api_key = key.api_key
    # Something to list and show: a finished task, and one the vendor refused (a dead letter; the
    # caller's fault, so no incident).
    done = stack.submit(api_key, {"correlation_id": "contract-ok", "input": {"sku": "A1"}})
    refused = stack.submit(api_key, {"correlation_id": "contract-refused", "input": {"simulate": {"reject": True}}})
    assert (done.status_code, refused.status_code) == (202, 202)
    stack.wait_for_task(api_key, "contract-ok")
    assert stack.wait_for_task(api_key, "contract-refused")["state"] == "failed"

    config = tmp_path / "schemathesis.toml"
    config.write_text(CONFIG)
    env = {
        **os.environ,
        "NO_COLOR": "1",
        "LIAISON_CONTRACT_API_KEY": api_key,
        "LIAISON_CONTRACT_ADMIN_TOKEN": stack.settings.admin_token,
        "LIAISON_CONTRACT_PROVIDER": sorted(stack.settings.providers)[0],
        "LIAISON_CONTRACT_CALLBACK_ORIGIN": origin,
        "SCHEMATHESIS_HOOKS": str(HOOKS),
    }
    document = requests.get(f"{stack.web.url}/api/v1/openapi.json", timeout=10).json()
    # The domain apps' API first: the admin API may then retire the client's key or disable it
    # (schemathesis finds its name in GET /admin/v1/clients), which would leave only 401s and 403s.
    for api in ("/api/v1/", "/admin/v1/"):
        result = _run(stack, config, env, tmp_path / api.strip("/").replace("/", "-"), api)
        summary = _summary(result.stdout)
        print(f"\nschemathesis [{stack.name}] {api}: {summary}")
        assert result.returncode == 0, result.stdout[-30000:] + result.stderr[-5000:]
        # Warnings (say, an operation that mostly answered 404 to made-up ids) are not failures.
        assert re.fullmatch(r"=+ (No issues found|\d+ warnings?) in [\d.]+s =+", summary), summary
        # Every documented operation of that API was exercised.
        count = sum(len(item) for path, item in document["paths"].items() if path.startswith(api))
        tested = re.search(r"API Operations:.*?Selected:\s*(\d+)/(\d+).*?Tested:\s*(\d+)", result.stdout, re.S)
        assert tested, result.stdout[-5000:]
        assert int(tested[1]) == int(tested[3]) == count, tested[0]


def _run(stack: Stack, config: Path, env: dict[str, str], reports: Path, api: str) -> subprocess.CompletedProcess[str]:
    command = [
        sys.executable,
        "-m",
        "schemathesis.cli",
        "--config-file",
        str(config),
        "run",
        f"{stack.web.url}/api/v1/openapi.json",
        "--url",
        stack.web.url,
        "--include-path-regex",
        f"^{api}",
        "--checks",
        "all",
        "--max-examples",
        str(MAX_EXAMPLES),
        "--seed",
        str(SEED),
        "--workers",
        "1",
        "--request-timeout",
        "20",
        "--suppress-health-check",
        "all",
        "--report",
        "junit",
        "--report-dir",
        str(reports),
    ]
    # cwd: schemathesis keeps a cache folder in its working directory; not in the repository.
    result = subprocess.run(
        command, env=env, capture_output=True, text=True, timeout=600, check=False, cwd=reports.parent
    )
    reports.mkdir(parents=True, exist_ok=True)
    (reports / "output.txt").write_text(result.stdout + result.stderr)
    return result
