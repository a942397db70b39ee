"""The verifier entry of an exported Harbor task: grades one pytest run inside the task's container.

Stdlib only (it runs on the task image's Python, where envfarm is not installed). ``tests/test.sh`` runs the
harness's eval script into ``/logs/verifier/test_output.raw``, then ``python3 /tests/grade.py``, which reads
``/tests/config.json`` (written by :mod:`envfarm.envs.code_repair.harbor_export`) and writes

    /logs/verifier/test_output.txt   the log in swebench's shape (start/end markers, exit code)
    /logs/verifier/report.json       {instance_id: {"resolved", "tests_status": {FAIL_TO_PASS: ...}, ...}}
    /logs/verifier/reward.txt        1 when resolved and every canary has its planted outcome, else 0

The verdict follows the harness: swebench's pytest log parser (a result line is ``STATUS test-id``), every
FAIL_TO_PASS and PASS_TO_PASS test passed (PASSED or XFAIL), and each planted canary reported with its
planted outcome (a must-pass canary PASSED, a must-fail one FAILED or ERROR) so a run that forges or drops
results earns nothing.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

STATUSES = ("PASSED", "FAILED", "SKIPPED", "ERROR", "XFAIL")
PASSING = ("PASSED", "XFAIL")
SKIP_SUMMARY = re.compile(r"^\[\d+\]$")
"""pytest's ``SKIPPED [N] path:line: reason`` summary line names no test."""
START, END, EXIT = ">>>>> Start Test Output", ">>>>> End Test Output", ">>>>> Test Exit Code"


def parse_pytest(log: str) -> dict[str, str]:
    """swebench's ``parse_log_pytest``: test id -> status from ``pytest -rA`` result lines."""
    status: dict[str, str] = {}
    for line in log.splitlines():
        if line.startswith(STATUSES):
            if line.startswith("FAILED"):
                line = line.replace(" - ", " ")
            parts = line.split()
            if len(parts) > 1 and not (parts[0] == "SKIPPED" and SKIP_SUMMARY.match(parts[1])):
                status[parts[1]] = parts[0]
    return status


def split(tests: list[str], status: dict[str, str]) -> dict[str, list[str]]:
    ok = [t for t in tests if status.get(t) in PASSING]
    return {"success": ok, "failure": [t for t in tests if t not in ok]}


def canary_findings(canaries: list[dict[str, object]], status: dict[str, str]) -> list[str]:
    found = []
    for c in canaries:
        word = re.compile(rf"(?<![\w/.]){re.escape(str(c['name']))}(?![\w.])")  # a test's, not a module's
        seen = {status[k] for k in status if word.search(k)}
        want = {"PASSED"} if c["must_pass"] else {"FAILED", "ERROR"}
        if not seen or not seen <= want:
            found.append(f"canary {c['name']} in {c['module']}: {'/'.join(sorted(seen)) or 'missing'}")
    return found


def main(config_path: str, raw_path: str, exit_code: str, out: str) -> int:
    config = json.loads(Path(config_path).read_text())
    raw = Path(raw_path).read_text(errors="replace") if Path(raw_path).is_file() else ""
    clean = raw.replace(">>>>>", ">>>>\u2009>")
    if clean and not clean.endswith("\n"):
        clean += "\n"
    log = f"{START}\n{clean}{END}\n{EXIT}: {exit_code}\n"
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "test_output.txt").write_text(log)
    status = parse_pytest(clean)
    f2p, p2p = split(config["FAIL_TO_PASS"], status), split(config["PASS_TO_PASS"], status)
    resolved = not f2p["failure"] and not p2p["failure"]
    findings = canary_findings(config["canaries"], status)
    report = {config["instance_id"]: {
        "patch_is_None": False, "patch_exists": True, "patch_successfully_applied": True,
        "resolved": resolved and not findings, "canary_findings": findings,
        "tests_status": {"FAIL_TO_PASS": f2p, "PASS_TO_PASS": p2p,
                         "FAIL_TO_FAIL": {"success": [], "failure": []},
                         "PASS_TO_FAIL": {"success": [], "failure": []}}}}
    (folder / "report.json").write_text(json.dumps(report, indent=2))
    reward = 1 if resolved and not findings else 0
    (folder / "reward.txt").write_text(f"{reward}\n")
    n_f2p, n_p2p = len(config["FAIL_TO_PASS"]), len(config["PASS_TO_PASS"])
    print(f"{config['instance_id']}: reward {reward} (F2P {len(f2p['success'])}/{n_f2p}, "
          f"P2P {len(p2p['success'])}/{n_p2p}, canary findings {len(findings)})")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:5]))
