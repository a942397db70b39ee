"""Headless chromium for the dashboard tests (and scripts/dashboard_screenshots.py), kept off the network.

Debian's chromium + chromium-driver (``make setup`` installs both); selenium is told both paths, so its
driver manager never runs (it would reach for the network). Every host name resolves to nothing except
127.0.0.1, and the background services that phone home are off. ``browser()`` quits the driver in
``finally`` and then kills what is left of the chromedriver process tree.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.support.ui import WebDriverWait

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
FLAGS = (
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
    "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
    "--disable-background-networking", "--disable-component-update", "--no-first-run", "--disable-sync",
    "--disable-extensions", "--disable-default-apps", "--no-default-browser-check", "--mute-audio",
    "--window-size=1400,1000", "--hide-scrollbars",
)


def available() -> str | None:
    """Why the browser cannot run here, or None."""
    for path in (CHROMIUM, CHROMEDRIVER):
        if not (path.exists() or shutil.which(path.name)):
            return f"{path} is missing; run `make setup` (it installs Debian's chromium and chromium-driver)"
    return None


@contextlib.contextmanager
def browser(width: int = 1400, height: int = 1000) -> Iterator[webdriver.Chrome]:
    opts = Options()
    opts.binary_location = str(CHROMIUM if CHROMIUM.exists() else shutil.which("chromium"))
    for flag in FLAGS:
        opts.add_argument(flag)
    opts.add_argument(f"--window-size={width},{height}")
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver_path = CHROMEDRIVER if CHROMEDRIVER.exists() else shutil.which("chromedriver")
    service = Service(executable_path=str(driver_path))
    driver = webdriver.Chrome(service=service, options=opts)
    pid = service.process.pid if service.process else None
    try:
        yield driver
    finally:
        with contextlib.suppress(Exception):
            driver.quit()
        if pid is not None:  # chromedriver and the chromium it started, if quit() left any
            _kill_tree(pid)


def _kill_tree(pid: int) -> None:
    children: list[int] = []
    with contextlib.suppress(OSError):
        children = [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    for child in children:
        _kill_tree(child)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)


def console_errors(driver: webdriver.Chrome) -> list[dict[str, Any]]:
    """Console messages of level SEVERE (errors, failed loads, CSP violations) since the last call."""
    return [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]


def wait_for(driver: webdriver.Chrome, css: str, timeout: float = 10.0) -> Any:
    """The first element matching ``css`` once it exists."""
    from selenium.webdriver.common.by import By

    return WebDriverWait(driver, timeout).until(lambda d: d.find_element(By.CSS_SELECTOR, css))


def text_of(driver: webdriver.Chrome, css: str) -> str:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.CSS_SELECTOR, css).text


__all__ = ["FLAGS", "available", "browser", "console_errors", "text_of", "wait_for"]
