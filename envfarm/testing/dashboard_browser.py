"""Headless chromium for the dashboard tests (and scripts/dashboard_screenshots.py), kept off the network.

Debian's chromium + chromium-driver (``make setup`` installs both); selenium is told both paths, so its
driver manager never runs (it would reach for the network). Every host name resolves to nothing except
127.0.0.1, and the background services that phone home are off. ``browser()`` quits the driver in
``finally``, waits for chromedriver's process tree to exit and kills what is left of it.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import time
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
    _subreaper(True)  # chromium's helpers outlive chromedriver: they become ours to reap, not init's zombies
    driver = None
    try:
        driver = webdriver.Chrome(service=service, options=opts)
        yield driver
    finally:
        tree = _descendants(os.getpid(), CHROME_NAMES)
        if driver is not None:
            with contextlib.suppress(Exception):
                driver.quit()
        deadline = time.monotonic() + 5
        while any(_state(p) not in ("", "Z") for p in tree) and time.monotonic() < deadline:
            time.sleep(0.05)
        for p in tree + _descendants(os.getpid(), CHROME_NAMES):  # whatever quit() left behind
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(p, signal.SIGKILL)
        _reap(deadline=time.monotonic() + 5)
        _subreaper(False)


CHROME_NAMES = ("chromedriver", "chromium", "chrome", "chrome_crashpad")


def _subreaper(on: bool) -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(36, int(on), 0, 0, 0)  # PR_SET_CHILD_SUBREAPER


def _stat(pid: int) -> tuple[str, str, int] | None:
    """(comm, state, ppid) of ``pid`` from /proc, or None."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    comm = text[text.index("(") + 1:text.rindex(")")]
    state, ppid = text[text.rindex(")") + 2:].split()[:2]
    return comm, state, int(ppid)


def _state(pid: int) -> str:
    st = _stat(pid)
    return st[1] if st else ""


def _descendants(root: int, names: tuple[str, ...]) -> list[int]:
    """Processes below ``root`` whose name starts with one of ``names`` (their subtrees included)."""
    parent: dict[int, int] = {}
    comm: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (st := _stat(int(entry.name))) is not None:
            comm[int(entry.name)], parent[int(entry.name)] = st[0], st[2]
    out, frontier = [], [p for p, pp in parent.items() if pp == root and comm[p].startswith(names)]
    while frontier:
        pid = frontier.pop()
        out.append(pid)
        frontier += [p for p, pp in parent.items() if pp == pid]
    return out


def _reap(deadline: float) -> None:
    """Wait for the browser processes that are now our children (chromedriver and the orphans we adopted)."""
    while time.monotonic() < deadline:
        mine = _descendants(os.getpid(), CHROME_NAMES)
        if not mine:
            return
        for pid in mine:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
        time.sleep(0.05)


def console_errors(driver: webdriver.Chrome) -> list[dict[str, Any]]:
    """Console messages of level SEVERE (errors, failed loads, CSP violations) since the last call."""
    entries: list[dict[str, Any]] = driver.get_log("browser")  # type: ignore[no-untyped-call]
    return [e for e in entries if e.get("level") == "SEVERE"]


def wait_for(driver: webdriver.Chrome, css: str, timeout: float = 10.0) -> Any:
    """The first element matching ``css`` once it exists."""
    from selenium.webdriver.common.by import By

    return WebDriverWait(driver, timeout).until(lambda d: d.find_element(By.CSS_SELECTOR, css))


def text_of(driver: webdriver.Chrome, css: str) -> str:
    """The rendered text of the first element matching ``css`` ("" when none), read in one script call so
    a re-render between finding and reading cannot make it stale."""
    script = "const e = document.querySelector(arguments[0]); return e ? e.innerText : '';"
    return str(driver.execute_script(script, css)).strip()


__all__ = ["FLAGS", "available", "browser", "console_errors", "text_of", "wait_for"]
