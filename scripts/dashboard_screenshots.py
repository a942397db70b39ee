"""Screenshots of each dashboard view, for docs/ and the README: ``python scripts/dashboard_screenshots.py``.

Runs a real farm (the oracle on ToolCalc, bwrap, slowed so the live view is caught mid-run); with a docker
daemon also a real CodeRepair-v0 run and a real harness run over built-in code-repair rows (without one,
envfarm/testing/dashboard_runs.py writes both with the harness's grading and report code); writes a
trainer folder in the agreed metrics.jsonl format (or copies a real one: ``--trainer DIR``); serves the
dashboard on 127.0.0.1 and photographs each view in headless chromium. Writes docs/dashboard-<view>.png.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import tempfile
import threading
import time
from pathlib import Path

from envfarm.dashboard.sources import discover
from envfarm.testing.dashboard_browser import browser, console_errors, text_of, wait_for
from envfarm.testing.dashboard_runs import (
    code_repair_run,
    farm_run,
    harness_run,
    serve_in_thread,
    write_code_repair_run,
    write_harness_run,
    write_trainer_run,
)

ROOT = Path(__file__).resolve().parents[1]


def _shot(driver: object, url: str, css: str, out: Path, settle_s: float = 0.8,
          max_height: int = 2200) -> None:
    driver.get("about:blank")  # type: ignore[attr-defined]
    driver.get(url)  # type: ignore[attr-defined]
    wait_for(driver, css, timeout=20)
    time.sleep(settle_s)
    _full_page(driver, out, max_height=max_height)
    errors = console_errors(driver)
    if errors:
        raise SystemExit(f"{out.name}: console errors: {errors}")
    print(f"wrote {out.relative_to(ROOT)} ({out.stat().st_size // 1024} KiB)")


def _full_page(driver: object, out: Path, width: int = 1280, max_height: int = 2200) -> None:
    """A screenshot of the whole page (the window grows to the page's height, up to ``max_height``)."""
    height = driver.execute_script("return document.documentElement.scrollHeight")  # type: ignore[attr-defined]
    driver.set_window_size(width, min(int(height) + 140, max_height))  # type: ignore[attr-defined]
    time.sleep(0.3)
    driver.save_screenshot(str(out))  # type: ignore[attr-defined]
    driver.set_window_size(width, 860)  # type: ignore[attr-defined]
    _shrink(out)


def _shrink(path: Path) -> None:
    """256 colours are plenty for a dashboard; about a third of the bytes (skipped without Pillow)."""
    try:
        from PIL import Image
    except ImportError:
        return
    with Image.open(path) as img:
        small = img.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT)
    small.save(path, optimize=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs")
    parser.add_argument("--episodes", type=int, default=400)
    parser.add_argument("--trainer", type=Path, help="a real trainer folder (`envfarm train --out DIR`) to "
                        "show instead of one written in its format")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="envfarm-shots-") as tmp:
        root = Path(tmp)
        instance = _repair_and_harness(root)
        if args.trainer is not None:
            shutil.copytree(args.trainer, root / "trainer", ignore=shutil.ignore_patterns("checkpoints"))
        else:
            write_trainer_run(root / "trainer")
        work = farm_run(root / "toolcalc", episodes=args.episodes, concurrency=16, delay_s=0.1)
        farm = threading.Thread(target=asyncio.run, args=(work,), name="farm")
        farm.start()
        try:
            while not (root / "toolcalc" / "run.json").exists():
                time.sleep(0.05)
            with serve_in_thread([root]) as url, browser(1280, 860) as driver:
                ids = {s.path.name if s.kind != "harness" else "harness": s.id for s in discover([root])}
                _live(driver, url, ids["toolcalc"], args.out, args.episodes)
                farm.join()
                _shot(driver, f"{url}#/farm/{ids['toolcalc']}/episodes", "#episodes tbody tr",
                      args.out / "dashboard-trajectories.png", max_height=1100)
                _shot(driver, f"{url}#/farm/{ids['toolcalc']}/episodes/7", ".tool-call",
                      args.out / "dashboard-episode.png")
                _shot(driver, f"{url}#/farm/{ids['coderepair']}/episodes/1", "#code-repair",
                      args.out / "dashboard-code-repair.png")
                _shot(driver, f"{url}#/trainer/{ids['trainer']}", "#publishes",
                      args.out / "dashboard-training.png")
                _shot(driver, f"{url}#/harness/{ids['harness']}", "#harness-instances",
                      args.out / "dashboard-harness.png")
                _shot(driver, f"{url}#/harness/{ids['harness']}/{instance}", "#findings",
                      args.out / "dashboard-harness-instance.png")
                driver.get("about:blank")
        finally:
            farm.join()


def _repair_and_harness(root: Path) -> str:
    """Code-repair and harness runs: real ones on docker when a daemon answers. The tampered instance."""
    from envfarm.sandbox import dockerutil

    if dockerutil.ping():
        asyncio.run(code_repair_run(root / "coderepair", episodes=4))
        asyncio.run(harness_run(root / "reports"))
        report = json.loads(next((root / "reports").glob("*.demo.json")).read_text())
        return next(iter(report["tampered_ids"]))
    print("no docker daemon: code-repair and harness runs written from the toy repository instead")
    write_code_repair_run(root / "coderepair")
    write_harness_run(root / "reports")
    return "envfarm-tests__calc-3"


def _live(driver: object, url: str, farm_id: str, out: Path, episodes: int) -> None:
    """The live view once the run is well under way (a third done), while episodes are in flight."""
    driver.get(f"{url}#/farm/{farm_id}")  # type: ignore[attr-defined]
    wait_for(driver, "#farm-done", timeout=20)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        done = int(text_of(driver, "#farm-done").split("/")[0] or 0)
        if done >= episodes // 3:
            break
        time.sleep(0.2)
    _full_page(driver, out / "dashboard-live.png")
    print(f"wrote docs/dashboard-live.png at {done}/{episodes} episodes")
    driver.get("about:blank")  # type: ignore[attr-defined]


if __name__ == "__main__":
    main()
