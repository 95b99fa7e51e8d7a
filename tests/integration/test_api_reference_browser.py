"""The API reference in a real browser (headless Chromium, Selenium): ``/api/v1/docs`` served over
HTTP by the app itself renders every documented operation with its example request (the ``curl``
of its request samples), and the browser fetched nothing but from this server (Redoc's script, its
start, the document). A screenshot is kept under var/test-artifacts/api-reference/ (path printed).

No stack is needed: the page and the document touch no database or broker."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app import create_app
from app.api.openapi import document
from foundation.settings import Settings
from tests.integration import browser
from tests.support.servers import ServerThread

pytestmark = pytest.mark.integration

#: every operation's section, by operationId, as the text Redoc shows for it (its samples included)
SECTIONS = """
const out = {};
for (const el of document.querySelectorAll('[data-section-id]')) {
  const m = el.getAttribute('data-section-id').match(/operation\\/([^/]+)$/);
  if (m) out[m[1]] = el.innerText;
}
return out;
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    browser.require_chromium()
    tmp = tmp_path_factory.mktemp("api-reference")
    env = {
        "DATABASE_URL": f"sqlite:///{tmp / 'liaison.db'}",
        "CELERY_BROKER_URL": "redis://127.0.0.1:1/0",
        "LIAISON_VAR_DIR": str(tmp),
    }
    web = ServerThread(create_app(Settings.from_env(env))).start()
    yield web
    web.stop()


def operations() -> dict[str, tuple[str, str]]:
    return {op["operationId"]: (m, p) for p, item in document()["paths"].items() for m, op in item.items()}


def test_the_reference_shows_each_operation_with_its_example_request(server: ServerThread) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    expected = operations()
    with browser.chromium() as driver:
        driver.get(f"{server.url}/api/v1/docs")
        found: dict[str, str] = {}

        def rendered(d: Any) -> bool:
            found.update(d.execute_script(SECTIONS))
            return expected.keys() <= found.keys()

        WebDriverWait(driver, 60, poll_frequency=0.5).until(rendered)
        folder = browser.ARTIFACTS.parent / "api-reference"
        folder.mkdir(parents=True, exist_ok=True)
        shot = folder / "docs.png"
        driver.save_screenshot(str(shot))
        print(f"\nscreenshot: {shot}")
        fetched = driver.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
        title = driver.title

    for operation_id, (method, route) in expected.items():
        text = found[operation_id]
        assert f"curl -X {method.upper()} 'http://localhost:5000/" in text, (operation_id, text[-400:])
        assert route.split("{")[0].rstrip("/") in text, operation_id
    assert "/api/v1/openapi.json" in " ".join(fetched)
    assert all(url.startswith((server.url + "/", "blob:", "data:")) for url in fetched), fetched
    assert title == f"Liaison API {document()['info']['version']}"
    assert Path(shot).stat().st_size > 10_000
