"""/admin/status in a real headless Chromium: no figures without a token, live figures with one, no
console errors.

Needs the Debian packages ``chromium`` and ``chromium-driver`` (scripts/install.sh installs them as
root; .ci/run requires them). The remote is a dedicated SeaweedFS that the test pauses so that
written bytes stay dirty long enough to be seen on the page.
"""

from __future__ import annotations

import os
import shutil
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.gateway import ADMIN_TOKEN, GatewayProcess
from tests.support.seaweed import SeaweedServer

CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def remote() -> Iterator[SeaweedServer]:
    with SeaweedServer() as server:
        yield server


@pytest.fixture(scope="module")
def gw(remote: SeaweedServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    env = {"FERRY_DESTAGE_BACKOFF_BASE": "1", "FERRY_DESTAGE_BACKOFF_CAP": "1", "FERRY_REMOTE_READ_TIMEOUT": "2",
           "FERRY_REMOTE_CONNECT_TIMEOUT": "2"}
    with GatewayProcess(remote, tmp_path_factory.mktemp("status"), env=env) as g:
        yield g


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    if CHROMIUM is None or not os.path.exists(CHROMEDRIVER):
        message = "chromium and chromium-driver are not installed (apt-get install -y chromium chromium-driver)"
        if os.environ.get("FERRY_REQUIRE_SERVICES", "") not in ("", "0", "false", "no"):
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1280,1600", f"--user-data-dir={tmp_path / 'chromium'}"):
        options.add_argument(arg)  # the profile under tmp_path: Chromium left one in /tmp per run
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def console_errors(driver: Any) -> list[dict[str, Any]]:
    return [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]


def figure(driver: Any, element_id: str) -> str:
    return str(driver.find_element("id", element_id).get_attribute("data-value") or "")


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_without_a_token_the_page_shows_no_data(gw: GatewayProcess, browser: Any) -> None:
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(f"{gw.endpoint}/admin/stats", timeout=10)
    assert info.value.code == 401
    browser.get(f"{gw.endpoint}/admin/status")
    assert browser.title == "Ferry status"
    assert browser.find_element("id", "login").is_displayed()
    assert not browser.find_element("id", "dashboard").is_displayed()
    assert figure(browser, "requests-total") == "0"
    time.sleep(2.5)  # a poll interval: nothing may be fetched without a token
    assert figure(browser, "updated") == "0"
    assert console_errors(browser) == []


def test_a_wrong_token_is_refused_and_the_form_comes_back(gw: GatewayProcess, browser: Any) -> None:
    browser.get(f"{gw.endpoint}/admin/status?token=not-the-token")
    wait_for(lambda: browser.find_element("id", "login").is_displayed(), "the login form")
    assert "not accepted" in browser.find_element("id", "problem").text
    assert "token=" not in browser.current_url
    assert browser.execute_script("return sessionStorage.getItem('ferryAdminToken')") is None


def test_live_figures_follow_a_workload(gw: GatewayProcess, remote: SeaweedServer, browser: Any) -> None:
    bucket = f"st-{uuid.uuid4().hex[:12]}"
    s3 = gw.client()
    s3.create_bucket(Bucket=bucket)

    browser.get(f"{gw.endpoint}/admin/status?token={ADMIN_TOKEN}")
    assert "token=" not in browser.current_url, "the token must not stay in the address bar"
    wait_for(lambda: float(figure(browser, "updated") or 0) > 0, "the first poll")
    assert browser.find_element("id", "dashboard").is_displayed()
    start = float(figure(browser, "requests-total"))

    # Reads: an object only the remote has, read twice (a miss, then a hit).
    body = os.urandom(200_000)
    remote.client().put_object(Bucket=bucket, Key="cold", Body=body)
    for _ in range(2):
        assert s3.get_object(Bucket=bucket, Key="cold")["Body"].read() == body
    for i in range(5):
        s3.put_object(Bucket=bucket, Key=f"w/{i}", Body=b"x" * 1000)
    wait_for(lambda: float(figure(browser, "requests-total")) >= start + 7, "the request count to move")
    wait_for(lambda: float(figure(browser, "cache-reads")) >= 2, "cache reads on the page")
    wait_for(lambda: figure(browser, "hit-ratio-total") != "", "a hit ratio")
    assert 0 < float(figure(browser, "hit-ratio-total")) <= 1
    wait_for(lambda: len(browser.find_elements("css selector", "#tenants tbody tr[data-tenant]")) >= 1,
             "cache usage per tenant")
    assert float(figure(browser, "bytes-out")) >= 2 * len(body)
    # The sizing chart: the curve of those two reads around the budget, the budget marked.
    wait_for(lambda: bool(browser.find_elements("css selector", "#chart-sizing polyline")), "the sizing curve")
    assert len(browser.find_elements("css selector", "#chart-sizing circle")) == 7
    assert browser.find_elements("css selector", "#chart-sizing line[stroke-dasharray]")  # the budget
    assert "measured 50.0 %" in browser.find_element("id", "sizing-caption").text

    # Writes held by a paused remote: dirty bytes and lag show, then drain after the flush.
    remote.pause()
    try:
        s3.put_object(Bucket=bucket, Key="held", Body=os.urandom(300_000))
        wait_for(lambda: float(figure(browser, "dirty-bytes")) >= 300_000, "dirty bytes on the page")
        wait_for(lambda: float(figure(browser, "destage-lag")) > 0, "destage lag on the page")
        assert "KiB" in browser.find_element("id", "dirty-bytes").text
    finally:
        remote.resume()
    assert gw.flush(bucket)["durable"]
    wait_for(lambda: float(figure(browser, "dirty-bytes")) == 0, "dirty bytes back to zero")
    assert float(figure(browser, "destage-lag")) == 0
    # The charts drew lines from the ring of samples.
    assert browser.find_elements("css selector", "#chart-dirty polyline")
    assert browser.find_elements("css selector", "#chart-rate polyline")

    # The token stays for the tab: a reload without it still shows the figures.
    browser.get(f"{gw.endpoint}/admin/status")
    wait_for(lambda: float(figure(browser, "updated") or 0) > 0, "a poll after reload")
    assert console_errors(browser) == []
