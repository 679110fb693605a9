"""Headless Chromium for the page tests: Debian's `chromium` and `chromium-driver`, driven by Selenium.

    with chromium_driver(width=1400) as driver:     # a fresh profile; no browser is downloaded
        open_page(driver, path)                     # file://; waits until the page's script is done
        requests(driver)                            # every URL the browser fetched since open_page

`missing()` says what is not installed (None when all is), so the tests can skip with that reason,
or fail under CI=1 (.ci/run installs both packages and Selenium). The binaries are
$BASE_BENCH_CHROMIUM / $BASE_BENCH_CHROMEDRIVER, else /usr/bin/chromium and /usr/bin/chromedriver
(or what PATH finds). Selenium is given both paths, so its own manager never looks for a driver
online. The flags keep the browser off the network: no background requests, no component or sync
updates, no QUIC.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

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
)


def _binary(env: str, name: str) -> str | None:
    given = os.environ.get(env)
    if given:
        return given if Path(given).is_file() else None
    default = Path("/usr/bin") / name
    return str(default) if default.is_file() else shutil.which(name)


def chromium() -> str | None:
    return _binary("BASE_BENCH_CHROMIUM", "chromium")


def chromedriver() -> str | None:
    return _binary("BASE_BENCH_CHROMEDRIVER", "chromedriver")


def missing() -> str | None:
    lacking = [
        what
        for what, ok in (
            ("chromium (apt-get install chromium)", chromium()),
            ("chromedriver (apt-get install chromium-driver)", chromedriver()),
            ("selenium (pip install selenium)", importlib.util.find_spec("selenium")),
        )
        if not ok
    ]
    return "; ".join(lacking) or None


@contextmanager
def chromium_driver(width: int = 1400, height: int = 1000):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium()
    for flag in FLAGS:
        opts.add_argument(flag)
    opts.add_argument(f"--window-size={width},{height}")
    profile = tempfile.mkdtemp(prefix="bb-chromium-")
    opts.add_argument(f"--user-data-dir={profile}")
    opts.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})
    driver = webdriver.Chrome(service=Service(chromedriver()), options=opts)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def open_page(driver, path: Path, ready: bool = True, timeout: float = 60.0) -> str:
    """Open `path` from disk; with `ready`, wait until the page's script has set body[data-ready]."""
    driver.get_log("performance")  # drop what the browser fetched before (its own start page)
    url = Path(path).resolve().as_uri()
    driver.get(url)
    if ready:
        wait_for(driver, lambda: driver.execute_script("return document.body.dataset.ready") == "1", timeout)
    return url


def wait_for(driver, condition, timeout: float = 20.0):
    """Poll `condition()` until it is truthy (returns it) or `timeout` s pass (AssertionError)."""
    end = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError("the page did not get there in time")
        time.sleep(0.05)


BROWSER_PAGES = ("chrome://", "chrome-untrusted://", "devtools://")  # the browser's own start page and UI


def requests(driver) -> list[str]:
    """The URLs of every request sent since the last call (Network.requestWillBeSent and WebSocket
    creation, from the performance log), but those of the browser's own pages: its start tab loads
    chrome:// resources for a while after launch, whatever the test opens."""
    out = []
    for entry in driver.get_log("performance"):
        msg = json.loads(entry["message"])["message"]
        if msg["method"] == "Network.requestWillBeSent":
            if not str(msg["params"].get("documentURL", "")).startswith(BROWSER_PAGES):
                out.append(msg["params"]["request"]["url"])
        elif msg["method"] == "Network.webSocketCreated":
            out.append(msg["params"]["url"])
    return out
