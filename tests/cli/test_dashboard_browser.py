"""The dashboard in a real headless Chromium (Debian's ``chromium`` and ``chromium-driver``,
driven by Selenium): what it renders, a live update made by another process, the actions
refused without the token and accepted with it, and a session's timeline and transcript.

Skipped with a reason where Chromium is not installed; ``.ci/run`` installs it. With
``HERMES_STATE_SCREENSHOTS=DIR`` the tests save the screenshots of docs/dashboard.md into DIR.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hermes_state import SessionDB
from hermes_state.dashboard.app import session_path
from tests.conftest import SERIAL
from tests.support.processes import DashboardProcess, run_cli
from tests.support.stores import HandClock, put
from tests.support.vintages import REAL_SCHEMA30

# One headless Chromium at a time, waiting on live updates. Three pages run in the default run
# (rows and errors, live updates, the token); the others are in the full matrix.
pytestmark = SERIAL

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
TOKEN = "browser-t0ken"
HOSTILE = "<script>alert('x')</script>"
WAIT = 30.0

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
    pytest.skip(
        "chromium and chromium-driver are not installed (apt-get install chromium "
        "chromium-driver; .ci/run does)",
        allow_module_level=True,
    )

from selenium.common.exceptions import (  # noqa: E402
    NoAlertPresentException,
    NoSuchElementException,
    StaleElementReferenceException,
)
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support import expected_conditions  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    driver = launch(tmp_path)
    try:
        yield driver
    finally:
        driver.quit()


def launch(tmp_path: Path, *, javascript: bool = True) -> Any:
    options = webdriver.ChromeOptions()
    if not javascript:
        options.add_experimental_option(
            "prefs", {"profile.managed_default_content_settings.javascript": 2}
        )
    options.binary_location = CHROMIUM
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--window-size=1280,1000",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
    ):
        options.add_argument(flag)
    return webdriver.Chrome(options=options, service=webdriver.ChromeService(CHROMEDRIVER))


@pytest.fixture
def database(tmp_path: Path) -> Path:
    """A database with a row in every state, an expired lease, a failure and a hostile id."""
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        put(db, "waiting-1", "pending")
        put(db, "delivered-1", "completed", platform="discord")
        put(db, "failed-1", "failed", error="Telegram answered 403: bot was blocked by the user")
        put(db, HOSTILE, "failed", error="<b>not bold</b>")
        db.append_message(HOSTILE, "user", "please continue on telegram <img src=x>")
        db.append_message(HOSTILE, "assistant", "Sure: handing off now.")
    stale = HandClock(time.time() - 600)
    with SessionDB(path, owner="gateway-eu-1", lease_seconds=60, clock=stale) as dead:
        put(dead, "stuck-1", "running")
    with SessionDB(path, owner="gateway-us-2", lease_seconds=300) as live:
        put(live, "running-1", "running", platform="slack")
    return path


def wait_for(driver: Any, condition: Any, what: str) -> Any:
    # A live update replaces the list's element: one found just before is stale when read, so
    # the condition is asked again (the wait still fails if it never holds).
    return WebDriverWait(
        driver, WAIT, poll_frequency=0.05, ignored_exceptions=(StaleElementReferenceException,)
    ).until(condition, message=what)


def wait_live(driver: Any) -> None:
    wait_for(
        driver,
        lambda d: d.find_element(By.ID, "live").text == "live",
        "the page subscribed to /events",
    )


def screenshot(driver: Any, name: str) -> None:
    folder = os.environ.get("HERMES_STATE_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(Path(folder) / name))


def no_alert(driver: Any) -> bool:
    try:
        driver.switch_to.alert  # noqa: B018 (raises when there is none)
    except NoAlertPresentException:
        return True
    return False


def test_the_page_renders_rows_leases_and_errors(browser: Any, database: Path) -> None:
    with DashboardProcess(database, token=TOKEN) as dashboard:
        browser.get(dashboard.base + "/")
        wait_live(browser)
        counts = {
            element.get_attribute("data-state"): element.text
            for element in browser.find_elements(By.CSS_SELECTOR, ".card .count[data-state]")
        }
        assert counts == {"pending": "1", "running": "2", "completed": "1", "failed": "2"}
        listed = [row.text for row in browser.find_elements(By.CSS_SELECTOR, "#handoffs tbody tr")]
        assert len(listed) == 6
        assert any(HOSTILE in text for text in listed)  # shown as text, not run
        assert no_alert(browser)
        expired = browser.find_elements(By.CSS_SELECTOR, "#running tr.expired")
        assert [row.text.split()[0] for row in expired] == ["gateway-eu-1"]
        assert "expired" in expired[0].text
        failures = browser.find_element(By.ID, "failures").text
        assert "bot was blocked by the user" in failures
        assert "<b>not bold</b>" in failures
        screenshot(browser, "dashboard-overview.png")


def test_a_request_by_another_process_appears_live(browser: Any, database: Path) -> None:
    with SessionDB(database) as db:
        db.create_session("late-arrival", "cli")
    with DashboardProcess(database, token=TOKEN) as dashboard:
        browser.get(dashboard.base + "/")
        wait_live(browser)
        browser.execute_script("window.notReloaded = true;")
        assert "late-arrival" not in browser.find_element(By.ID, "handoffs").text
        done = run_cli(database, "handoff", "request", "late-arrival", "matrix")
        assert done.returncode == 0, done.stderr
        wait_for(
            browser,
            lambda d: "late-arrival" in d.find_element(By.ID, "handoffs").text,
            "the new request in the list",
        )
        assert browser.execute_script("return window.notReloaded === true;")
        counts = browser.find_element(By.CSS_SELECTOR, ".count[data-state=pending]").text
        assert counts == "2"


def click(browser: Any, selector: str) -> None:
    """Click the element; a live refresh may replace it between finding and clicking."""

    def clicked(driver: Any) -> bool:
        try:
            driver.find_element(By.CSS_SELECTOR, selector).click()
        except (StaleElementReferenceException, NoSuchElementException):
            return False
        return True

    wait_for(browser, clicked, f"a click on {selector}")


def click_action(browser: Any, session_id: str, action: str) -> None:
    url = session_path(session_id, f"/api/actions/{action}/")
    click(browser, f'button[data-url="{url}"]')


def answer_prompt(browser: Any, text: str) -> None:
    prompt = wait_for(browser, expected_conditions.alert_is_present(), "the token prompt")
    prompt.send_keys(text)
    prompt.accept()


def flash_text(browser: Any) -> str:
    return str(browser.find_element(By.ID, "flash").text)


def test_an_action_is_refused_without_the_token_and_accepted_with_it(
    browser: Any, database: Path
) -> None:
    with DashboardProcess(database, token=TOKEN) as dashboard:
        browser.get(dashboard.base + "/")
        wait_live(browser)
        click_action(browser, "waiting-1", "withdraw")
        answer_prompt(browser, "not-the-token")
        wait_for(browser, lambda d: "refused" in flash_text(d), "the refusal")
        assert "wrong dashboard token" in flash_text(browser)
        with SessionDB(database) as db:
            assert db.get_handoff_state("waiting-1")["state"] == "pending"
        click_action(browser, "waiting-1", "withdraw")
        answer_prompt(browser, TOKEN)
        wait_for(browser, lambda d: "withdraw: done" in flash_text(d), "the action's success")
        with SessionDB(database) as db:
            assert db.get_handoff_state("waiting-1")["state"] == "failed"
            assert db.handoff_history("waiting-1")[-1]["actor"] == "dashboard"
        # The token is remembered for the session of the tab: no second prompt.
        click(browser, "button[data-action=reclaim]")
        wait_for(browser, lambda d: "reclaimed 1" in flash_text(d), "the reclaim")
        wait_for(
            browser,
            lambda d: not d.find_elements(By.CSS_SELECTOR, "#running tr.expired"),
            "the expired lease gone from the page",
        )


@pytest.mark.full
def test_a_read_only_dashboard_offers_no_actions(browser: Any, database: Path) -> None:
    with DashboardProcess(database) as dashboard:
        browser.get(dashboard.base + "/")
        assert browser.find_element(By.CSS_SELECTOR, "header .readonly").text == "read-only"
        assert browser.find_elements(By.CSS_SELECTOR, "button.action") == []


@pytest.mark.full
def test_a_session_shows_its_timeline_and_transcript(browser: Any, database: Path) -> None:
    with DashboardProcess(database, token=TOKEN) as dashboard:
        browser.get(dashboard.base + "/")
        click(browser, f'a[href="{session_path(HOSTILE)}"]')
        wait_for(browser, lambda d: d.find_elements(By.ID, "timeline"), "the session page")
        assert no_alert(browser)
        assert browser.find_element(By.CSS_SELECTOR, "h1.session-id").text == HOSTILE
        moves = [li.text for li in browser.find_elements(By.CSS_SELECTOR, "#timeline li")]
        assert len(moves) == 3
        assert "pending" in moves[0]
        assert "failed" in moves[-1]
        assert "<b>not bold</b>" in moves[-1]
        transcript = browser.find_element(By.ID, "transcript").text
        assert "please continue on telegram <img src=x>" in transcript
        assert "handing off now" in transcript
        screenshot(browser, "dashboard-session.png")
        wait_live(browser)
        done = run_cli(database, "handoff", "retry", HOSTILE)
        assert done.returncode == 0, done.stderr
        wait_for(
            browser,
            lambda d: len(d.find_elements(By.CSS_SELECTOR, "#timeline li")) == 4,
            "the retry on the timeline",
        )


@pytest.mark.full
def test_without_javascript_the_pages_are_a_static_view(tmp_path: Path, database: Path) -> None:
    driver = launch(tmp_path, javascript=False)
    try:
        with DashboardProcess(database, token=TOKEN) as dashboard:
            driver.get(dashboard.base + "/?state=failed")
            assert driver.find_element(By.ID, "live").text == "static"
            assert "Actions need JavaScript" in driver.find_element(By.TAG_NAME, "body").text
            listed = driver.find_elements(By.CSS_SELECTOR, "#handoffs tbody tr")
            assert len(listed) == 2
            assert "bot was blocked by the user" in driver.find_element(By.ID, "handoffs").text
            # The filter form and the links work without a script.
            driver.find_element(By.CSS_SELECTOR, "form.filter input[name=q]").send_keys("failed")
            driver.find_element(By.CSS_SELECTOR, "form.filter button").click()
            wait_for(driver, lambda d: "q=failed" in d.current_url, "the filtered page")
            assert len(driver.find_elements(By.CSS_SELECTOR, "#handoffs tbody tr")) == 1
            driver.find_element(By.LINK_TEXT, "failed-1").click()
            wait_for(driver, lambda d: d.find_elements(By.ID, "timeline"), "the session page")
            assert "failed-1" in driver.find_element(By.CSS_SELECTOR, "h1.session-id").text
    finally:
        driver.quit()


@pytest.mark.full
def test_an_upstream_file_not_adopted_yet_shows_its_tool_calls(
    browser: Any, tmp_path: Path
) -> None:
    """The real upstream file, read-only through the lens: the transcript names each call's
    tool with its arguments and each result's tool; the file keeps every byte."""
    path = tmp_path / "upstream" / "state.db"
    path.parent.mkdir()
    shutil.copyfile(REAL_SCHEMA30, path)
    before = path.read_bytes()
    with DashboardProcess(path) as dashboard:
        browser.get(dashboard.base + session_path("20250402_090713_0345a8"))
        wait_for(browser, lambda d: d.find_elements(By.ID, "transcript"), "the session page")
        calls = browser.find_elements(By.CSS_SELECTOR, "#transcript .tool-call")
        assert calls[0].find_element(By.CSS_SELECTOR, ".tool-name").text == "read_file"
        arguments = calls[0].find_element(By.CSS_SELECTOR, ".tool-arguments").text
        assert arguments == '{"path": "tests/test_parser.py", "offset": 1, "limit": 200}'
        assert calls[1].find_element(By.CSS_SELECTOR, ".tool-arguments").text == (
            '{"path": "notes/今日.md", "content": "# 笔记\\n- 完成 ✅"}'
        )
        results = browser.find_elements(By.CSS_SELECTOR, "#transcript li.role-tool")
        assert results[0].find_element(By.CSS_SELECTOR, ".tool-name").text == (
            "read_file (call_cb5c3e1f46ce)"
        )
    assert path.read_bytes() == before
