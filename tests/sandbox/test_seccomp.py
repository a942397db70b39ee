"""Seccomp in real sandboxes: every family ``sandbox/seccomp.py`` denies fails with EPERM (clone3: ENOSYS) on
both isolating backends, bwrap (our filter) and docker (its default profile), and ordinary calls still work.

Each test runs a small python3 ctypes program inside the sandbox that makes raw syscalls (x86_64 numbers)
and prints ``[return value, errno]`` for each. Where the arguments are chosen so the kernel would answer
something other than EPERM without a filter (success, EFAULT, EINVAL, EBADF: marked ``# unfiltered: ...``),
the test proves the filter and not a missing capability. Where Docker's profile allows a call that the bwrap
filter denies, ``DOCKER_ALLOWS`` says so and the docker run expects the kernel's own answer instead.
"""

from __future__ import annotations

import asyncio
import errno
import json
import platform
import shutil
from pathlib import Path

import pytest

from envfarm.errors import BackendUnavailable
from envfarm.sandbox import Backend, Limits, Sandbox, seccomp
from envfarm.sandbox.bwrap import DEFAULT_HOST_UID, HOST_ENV, BwrapBackend, bwrap_args, host_argv
from envfarm.sandbox.seccomp import RULES, compile_bpf

pytestmark = pytest.mark.skipif(platform.machine() != "x86_64", reason="syscall numbers are x86_64's")

PROBE = r"""
import ctypes, json, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
out = []
for nr, *args in json.loads(sys.argv[1]):
    ctypes.set_errno(0)
    rc = libc.syscall(ctypes.c_long(nr), *(ctypes.c_long(a) for a in args))
    out.append([rc, ctypes.get_errno() if rc == -1 else 0])
print(json.dumps(out))
"""

AT_FDCWD, CLONE_NEWUSER, CLONE_NEWNS, SIGCHLD = -100, 0x10000000, 0x00020000, 17
FAMILIES: dict[str, list[tuple[str, int, tuple[int, ...]]]] = {
    # name: [(syscall, x86_64 number, args)]
    "keyring": [("keyctl", 250, (0, -3, 0)),  # unfiltered: the session keyring's serial
                ("add_key", 248, (0, 0, 0, 0, -2)),  # unfiltered: EFAULT
                ("request_key", 249, (0, 0, 0, 0))],  # unfiltered: EFAULT
    "bpf": [("bpf", 321, (5, 0, 0))],
    "perf": [("perf_event_open", 298, (0, 0, -1, -1, 0))],  # unfiltered: EFAULT
    "userfaultfd": [("userfaultfd", 323, (1,))],  # UFFD_USER_MODE_ONLY; unfiltered: a descriptor
    "io_uring": [("io_uring_setup", 425, (1, 0)),  # unfiltered: EFAULT
                 ("io_uring_enter", 426, (-1, 0, 0, 0, 0, 0)),  # unfiltered: EBADF
                 ("io_uring_register", 427, (-1, 0, 0, 0))],
    "mount": [("mount", 165, (0, 0, 0, 0, 0)), ("umount2", 166, (0, 0)),  # unfiltered: EFAULT
              ("pivot_root", 155, (0, 0)),
              ("fsopen", 430, (0, 0)), ("fsmount", 432, (-1, 0, 0)), ("open_tree", 428, (-1, 0, 0)),
              ("move_mount", 429, (-1, 0, -1, 0, 0)), ("fsconfig", 431, (-1, 0, 0, 0, 0)),
              ("fspick", 433, (-1, 0, 0)), ("mount_setattr", 442, (-1, 0, 0, 0, 0))],
    "kexec": [("kexec_load", 246, (0, 0, 0, 0)), ("kexec_file_load", 320, (-1, -1, 0, 0, 0))],
    "modules": [("init_module", 175, (0, 0, 0)), ("finit_module", 313, (-1, 0, 0)),
                ("delete_module", 176, (0, 0))],
    "namespaces": [("unshare", 272, (CLONE_NEWUSER,)),  # unfiltered (docker without its profile): 0
                   ("unshare", 272, (CLONE_NEWNS,)),
                   ("setns", 308, (-1, 0)),  # unfiltered: EBADF
                   ("clone", 56, (CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0))],
    "host admin": [("acct", 163, (0,)), ("quotactl", 179, (0, 0, 0, 0)), ("swapon", 167, (0, 0)),
                   ("swapoff", 168, (0,)), ("reboot", 169, (0, 0, 0, 0)),
                   ("syslog", 103, (10, 0, 0)), ("sethostname", 170, (0, 0)), ("vhangup", 153, ()),
                   ("fanotify_init", 300, (0, 0))],
    "file handles": [("open_by_handle_at", 304, (-1, 0, 0)),
                     ("name_to_handle_at", 303, (AT_FDCWD, 0, 0, 0, 0))],  # unfiltered: EFAULT
    "obsolete": [("lookup_dcookie", 212, (0, 0, 0)), ("nfsservctl", 180, (0, 0, 0)), ("uselib", 134, (0,)),
                 ("ustat", 136, (0, 0)), ("sysfs", 139, (3,))],  # unfiltered: sysfs(3) counts fs types
    "x86 legacy": [("iopl", 172, (0,)), ("ioperm", 173, (0, 0, 0))],
    "clock": [("settimeofday", 164, (0, 0)), ("clock_settime", 227, (0, 0)),  # unfiltered: EPERM, EFAULT
              ("clock_adjtime", 305, (0, 0)), ("adjtimex", 159, (0,))],  # unfiltered: EFAULT
    "numa": [("mbind", 237, (0, 0, 0, 0, 0, 0)), ("move_pages", 279, (0, 0, 0, 0, 0, 0)),  # unfiltered: 0, 0
             ("set_mempolicy", 238, (0, 0, 0)), ("get_mempolicy", 239, (0, 0, 0, 0, 0)),  # unfiltered: 0
             ("migrate_pages", 256, (0, 0, 0, 0))],
    "ptrace-ish": [("kcmp", 312, (0, 0, 0, 0, 0))],
}

# What Docker 20.10's default profile (the docker.io of Debian bookworm) allows and the bwrap filter denies;
# docker gets the kernel's own answer. Without capabilities none of them changes host state, but each is
# kernel attack surface, which is why bwrap denies them.
DOCKER_ALLOWS: dict[str, str] = {
    "io_uring_setup": "allowed by docker 20.10 (later Docker releases dropped io_uring from the profile)",
    "io_uring_enter": "as io_uring_setup",
    "io_uring_register": "as io_uring_setup",
    "clock_adjtime": "allowed by docker: it only reads the clock without CAP_SYS_TIME",
    "adjtimex": "allowed by docker: it only reads the clock without CAP_SYS_TIME",
}


async def probe(sb: Sandbox, calls: list[tuple[str, int, tuple[int, ...]]]) -> list[list[int]]:
    spec = json.dumps([[nr, *args] for _, nr, args in calls])
    res = await sb.exec(["python3", "-c", PROBE, spec], timeout_s=30)
    assert res.exit_code == 0, res
    out: list[list[int]] = json.loads(res.stdout)
    return out


@pytest.mark.parametrize("family", list(FAMILIES))
async def test_denied_family(isolated_backend: Backend, family: str) -> None:
    calls = FAMILIES[family]
    async with isolated_backend.open() as sb:
        got = await probe(sb, calls)
    for (name, _, args), (rc, err) in zip(calls, got, strict=True):
        if isolated_backend.name == "docker" and name in DOCKER_ALLOWS:
            assert err != errno.EPERM or rc != -1, f"{name}: docker started denying it; drop DOCKER_ALLOWS"
            continue
        where = f"{name}{args} on {isolated_backend.name}"
        assert (rc, errno.errorcode.get(err, err)) == (-1, "EPERM"), where


async def test_clone3_is_enosys_and_threads_still_start(isolated_backend: Backend) -> None:
    """clone3 passes its flags in a struct seccomp cannot read: ENOSYS makes libc fall back to clone."""
    async with isolated_backend.open() as sb:
        (rc, err), = await probe(sb, [("clone3", 435, (0, 0))])  # unfiltered: EINVAL
        assert (rc, errno.errorcode.get(err, err)) == (-1, "ENOSYS")
        thread = "import threading; t = threading.Thread(target=print, args=('t',)); t.start(); t.join()"
        res = await sb.exec(["python3", "-c", thread], check=True)
        assert res.stdout == "t\n"


async def test_allowed_calls_work(isolated_backend: Backend) -> None:
    """The positive control: ordinary calls (and clone without namespace flags) are untouched."""
    async with isolated_backend.open() as sb:
        getpid, getuid, persona, getppid = await probe(sb, [("getpid", 39, ()), ("getuid", 102, ()),
                                                             ("personality", 135, (0xFFFFFFFF,)),
                                                             ("getppid", 110, ())])
        assert getpid[0] > 0 and getuid == [1000, 0] and persona[0] >= 0 and getppid[0] >= 0
        script = "import os, subprocess; pid = os.fork()\nif pid == 0: os._exit(7)\n" \
                 "print(os.waitpid(pid, 0)[1] >> 8, subprocess.run(['true']).returncode)"
        assert (await sb.exec(["python3", "-c", script], check=True)).stdout == "7 0\n"
        status = (await sb.exec("grep -E '^(Seccomp|NoNewPrivs):' /proc/self/status", check=True)).stdout
        assert "Seccomp:\t2" in status  # a filter is loaded (mode 2)


async def test_new_user_namespaces_fail(isolated_backend: Backend) -> None:
    async with isolated_backend.open() as sb:
        res = await sb.exec("unshare -U true", timeout_s=10)
        assert res.exit_code != 0 and "Operation not permitted" in res.stderr, res
        res = await sb.exec("unshare -Ur id -u", timeout_s=10)
        assert res.exit_code != 0 and res.stdout == "", res
        (rc, err), = await probe(sb, [("unshare", 272, (CLONE_NEWUSER,))])
        assert (rc, err) == (-1, errno.EPERM)


# i386 syscalls through `int 0x80` from a 64-bit process: push rbx; mov eax, NR; mov ebx, A; mov ecx, B;
# mov edx, C; int 0x80; pop rbx; ret. A filter that checked only x86_64 numbers would let these through.
INT80 = r"""
import ctypes, json, mmap, struct, sys
page = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
out = []
for nr, a, b, c in json.loads(sys.argv[1]):
    code = (b"\x53" + b"\xb8" + struct.pack("<i", nr) + b"\xbb" + struct.pack("<i", a) + b"\xb9"
            + struct.pack("<i", b) + b"\xba" + struct.pack("<i", c) + b"\xcd\x80\x5b\xc3")
    page.seek(0)
    page.write(code)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(page))
    out.append(ctypes.CFUNCTYPE(ctypes.c_int)(addr)())
print(json.dumps(out))
"""


async def test_32bit_syscalls_meet_the_same_rules(isolated_backend: Backend) -> None:
    async with isolated_backend.open() as sb:
        calls = [[20, 0, 0, 0],  # i386 getpid: the control
                 [288, 0, -3, 0],  # i386 keyctl(KEYCTL_GET_KEYRING_ID, session): unfiltered, a serial
                 [310, CLONE_NEWUSER, 0, 0]]  # i386 unshare(CLONE_NEWUSER)
        res = await sb.exec(["python3", "-c", INT80, json.dumps(calls)], timeout_s=30)
        assert res.exit_code == 0, res
        getpid, keyctl, unshare = json.loads(res.stdout)
        if getpid == -errno.ENOSYS:
            pytest.skip("this kernel runs no 32-bit syscalls (ia32_emulation off)")
        assert getpid > 0
        assert keyctl == -errno.EPERM and unshare == -errno.EPERM


def test_every_rule_is_probed() -> None:
    """Each family of the rule table has a test above, and the program compiles (libseccomp is here)."""
    probed = {name for calls in FAMILIES.values() for name, _, _ in calls} | {"clone3"}
    declared = {name for rule in RULES for name in rule.syscalls}
    i386_or_gone = {"umount", "vm86", "vm86old", "stime", "create_module", "query_module",
                    "get_kernel_syms", "_sysctl", "quotactl_fd", "setdomainname", "set_mempolicy_home_node"}
    assert declared - probed == i386_or_gone
    assert {r.family for r in RULES} == set(FAMILIES)
    program = compile_bpf()
    assert program and len(program) % 8 == 0  # whole sock_filter instructions




# Calls whose unfiltered answer is not EPERM on any kernel setting: the same bwrap sandbox without
# --seccomp answers these, so the EPERM above comes from the filter, not from missing capabilities.
WITNESSES = ["keyctl", "add_key", "request_key", "perf_event_open", "mount", "umount2", "setns",
             "name_to_handle_at", "clock_settime", "adjtimex", "get_mempolicy", "clone3"]


@pytest.mark.bwrap
async def test_without_the_filter_the_witnesses_answer_otherwise() -> None:
    from envfarm.sandbox.images import rootfs_for

    calls = [c for cs in FAMILIES.values() for c in cs if c[0] in WITNESSES] + [("clone3", 435, (0, 0))]
    spec = json.dumps([[nr, *args] for _, nr, args in calls])
    setpriv, bwrap = shutil.which("setpriv"), shutil.which("bwrap")
    assert setpriv and bwrap
    args = bwrap_args(Path(rootfs_for(None)), Limits(), ["python3", "-c", PROBE, spec], seccomp_fd=None)
    argv = host_argv(setpriv, bwrap, DEFAULT_HOST_UID, [], Limits(), args)
    proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE, env=HOST_ENV, cwd="/")
    out, _ = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0
    for (name, _, _), (rc, err) in zip(calls, json.loads(out), strict=True):
        assert (rc, err) != (-1, errno.EPERM), f"{name} is EPERM even without the filter: not a witness"
    assert {name for name, _, _ in calls} == set(WITNESSES)


@pytest.mark.bwrap
async def test_without_libseccomp_bwrap_refuses_to_run_unfiltered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(seccomp, "LIBRARY", "libseccomp-missing.so.2")
    monkeypatch.setattr(seccomp, "_cached", None)
    backend = BwrapBackend()
    with pytest.raises(BackendUnavailable, match=r"libseccomp.*apt-get install libseccomp2"):
        await backend.check()
    with pytest.raises(BackendUnavailable, match=r"apt-get install libseccomp2"):
        async with backend.open():
            pass
    assert backend.live == 0
    await backend.aclose()
