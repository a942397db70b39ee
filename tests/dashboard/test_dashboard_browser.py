"""The dashboard in a real headless chromium (Debian's chromium + chromium-driver, selenium), off the network.

Every test ends by asserting the browser console holds no error (failed loads and CSP violations included).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

from envfarm.dashboard.sources import discover
from envfarm.testing.dashboard_browser import available, browser, console_errors, text_of, wait_for
from envfarm.testing.dashboard_runs import code_repair_run, farm_run, harness_run, serve_in_thread

pytestmark = pytest.mark.bwrap  # the live test runs a real farm on bwrap


@pytest.fixture(scope="module")
def driver() -> Iterator[Any]:
    missing = available()
    assert missing is None, missing
    with browser() as d:
        yield d


@pytest.fixture(scope="module")
def site(runs: Path) -> Iterator[str]:
    with serve_in_thread([runs]) as url:
        yield url


@pytest.fixture
def ids(runs: Path) -> dict[str, str]:
    return {s.path.name if s.kind != "harness" else "harness": s.id for s in discover([runs])}


@pytest.fixture(autouse=True)
def no_console_errors(driver: Any) -> Iterator[None]:
    console_errors(driver)  # drop what an earlier test left
    yield
    assert console_errors(driver) == []


def _open(driver: Any, url: str) -> None:
    driver.get(url)
    driver.refresh()  # a hash change alone keeps the old page; each test starts from a fresh load


def _rows(driver: Any, css: str) -> list[Any]:
    return driver.find_elements(By.CSS_SELECTOR, css)


def _until(driver: Any, check: Any, timeout: float = 10.0) -> Any:
    return WebDriverWait(driver, timeout, poll_frequency=0.1).until(lambda d: check())


def test_every_view_loads(driver: Any, site: str, ids: dict[str, str]) -> None:
    views = {
        "#/": ("#runs tbody tr", 4),
        f"#/farm/{ids['toolcalc']}": ("#farm-done", 1),
        f"#/farm/{ids['toolcalc']}/episodes": ("#episodes tbody tr", 12),
        f"#/farm/{ids['toolcalc']}/episodes/0": ("#transcript .msg", 5),
        f"#/farm/{ids['repair']}/episodes/1": ("#code-repair", 1),
        f"#/trainer/{ids['train']}": ("#publishes tbody tr", 20),
        f"#/harness/{ids['harness']}": ("#harness-instances tbody tr", 5),
        f"#/harness/{ids['harness']}/envfarm-tests__calc-3": ("#findings tbody tr", 1),
    }
    for route, (css, n) in views.items():
        _open(driver, site + route)
        _until(driver, lambda css=css, n=n: len(_rows(driver, css)) == n)
        assert console_errors(driver) == [], route
    assert text_of(driver, "header .brand").startswith("envfarm")
    assert len(_rows(driver, "#sources a")) == 4


def test_a_running_farms_counters_move(driver: Any, tmp_path: Path) -> None:
    run_dir = tmp_path / "live"
    episodes = 40
    work = farm_run(run_dir, episodes=episodes, concurrency=4, delay_s=0.2)
    farm = threading.Thread(target=asyncio.run, args=(work,), name="farm")
    farm.start()
    try:
        deadline = time.monotonic() + 30
        while not (run_dir / "run.json").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        with serve_in_thread([run_dir]) as url:
            (src,) = discover([run_dir])
            _open(driver, f"{url}#/farm/{src.id}")
            wait_for(driver, "#farm-done")
            seen_done, seen_active, seen_states = set(), set(), set()
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline:
                done = text_of(driver, "#farm-done")
                seen_done.add(done)
                seen_active.add(text_of(driver, "#farm-active"))
                seen_states.add(text_of(driver, ".title-row .badge"))
                if done == f"{episodes} / {episodes}" and "finished" in seen_states:
                    break
                time.sleep(0.25)
            assert f"{episodes} / {episodes}" in seen_done, seen_done
            assert len(seen_done) >= 4, f"the counter should move while the page is open: {seen_done}"
            assert seen_active - {"0"}, f"episodes should be seen in flight: {seen_active}"
            assert {"running", "finished"} <= seen_states, seen_states
            assert text_of(driver, "#conn") == "live"
            assert "leased" in text_of(driver, "#pool") and "start failures" in text_of(driver, "#pool")
            assert len(_rows(driver, 'figure[data-title^="in flight"] path.line')) == 3
            driver.get("about:blank")  # close the event stream before the server goes
    finally:
        farm.join(120)
    assert not farm.is_alive()


def test_a_trajectory_opens_and_shows_its_tool_calls(driver: Any, site: str, ids: dict[str, str]) -> None:
    _open(driver, f"{site}#/farm/{ids['toolcalc']}")
    wait_for(driver, "#open-trajectories").click()
    _until(driver, lambda: len(_rows(driver, "#episodes tbody tr")) == 12)
    Select(driver.find_element(By.NAME, "status")).select_by_value("infra_error")
    _until(driver, lambda: text_of(driver, "#episode-count").startswith("0 of 12"))
    Select(driver.find_element(By.NAME, "status")).select_by_value("completed")
    _until(driver, lambda: len(_rows(driver, "#episodes tbody tr")) == 12)
    _rows(driver, "#episodes tbody tr")[0].click()
    wait_for(driver, ".tool-call")
    calls = [e.text for e in _rows(driver, "#transcript .tool-call .tool-name")]
    assert calls[0] == "calc" and calls[-1] == "submit"
    assert len(_rows(driver, "#tool-calls tbody tr")) == len(calls)
    assert "Correct" in text_of(driver, "#tool-calls")
    assert driver.current_url.endswith("/episodes/11")
    driver.back()  # the list comes back with the filter that was set
    _until(driver, lambda: len(_rows(driver, "#episodes tbody tr")) == 12)
    assert Select(driver.find_element(By.NAME, "status")).first_selected_option.text == "completed"


def test_code_repair_episode_shows_diff_tests_and_log(driver: Any, site: str, ids: dict[str, str]) -> None:
    _open(driver, f"{site}#/farm/{ids['repair']}/episodes/1")
    wait_for(driver, "#code-repair")
    assert _rows(driver, "#diff .diff-add") and _rows(driver, "#diff .diff-del")
    tests = text_of(driver, "#tests")
    assert "tests/test_ops.py::test_div" in tests and "fail" in tests
    assert "FAIL_TO_PASS 1/2" in text_of(driver, "#code-repair")
    assert [e.get_attribute("data-tool") for e in _rows(driver, ".tool-call")] == [
        "bash", "str_replace", "run_tests", "submit"]
    _open(driver, f"{site}#/farm/{ids['repair']}/episodes/2")
    wait_for(driver, "#code-repair .findings")
    assert "conftest" in text_of(driver, "#code-repair .findings")


def test_training_view(driver: Any, site: str, ids: dict[str, str]) -> None:
    _open(driver, f"{site}#/trainer/{ids['train']}")
    wait_for(driver, "#publishes")
    assert text_of(driver, "#train-updates") == "60" and text_of(driver, "#train-version") == "30"
    assert text_of(driver, "#train-step").startswith("30") and "10 earlier" in text_of(driver, "#main")
    assert text_of(driver, "#train-eval-diff") == "0.320"
    assert len(_rows(driver, "figure.chart path.line")) >= 4
    assert len(_rows(driver, "#evals tbody tr")) == 2


def test_harness_view_and_an_instance(driver: Any, site: str, ids: dict[str, str]) -> None:
    _open(driver, f"{site}#/harness/{ids['harness']}")
    _until(driver, lambda: len(_rows(driver, "#harness-instances tbody tr")) == 5)
    assert text_of(driver, "#harness-resolved") == "1 / 5"
    row = driver.find_element(By.CSS_SELECTOR, 'tr[data-instance="envfarm-tests__calc-3"]')
    assert "conftest" in row.text
    row.click()
    wait_for(driver, "#findings")
    assert "conftest" in text_of(driver, "#findings") and "reverted" not in text_of(driver, "#findings")
    assert "PASSED tests/test_ops.py::test_mul" in text_of(driver, 'details[data-log="test_output.txt"]')


@pytest.mark.docker
def test_real_code_repair_episode_and_harness_run(driver: Any, tmp_path: Path) -> None:
    """A CodeRepair-v0 farm run and a harness run on docker, read as they are written."""
    asyncio.run(code_repair_run(tmp_path / "coderepair", episodes=1))
    asyncio.run(harness_run(tmp_path / "reports"))
    with serve_in_thread([tmp_path]) as url:
        ids = {s.kind: s.id for s in discover([tmp_path])}
        _open(driver, f"{url}#/farm/{ids['farm']}/episodes/0")
        wait_for(driver, "#code-repair")
        assert "resolved" in text_of(driver, "#code-repair") and _rows(driver, "#diff .diff-add")
        assert "fail" not in {e.text for e in _rows(driver, "#tests .badge")}
        assert "passed" in text_of(driver, "#code-repair details pre.log")
        assert [e.get_attribute("data-tool") for e in _rows(driver, ".tool-call")] == [
            "create", "bash", "run_tests", "submit"]
        _open(driver, f"{url}#/harness/{ids['harness']}")
        _until(driver, lambda: len(_rows(driver, "#harness-instances tbody tr")) == 5)
        outcomes = sorted(e.text for e in _rows(driver, "#harness-instances tbody td:nth-child(2)"))
        assert outcomes == ["empty_patch", "error", "resolved", "unresolved", "unresolved"]
        forged = driver.find_element(By.XPATH, "//tr[td//span[@class='rule' and text()='conftest']]")
        forged.click()
        wait_for(driver, "#findings")
        assert "reverted" in text_of(driver, "#findings") and "conftest.py" in text_of(driver, "#findings")
        driver.get("about:blank")


def test_a_trainer_links_its_farm_runs(driver: Any, runs: Path, tmp_path: Path) -> None:
    import shutil

    from envfarm.testing.dashboard_runs import write_trainer_run

    folder = write_trainer_run(tmp_path / "train")
    shutil.copytree(runs / "toolcalc", folder / "runs" / "rl")
    with serve_in_thread([folder]) as url:
        ids = {s.kind: s.id for s in discover([folder])}
        _open(driver, f"{url}#/trainer/{ids['trainer']}")
        wait_for(driver, "#trainer-runs a").click()
        _until(driver, lambda: text_of(driver, "#farm-done") == "12 / 12")
        assert text_of(driver, "#sources").count("train · rl") == 1
        driver.get("about:blank")
