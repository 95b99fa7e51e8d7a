"""The operator console in a real browser (headless Chromium, Selenium) against the real stack:
web over HTTP, a real worker, the simulator as the vendor. One stack (PostgreSQL + RabbitMQ): the
pages are the same on every combination, and the test-client tests (tests/middle/test_console.py)
cover the rest on SQLite.

The flow of issue 11: sign in; find a task retrying because the simulator is down; watch it
dead-letter; bring the simulator up; replay its dead letter; watch the task succeed on its page;
attach an orphan; resolve an incident; a HEAD of an action's address does nothing; sign out, and
the cookie copied before it is refused. A screenshot of each page is kept under
var/test-artifacts/console/ (the path is printed)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.integration import browser, services
from tests.integration.stack import Stack, build_stack
from tests.integration.webhook_client import post_event
from tests.support.servers import ServerThread

#: Submissions retry for a few seconds before they are dead-lettered: long enough for the browser to
#: find the task while it is retrying.
SLOW_RETRIES = {
    "LIAISON_PROVIDER_SIM_SUBMIT_MAX_ATTEMPTS": "3",
    "LIAISON_PROVIDER_SIM_SUBMIT_BACKOFF_BASE_S": "4",
    "LIAISON_PROVIDER_SIM_SUBMIT_BACKOFF_CAP_S": "5",
    "LIAISON_FLOWER_URL": "http://127.0.0.1:5555",
}


@pytest.fixture(scope="module")
def console_stack(
    vendor: ServerThread, vendor_secret: str, postgres_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    browser.require_chromium()
    services.require(services.RABBITMQ_URL, "rabbitmq")
    built = build_stack(
        "postgres-rabbitmq",
        database_url=postgres_url,
        broker_url=services.RABBITMQ_URL,
        vendor_url=vendor.url,
        vendor_secret=vendor_secret,
        tmp=tmp_path_factory.mktemp("console"),
        extra_env=SLOW_RETRIES,
    )
    yield built
    built.close()


def replaced(old: Any) -> bool:
    """Whether the page that held ``old`` is gone. Chromium answers a node of the page being left in
    two ways: stale (the usual), or, in the middle of the navigation, "does not belong to the
    document" (an "unknown error", which ``expected_conditions.staleness_of`` lets through). Both
    say the document was replaced; any other error is the browser still busy, asked again."""
    from selenium.common.exceptions import StaleElementReferenceException, WebDriverException

    try:
        old.is_enabled()
    except StaleElementReferenceException:
        return True
    except WebDriverException as error:
        return "does not belong to the document" in str(error)
    return False


class Pages:
    """The browser, with the few moves the flow repeats, and a screenshot of each page it shows."""

    def __init__(self, driver: Any, base: str, folder: Path) -> None:
        self.driver, self.base, self.folder, self.shots = driver, base, folder, 0

    def open(self, path: str) -> None:
        self.driver.get(self.base + path)

    def find(self, css: str, timeout: float = 15) -> Any:
        """The element, waited for: a click that submits a form returns before the next page has
        loaded when the machine is busy."""
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support import expected_conditions
        from selenium.webdriver.support.wait import WebDriverWait

        wait = WebDriverWait(self.driver, timeout)
        return wait.until(expected_conditions.presence_of_element_located((By.CSS_SELECTOR, css)))

    def follow(self, element: Any, timeout: float = 15) -> None:
        """Click a link or a form's button and wait until the next page replaced this one (a page
        may carry the same ids as the one before it: an orphan's, an incident's)."""
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support.wait import WebDriverWait

        old = self.driver.find_element(By.TAG_NAME, "html")
        element.click()
        WebDriverWait(self.driver, timeout).until(lambda _: replaced(old))

    def text(self, css: str = "main") -> str:
        """The element's text; read again when the page refreshed under it (pages of unfinished
        tasks and the overview refresh themselves)."""
        from selenium.common.exceptions import StaleElementReferenceException

        for _ in range(5):
            try:
                return self.find(css).text
            except StaleElementReferenceException:
                time.sleep(0.2)
        return self.find(css).text

    def shot(self, name: str) -> Path:
        self.shots += 1
        path = self.folder / f"{self.shots:02d}-{name}.png"
        self.driver.save_screenshot(str(path))
        return path

    def until(self, check: Callable[[], bool], what: str, timeout: float = 30, reload: bool = True) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            if time.monotonic() > deadline:
                self.shot("timeout")
                raise AssertionError(f"{what}: not within {timeout}s")
            time.sleep(0.5)
            if reload:
                self.driver.refresh()


def test_on_call_flow_in_a_real_browser(console_stack: Stack, vendor_secret: str) -> None:
    stack = console_stack
    folder = browser.ARTIFACTS
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.png"):
        old.unlink()
    print(f"\nconsole screenshots: {folder}")
    api_key, _, _ = stack.new_client()
    client_name = stack.client_name(api_key)
    run = uuid.uuid4().hex[:6]

    # Some finished work for the chart: successes, and one the vendor rejects (a caller's failure:
    # a dead letter with the vendor's answer, and no incident).
    for i in range(4):
        assert stack.submit(api_key, {"correlation_id": f"ok-{run}-{i}", "input": {"n": i}}).status_code == 202
    rejected = f"rejected-{run}"
    assert (
        stack.submit(api_key, {"correlation_id": rejected, "input": {"simulate": {"reject": True}}}).status_code == 202
    )
    for i in range(4):
        stack.wait_for_task(api_key, f"ok-{run}-{i}")
    stack.wait_for_task(api_key, rejected)

    with browser.chromium() as driver:
        pages = Pages(driver, stack.web.url, folder)

        # Sign in.
        pages.open("/console/")
        assert "/console/sign-in" in driver.current_url
        pages.shot("sign-in")
        pages.find("#operator-name").send_keys("alice")
        pages.find("#token").send_keys(stack.settings.admin_token)
        pages.follow(pages.find("#sign-in"))
        assert pages.text("#operator") == "alice"

        # The vendor goes down; a task starts retrying.
        assert stack.vendor("POST", "/_sim/config", json={"down": True}).status_code == 200
        try:
            flow = f"flow-{run}"
            assert stack.submit(api_key, {"correlation_id": flow, "input": {"order": 42}}).status_code == 202
            for i in range(2):  # more work in flight beside it
                stack.submit(api_key, {"correlation_id": f"also-{run}-{i}", "input": {"n": i}})
            pages.open("/console/")
            pages.until(lambda: int(pages.text("#retrying-total")) >= 1, "a task retrying on the overview")
            pages.shot("overview-work-in-flight")

            pages.open("/console/tasks?retrying=1")
            pages.until(lambda: flow in pages.text("#tasks"), "the task in the retrying list")
            pages.shot("tasks-retrying")
            from selenium.webdriver.common.by import By

            pages.follow(driver.find_element(By.LINK_TEXT, flow))
            assert pages.text("#correlation") == flow
            pages.until(lambda: "submit.attempt_failed" in pages.text("#timeline"), "a failed attempt on the timeline")
            assert "retrying" in pages.text(".state-line") and "503" in pages.text("#last-error")
            pages.shot("task-retrying")

            # Its retries run out: dead-lettered, the task failed.
            pages.until(lambda: pages.text("#task-state") == "failed", "the task dead-lettered", timeout=40)
            assert "submit.dead_lettered" in pages.text("#timeline")
            pages.shot("task-dead-lettered")
        finally:
            stack.vendor("POST", "/_sim/config", json={})  # the vendor is back
        task_page = driver.current_url

        # Its incident (the system's fault: the vendor was down) links to the task; resolve it, with a note.
        pages.open("/console/incidents?kind=submit_failed")
        row = driver.find_element(
            By.XPATH, f"//table[@id='incidents']//tr[td/a[@class='task-link' and text()='{flow}']]"
        )
        pages.follow(row.find_element(By.CSS_SELECTOR, "a.incident-link"))
        pages.find("#resolve-note").send_keys("the vendor is back")
        pages.follow(pages.find("#resolve"))
        assert pages.text("#incident-state") == "resolved" and "the vendor is back" in pages.text("#detail")
        assert "resolved" in pages.text(".history") and "alice" in pages.text(".history")
        pages.shot("incident-resolved")
        driver.get(task_page)

        # Replay its dead letter from its page; watch it succeed there.
        pages.follow(pages.find("#replay-task"))
        assert "Replay the open dead letters" in pages.text("#question")
        pages.shot("confirm-replay")
        pages.follow(pages.find("#confirm"))
        assert "replayed" in pages.text("#notice")
        pages.until(lambda: pages.text("#task-state") == "succeeded", "the replayed task succeeding")
        timeline = pages.text("#timeline")
        assert "submit.replayed" in timeline and "by alice" in timeline and "state.succeeded" in timeline
        pages.shot("task-succeeded")

        # An event for a job no task knows: attach it to a task the vendor has not answered for yet.
        waiting, _ = stack.unpublished_task(api_key, {"correlation_id": f"waiting-{run}", "input": {}})
        job_id = f"job_{uuid.uuid4().hex}"
        assert post_event(stack.web.url, vendor_secret, {"type": "job.accepted", "job_id": job_id}).status_code == 200
        pages.open("/console/orphans")
        pages.follow(driver.find_element(By.XPATH, f"//tr[td/code[text()='{job_id}']]//a[@class='orphan-link']"))
        pages.shot("orphan")
        pages.find("#attach-correlation-id").send_keys(waiting)
        pages.follow(pages.find("#attach"))
        assert pages.text("#orphan-state") == "resolved"
        assert "attached" in pages.text(".history") and "alice" in pages.text(".history")
        pages.shot("orphan-attached")
        pages.open(f"/console/tasks?correlation_id={waiting}")
        pages.follow(driver.find_element(By.LINK_TEXT, waiting))
        assert pages.text("#task-state") == "accepted" and "orphan.attached" in pages.text("#timeline")
        waiting_page = driver.current_url

        # The rejected task's dead letter: the vendor's answer shown, its replay only a quiet link
        # behind a warning (the vendor would refuse it again), and no incident opened for it.
        pages.open("/console/dead-letters?fault=caller")
        rejected_row = f"//table[@id='dead-letters']//tr[td/a[@class='task-link' and text()='{rejected}']]"
        # the session's database holds other tests' caller-fault letters too: page on until it shows
        while not driver.find_elements(By.XPATH, rejected_row):
            pages.follow(driver.find_element(By.PARTIAL_LINK_TEXT, "Next page"))
        row = driver.find_element(By.XPATH, rejected_row)
        assert "simulated permanent rejection" in row.text and "replay anyway" in row.text
        pages.follow(row.find_element(By.XPATH, "./td[1]/a"))
        assert "simulated permanent rejection (reject)" in pages.text("#answer-text")
        assert not driver.find_elements(By.ID, "replay")
        assert "fix the cause first" in pages.text("#caller-fault").lower()
        pages.shot("dead-letter-caller")
        pages.follow(pages.find("#replay-anyway"))
        assert "the caller's fault" in pages.text("#caution") and "Job rejected" in pages.text("#caution")
        pages.open("/console/incidents?state=all")
        assert rejected not in pages.text("#incidents")

        # The overview says whether beat and the workers run.
        pages.open("/console/")
        assert "last finished a message" in pages.text("#worker-liveness")
        assert "beat" in pages.text("#beat-liveness")

        # The remaining pages, for the record.
        for path, name in [
            ("/console/", "overview-after"),
            ("/console/dead-letters?state=all", "dead-letters"),
            ("/console/endpoints", "endpoints"),
            (f"/console/tasks?client={client_name}", "tasks-of-client"),
            ("/console/clients", "clients"),
        ]:
            pages.open(path)
            assert "Internal Server Error" not in pages.text()
            pages.shot(name)

        # A HEAD of an action's address, signed in but without the form's token, does nothing (Flask
        # answers HEAD on every GET route: only a POST acts).
        session_cookie = driver.get_cookie("liaison_console")
        assert session_cookie is not None
        head = requests.head(
            waiting_page + "/cancel", cookies={"liaison_console": session_cookie["value"]}, allow_redirects=False
        )
        assert head.status_code == 200, head.status_code  # the confirmation page's head, nothing done
        driver.get(waiting_page)
        assert pages.text("#task-state") == "accepted" and "operator.cancel" not in pages.text("#timeline")

        # Sign out: the cookie copied before it is refused after it (the session ended on the server).
        pages.follow(pages.find("#sign-out"))
        assert "Signed out" in pages.text("#notice")
        driver.delete_cookie("liaison_console")
        driver.add_cookie({"name": "liaison_console", "value": session_cookie["value"], "path": "/console"})
        pages.open("/console/")
        assert "/console/sign-in" in driver.current_url
        replayed = requests.get(
            waiting_page, cookies={"liaison_console": session_cookie["value"]}, allow_redirects=False
        )
        assert replayed.status_code == 302 and "/console/sign-in" in replayed.headers["Location"]
    assert len(list(folder.glob("*.png"))) >= 12
