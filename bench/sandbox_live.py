"""The live-count load test of ``bench/sandbox.py --live-only``: thousands of idle sandboxes at once.

Opens ``--live`` sandboxes in batches of ``--batch`` (``--via fork``: one parent holding a prepared tree and
forks of it, which share its layers; ``--via open``: fresh sandboxes, 16 opening at a time), holds them all,
asks every one ``echo ok``, then closes them all and counts what is left of this process's sandboxes.

Memory per sandbox is the host's MemAvailable drop over the sandboxes, and the PSS of the processes of the
first few (bwrap: bwrap and the agent; docker: containerd's shim and the agent). Before each batch it
checks the resources that run out first on one host, and stops opening (reporting which one) rather than
take the machine down: MemAvailable above ``--floor-mib``, file descriptors under the soft RLIMIT_NOFILE
(raised to the hard limit first), kernel tasks under pid_max, time within ``--max-s``.

``--ksm`` (the default) runs the host's ksmd for the test and restores its settings after: bwrap agents then
boot alike and share their common pages (``BwrapConfig.share_agent_pages``). The report gives ksmd's pages
and the CPU seconds it spent, the price of the sharing. ``--no-ksm`` measures without.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import os
import resource
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from envfarm.sandbox import Backend, Limits, Sandbox, get_backend
from envfarm.sandbox.bwrap import KSM_RUN

LIMITS = Limits(memory_mb=64, pids=32, disk_mb=16)
TREE = ("mkdir -p /workspace/tree && for i in $(seq 200); do "
        "head -c 16384 /dev/urandom > /workspace/tree/f$i; done")  # 3.2 MB the forks share
FDS_PER_SANDBOX = {"bwrap": 3, "docker": 1}
TASKS_PER_SANDBOX = {"bwrap": 3, "docker": 14}  # bwrap, agent, our wait thread; the shim's threads, agent
SAMPLE = 10  # sandboxes whose processes' PSS is read
DEFAULT_VIA = {"bwrap": "fork", "docker": "open"}


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--live-only", action="store_true", help="only the live-count load test")
    ap.add_argument("--live", type=int, default=None, help="sandboxes to hold live at once (per backend)")
    ap.add_argument("--via", default=None,
                    help="per backend (in --backends order, or one for all): open (fresh sandboxes) or fork "
                    "(forks of one prepared parent); default: fork for bwrap, open for docker")
    ap.add_argument("--batch", type=int, default=50, help="sandboxes opened per batch")
    ap.add_argument("--floor-mib", type=int, default=2048, help="stop opening below this host MemAvailable")
    ap.add_argument("--max-s", type=float, default=1500.0, help="stop opening after this many seconds")
    ap.add_argument("--ksm", action=argparse.BooleanOptionalAction, default=True,
                    help="run the host's ksmd during the test, so bwrap agents share their common pages")
    ap.add_argument("--settle-s", type=float, default=180.0,
                    help="with --ksm: wait up to this long after opening for ksmd to finish merging")


# ------------------------------------------------------------------------------------------ host figures


def meminfo() -> dict[str, float]:
    """/proc/meminfo in MiB."""
    out = {}
    for line in Path("/proc/meminfo").read_text().splitlines():
        key, value = line.split(":", 1)
        out[key] = int(value.split()[0]) / 1024
    return out


def tasks() -> int:
    """Kernel tasks (processes and threads) on the host: the 4th field of /proc/loadavg."""
    return int(Path("/proc/loadavg").read_text().split()[3].split("/")[1])


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def raise_nofile() -> tuple[int, int]:
    """Soft RLIMIT_NOFILE up to the hard limit (each bwrap sandbox holds 3 pipe ends here)."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def short_of(name: str, want: int, args: argparse.Namespace, t0: float) -> str | None:
    """Which resource would run short if ``want`` more sandboxes opened now; None when none would."""
    mem = meminfo()["MemAvailable"]
    if mem < args.floor_mib:
        return f"memory: MemAvailable {mem:.0f} MiB < floor {args.floor_mib} MiB"
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if open_fds() + want * FDS_PER_SANDBOX[name] + 64 > soft:
        return f"file descriptors: {open_fds()} open, RLIMIT_NOFILE {soft}"
    pid_max = read_int("/proc/sys/kernel/pid_max")
    if tasks() + want * TASKS_PER_SANDBOX[name] + 2000 > pid_max:
        return f"process ids: {tasks()} tasks, pid_max {pid_max}"
    if time.perf_counter() - t0 > args.max_s:
        return f"time: over --max-s {args.max_s:.0f}s"
    return None


# ------------------------------------------------------------------------------------------ ksmd

KSM = KSM_RUN.parent
KSM_SETTINGS = {"run": "1", "pages_to_scan": "2000", "sleep_millisecs": "20"}


@contextlib.contextmanager
def ksmd_for_the_test(on: bool) -> Iterator[bool]:
    """ksmd merging pages (``KSM_SETTINGS``) inside the block when ``on`` and the kernel has KSM; the
    previous settings come back after. Yields whether it runs."""
    if not on or not KSM_RUN.exists():
        yield False
        return
    before = {name: (KSM / name).read_text().strip() for name in KSM_SETTINGS}
    try:
        for name, value in KSM_SETTINGS.items():
            (KSM / name).write_text(value)
        yield True
    finally:
        for name, value in before.items():
            (KSM / name).write_text(value)


def ksmd_cpu_s() -> float:
    """CPU seconds ksmd (a kernel thread) has used since boot; 0 where there is none."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and comm(int(entry.name)) == "ksmd":
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return 0.0


def ksm_figures() -> dict[str, float]:
    names = ("pages_shared", "pages_sharing", "full_scans")
    out: dict[str, float] = {n: int((KSM / n).read_text()) for n in names if (KSM / n).exists()}
    out["ksmd_cpu_s"] = ksmd_cpu_s()
    return out


async def settle(ksm: bool, limit_s: float) -> float:
    """Wait until ksmd stops finding more pages to share (two full scans without growth), at most
    ``limit_s``; the seconds waited."""
    t = time.perf_counter()
    if not ksm:
        return 0.0
    last, scans = ksm_figures(), 0
    while time.perf_counter() - t < limit_s and scans < 2:
        await asyncio.sleep(5)
        now = ksm_figures()
        if now["full_scans"] > last["full_scans"]:
            scans = scans + 1 if now["pages_sharing"] <= last["pages_sharing"] * 1.001 else 0
            last = now
    return time.perf_counter() - t


# ------------------------------------------------------------------------------------------ processes


def pss_kib(pid: int) -> dict[str, int]:
    out: dict[str, int] = {}
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
            key, value = line.split(":", 1)
            out[key] = int(value.split()[0])
    except OSError:
        pass
    return out


def process_tree(pid: int) -> list[int]:
    out = [pid]
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out += [p for child in (task / "children").read_text().split() for p in process_tree(int(child))]
        except OSError:
            pass
    return out


def comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "?"


def ppid(pid: int) -> int:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return int(stat[stat.rfind(")") + 2 :].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def sandbox_pids(name: str, sb: Sandbox) -> list[int]:
    """Host pids of one sandbox's own processes: bwrap's tree, or docker's shim and the agent under it."""
    handle: Any = sb._handle
    if name == "bwrap":
        return process_tree(handle.pid)
    from envfarm.sandbox import dockerutil

    info = dockerutil.client().api.inspect_container(handle.container_id)
    agent = int(info["State"]["Pid"])
    return [ppid(agent), agent] if agent else []


def process_memory(name: str, boxes: list[Sandbox]) -> dict[str, dict[str, float]]:
    """Per process name: count and mean PSS, RSS and private dirty MiB over the first few sandboxes."""
    sums: dict[str, list[float]] = {}
    for sb in boxes[:SAMPLE]:
        for pid in sandbox_pids(name, sb):
            m = pss_kib(pid)
            row = sums.setdefault(comm(pid), [0, 0, 0, 0])
            row[0] += 1
            row[1] += m.get("Pss", 0) / 1024
            row[2] += m.get("Rss", 0) / 1024
            row[3] += m.get("Private_Dirty", 0) / 1024
    return {k: {"n": int(n), "pss_mib": round(p / n, 2), "rss_mib": round(r / n, 2),
                "private_dirty_mib": round(d / n, 2)} for k, (n, p, r, d) in sums.items()}


# ------------------------------------------------------------------------------------------ leftovers


def my_bwraps() -> int:
    """bwrap processes whose parent chain reaches this process."""
    me, n = os.getpid(), 0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and comm(int(entry.name)) == "bwrap":
            pid = int(entry.name)
            while pid > 1:
                pid = ppid(pid)
                if pid == me:
                    n += 1
                    break
    return n


def my_containers() -> int:
    from envfarm.sandbox import dockerutil

    if not dockerutil.ping():
        return 0
    mine = {"label": ["envfarm=1", f"envfarm.owner_pid={os.getpid()}"]}
    return len(dockerutil.client().api.containers(all=True, filters=mine))


def my_store_entries() -> int:
    from envfarm.sandbox.fork import store
    from envfarm.sandbox.overlay import owner_pid

    st, me = store(), os.getpid()
    return sum(owner_pid(e.name, layer=folder == st.layers) == me
               for folder in (st.layers, st.boxes) if folder.is_dir() for e in folder.iterdir())


def my_cgroups() -> int:
    root = Path("/sys/fs/cgroup/pids/envfarm")
    if not root.is_dir():
        root = Path("/sys/fs/cgroup/envfarm")
    prefix = f"{os.getpid()}-"
    return sum(e.name.startswith(prefix) for e in root.iterdir()) if root.is_dir() else 0


def leftovers() -> dict[str, int]:
    return {"bwrap_processes": my_bwraps(), "containers": my_containers(), "layer_store_entries":
            my_store_entries(), "cgroups": my_cgroups()}


# ------------------------------------------------------------------------------------------ the run


async def open_batch(backend: Backend, n: int, parent: Sandbox | None) -> tuple[list[Sandbox], list[str]]:
    """``n`` more sandboxes, booted and answering; errors as text."""
    if parent is not None:
        kids: list[Sandbox] = []
        for _ in range(n):
            kids.append(await parent.fork())  # returns once the overlays are mounted; the child boots
        results = await asyncio.gather(*(k.exec(["true"]) for k in kids), return_exceptions=True)
        bad = [k for k, r in zip(kids, results, strict=True) if isinstance(r, BaseException)]
        await asyncio.gather(*(k.close() for k in bad))
        return [k for k in kids if k not in bad], [repr(r) for r in results if isinstance(r, BaseException)]
    gate = asyncio.Semaphore(16)

    async def one() -> Sandbox:
        async with gate:
            return await backend.start(limits=LIMITS)

    got = await asyncio.gather(*(one() for _ in range(n)), return_exceptions=True)
    return [g for g in got if isinstance(g, Sandbox)], [repr(g) for g in got if not isinstance(g, Sandbox)]


def progress(name: str, live: int, t0: float, mem_before: float) -> None:
    mem = meminfo()["MemAvailable"]
    print(f"  {name}: {live:5d} live  {time.perf_counter() - t0:6.1f}s  MemAvailable {mem:7.0f} MiB "
          f"({(mem_before - mem) / max(live, 1):.2f} MiB/sandbox)  fds {open_fds()}  tasks {tasks()}",
          file=sys.stderr, flush=True)


def read_int(path: str) -> int:
    return int(Path(path).read_text())


async def answer_all(boxes: list[Sandbox]) -> int:
    gate = asyncio.Semaphore(64)

    async def one(sb: Sandbox) -> bool:
        async with gate:
            try:
                return (await sb.exec("echo ok", timeout_s=60)).stdout == "ok\n"
            except Exception:  # a sandbox that fails to answer is counted, not raised
                return False

    return sum(await asyncio.gather(*(one(b) for b in boxes)))


async def close_all(boxes: list[Sandbox]) -> float:
    t = time.perf_counter()
    gate = asyncio.Semaphore(64)

    async def one(sb: Sandbox) -> None:
        async with gate:
            await sb.close()

    await asyncio.gather(*(one(b) for b in boxes), return_exceptions=True)
    return time.perf_counter() - t


async def hold(name: str, backend: Backend, n: int, via: str, args: argparse.Namespace,
               ksm: bool) -> dict[str, Any]:
    t0 = time.perf_counter()
    before, ksm_before = meminfo(), ksm_figures() if ksm else {}
    boxes: list[Sandbox] = []
    errors: list[str] = []
    stopped: str | None = None
    parent = None
    try:
        if via == "fork":
            parent = await backend.start(limits=LIMITS)
            await parent.exec(TREE, check=True, timeout_s=120)
            boxes.append(parent)
        while len(boxes) < n and not errors:
            want = min(args.batch, n - len(boxes))
            if stopped := short_of(name, want, args, t0):
                break
            got, errs = await open_batch(backend, want, parent)
            boxes += got
            errors += errs
            progress(name, len(boxes), t0, before["MemAvailable"])
        open_s = time.perf_counter() - t0
        await asyncio.sleep(3)
        settle_s = await settle(ksm, args.settle_s)
        after, ksm_after = meminfo(), ksm_figures() if ksm else {}
        held = {"host_fds": open_fds(), "host_tasks": tasks()}
        procs = await asyncio.to_thread(process_memory, name, boxes)
        t = time.perf_counter()
        answered = await answer_all(boxes)
        answer_s = time.perf_counter() - t
    finally:
        close_s = await close_all(boxes)
    live = len(boxes)
    drop = {k: round((before[k] - after[k]) / max(live, 1), 3) for k in ("MemAvailable", "MemFree")}
    grew = {k: round((after[k] - before[k]) / max(live, 1), 3)
            for k in ("AnonPages", "Slab", "SUnreclaim", "KernelStack", "PageTables", "Shmem")}
    return {"via": via, "target": n, "live": live, "answered": answered,
            "lost": len(errors) + live - answered,
            "stopped_by": stopped, "errors": errors[:5], "n_errors": len(errors),
            "open_s": round(open_s, 1), "answer_all_s": round(answer_s, 1), "close_s": round(close_s, 1),
            "ksm": {"running": ksm, "settle_s": round(settle_s, 1),
                    **{k: round(v - ksm_before.get(k, 0), 1) for k, v in ksm_after.items()}},
            "mib_per_sandbox": drop["MemAvailable"], "mib_per_sandbox_by_kind": {**drop, **grew},
            "mem_available_mib": {"before": round(before["MemAvailable"]),
                                  "live": round(after["MemAvailable"])},
            "processes_per_sandbox": procs, "while_live": held}


async def main(args: argparse.Namespace, write: Callable[[Path, str], None]) -> int:
    nofile = raise_nofile()
    out = Path(args.out or "bench/results/sandbox_live.json")
    report: dict[str, Any] = {
        "measured": datetime.date.today().isoformat(), "cpus": os.cpu_count(),
        "load_avg_start": [round(x, 2) for x in os.getloadavg()],
        "mem_total_mib": round(meminfo()["MemTotal"]), "rlimit_nofile": list(nofile),
        "pid_max": read_int("/proc/sys/kernel/pid_max"),
        "max_user_namespaces": read_int("/proc/sys/user/max_user_namespaces"),
        "limits": {"memory_mb": LIMITS.memory_mb, "pids": LIMITS.pids, "disk_mb": LIMITS.disk_mb},
        "backends": {},
    }
    ok = True
    names = args.backends.split(",")
    vias = args.via.split(",") if args.via else [DEFAULT_VIA.get(n, "open") for n in names]
    if len(vias) not in (1, len(names)):
        raise SystemExit(f"--via: give one, or one per backend ({len(names)})")
    for name, via in zip(names, vias if len(vias) > 1 else vias * len(names), strict=True):
        if via not in ("open", "fork"):
            raise SystemExit(f"--via: {via!r} is neither open nor fork")
        n = args.live or {"docker": 1000, "bwrap": 5000}[name]
        print(f"== {name}: {n} live via {via}", file=sys.stderr, flush=True)
        backend = get_backend(name)
        await backend.check()
        try:
            with ksmd_for_the_test(args.ksm and name == "bwrap") as ksm:
                result = await hold(name, backend, n, via, args, ksm)
        finally:
            await backend.aclose()
        result["load_avg_end"] = [round(x, 2) for x in os.getloadavg()]
        result["left"] = await asyncio.to_thread(leftovers)
        result["target_met"] = (result["answered"] == result["target"] and not result["lost"]
                                and not any(result["left"].values()))
        ok = ok and result["target_met"]
        report["backends"][name] = result
        await asyncio.to_thread(write, out, json.dumps(report, indent=2))  # kept if a later backend fails
    text = json.dumps(report, indent=2)
    print(text)
    await asyncio.to_thread(write, out, text)
    return 0 if ok else 1
