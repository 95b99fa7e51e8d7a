"""Headless Chromium for the console's browser tests: Debian's ``chromium`` and ``chromium-driver``,
installed by ``bin/setup-browser`` (which ``bin/test`` runs). When they are missing the tests skip
with the reason, or fail under CI (``CI`` set), like a service that is down (tests/integration/services.py).

Chromium starts with a fresh profile and without its background networking (update checks,
component downloads, sync, QUIC): a test browser talks to loopback only."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from selenium.webdriver.remote.webdriver import WebDriver

CHROMIUM = os.environ.get("LIAISON_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("LIAISON_TEST_CHROMEDRIVER", "/usr/bin/chromedriver")
ROOT = Path(__file__).resolve().parents[2]
#: where screenshots are kept (var/ is git-ignored); CI may collect the folder as artifacts
ARTIFACTS = Path(os.environ.get("LIAISON_TEST_ARTIFACTS", ROOT / "var" / "test-artifacts")) / "console"
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1280,2000",  # tall: a screenshot shows a whole page
)


def require_chromium() -> None:
    missing = [path for path in (CHROMIUM, CHROMEDRIVER) if not os.access(path, os.X_OK)]
    if not missing:
        return
    message = f"headless Chromium is not installed ({', '.join(missing)} missing): run bin/setup-browser"
    if os.environ.get("CI"):
        pytest.fail(message + " (CI runs bin/test, which installs it)")
    pytest.skip(message)


@contextmanager
def chromium() -> Iterator[WebDriver]:
    """A Selenium WebDriver on headless Chromium with a throwaway profile."""
    require_chromium()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    os.environ.setdefault("SE_OFFLINE", "true")  # Selenium Manager must not look for drivers online
    profile = tempfile.mkdtemp(prefix="liaison-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
