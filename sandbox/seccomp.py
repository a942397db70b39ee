"""The seccomp filter of bwrap sandboxes: Docker's default denials, compiled by libseccomp once per process.

Docker gives every container its default seccomp profile; bubblewrap gives none unless asked. This module
builds the bwrap equivalent, a deny list (everything else is allowed, as namespaces, no capabilities, uid
and cgroups already contain it) that is at least as strict as Docker's profile for a process without
capabilities. Blocked calls fail with EPERM (clone3 with ENOSYS); none kills the sandbox.

    family          syscalls                                         why
    keyring         keyctl add_key request_key                       the kernel keyring is not namespaced
    bpf             bpf                                              kernel programs; verifier bugs
    perf            perf_event_open                                  kernel address/side-channel leaks, CVEs
    userfaultfd     userfaultfd                                      stalls kernel copies: race exploits
    io_uring        io_uring_setup/_enter/_register                  its ops bypass seccomp; many CVEs (Docker
                                                                     20.10 allows it; later releases deny it)
    mount           mount umount2 umount pivot_root fsopen fsmount   reshape the filesystem view
                    fsconfig fspick open_tree move_mount mount_setattr
    kexec           kexec_load kexec_file_load                       replace the running kernel
    modules         init_module finit_module delete_module ...       load kernel code
    namespaces      unshare setns; clone with a CLONE_NEW* flag;     new (user) namespaces are the usual way
                    clone3 (ENOSYS: its flags sit in a struct that   to reach kernel code meant for root
                    seccomp cannot read, so libc falls back to clone)
    host admin      acct quotactl(_fd) swapon swapoff reboot syslog  host-wide state; need capabilities
                    sethostname setdomainname vhangup fanotify_init  anyway, so only attack surface
    file handles    open_by_handle_at name_to_handle_at              "shocker": open host files by handle
    obsolete        lookup_dcookie nfsservctl uselib ustat sysfs     old, unmaintained entry points
                    _sysctl create_module query_module get_kernel_syms
    x86 legacy      vm86 vm86old iopl ioperm                         raw hardware access
    clock           settimeofday stime clock_settime clock_adjtime   the host clock is not namespaced
                    adjtimex (Docker allows clock_adjtime and adjtimex: read-only without CAP_SYS_TIME)
    numa            mbind migrate_pages move_pages set_mempolicy     NUMA policy (Docker: CAP_SYS_NICE only)
                    get_mempolicy set_mempolicy_home_node
    ptrace-ish      kcmp (ptrace and process_vm_* stay allowed, as in Docker on kernels >= 4.8)

Not copied from Docker: its ``personality`` argument filter (a persona only changes how the caller itself
runs) and its allow list itself (a deny list keeps new, harmless syscalls working).

Architectures: the rules are added for the native architecture and, on x86_64, for i386 and x32 too (as
Docker does), so a 32-bit ``int 0x80`` or an x32 syscall number meets the same rules; a syscall of any
other architecture fails with EPERM (``SCMP_FLTATR_ACT_BADARCH``).

The program depends on nothing per sandbox, so it is compiled once per process into a sealed memfd;
:func:`seccomp_fd` opens a fresh read-only descriptor of it for each bwrap (``--seccomp FD`` reads to the
end, so descriptors cannot be shared). libseccomp.so.2 is loaded with ctypes; without it the bwrap backend
raises BackendUnavailable rather than run sandboxes unfiltered.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import threading
from dataclasses import dataclass

from envfarm.errors import BackendUnavailable

FIX = "apt-get install libseccomp2 (or run `make setup`)"
LIBRARY = "libseccomp.so.2"

SCMP_ACT_ALLOW = 0x7FFF0000
SCMP_FLTATR_ACT_BADARCH = 2
SCMP_CMP_MASKED_EQ = 7
SCMP_ARCH_X86_64 = 0xC000003E
SCMP_ARCH_X86 = 0x40000003
SCMP_ARCH_X32 = 0x4000003E
NR_SCMP_ERROR = -1

# clone's namespace flags (Docker's mask 0x7E020000); CLONE_NEWTIME (0x80) is an exit-signal bit for clone
CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS = 0x00020000, 0x02000000, 0x04000000
CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x08000000, 0x10000000, 0x20000000, 0x40000000
NAMESPACE_FLAGS = (CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWPID, CLONE_NEWNET, CLONE_NEWIPC, CLONE_NEWUTS,
                   CLONE_NEWCGROUP)


def scmp_act_errno(code: int) -> int:
    return 0x00050000 | (code & 0xFFFF)


@dataclass(frozen=True)
class Rule:
    """Deny ``syscalls`` with ``errno``; with ``flag_mask``, only calls whose first argument has one of
    the bits of the mask set (one libseccomp rule per bit: a masked compare tests equality, not "any")."""

    family: str
    syscalls: tuple[str, ...]
    errno: int = errno.EPERM
    flag_mask: int = 0


RULES: tuple[Rule, ...] = (
    Rule("keyring", ("keyctl", "add_key", "request_key")),
    Rule("bpf", ("bpf",)),
    Rule("perf", ("perf_event_open",)),
    Rule("userfaultfd", ("userfaultfd",)),
    Rule("io_uring", ("io_uring_setup", "io_uring_enter", "io_uring_register")),
    Rule("mount", ("mount", "umount2", "umount", "pivot_root", "fsopen", "fsmount", "fsconfig", "fspick",
                   "open_tree", "move_mount", "mount_setattr")),
    Rule("kexec", ("kexec_load", "kexec_file_load")),
    Rule("modules", ("init_module", "finit_module", "delete_module", "create_module", "query_module",
                     "get_kernel_syms")),
    Rule("namespaces", ("unshare", "setns")),
    Rule("namespaces", ("clone",), flag_mask=sum(NAMESPACE_FLAGS)),
    Rule("namespaces", ("clone3",), errno=errno.ENOSYS),
    Rule("host admin", ("acct", "quotactl", "quotactl_fd", "swapon", "swapoff", "reboot", "syslog",
                        "sethostname", "setdomainname", "vhangup", "fanotify_init")),
    Rule("file handles", ("open_by_handle_at", "name_to_handle_at")),
    Rule("obsolete", ("lookup_dcookie", "nfsservctl", "uselib", "ustat", "sysfs", "_sysctl")),
    Rule("x86 legacy", ("vm86", "vm86old", "iopl", "ioperm")),
    Rule("clock", ("settimeofday", "stime", "clock_settime", "clock_adjtime", "adjtimex")),
    Rule("numa", ("mbind", "migrate_pages", "move_pages", "set_mempolicy", "get_mempolicy",
                  "set_mempolicy_home_node")),
    Rule("ptrace-ish", ("kcmp",)),
)
"""Every denial, in one place (the module docstring says why for each family)."""


class _ArgCmp(ctypes.Structure):
    """libseccomp's ``struct scmp_arg_cmp``."""

    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("datum_a", ctypes.c_uint64),
                ("datum_b", ctypes.c_uint64)]


def _load() -> ctypes.CDLL:
    try:
        lib = ctypes.CDLL(LIBRARY, use_errno=True)
    except OSError as e:
        raise BackendUnavailable(f"bwrap backend: cannot load {LIBRARY} to build the sandbox seccomp filter "
                                 f"({e})", FIX) from e
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    lib.seccomp_arch_native.restype = ctypes.c_uint32
    lib.seccomp_arch_add.argtypes = [ctypes.c_void_p, ctypes.c_uint32]
    lib.seccomp_attr_set.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint,
                                           ctypes.POINTER(_ArgCmp)]
    lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
    return lib


def _check(rc: int, what: str) -> None:
    if rc < 0:
        raise BackendUnavailable(f"bwrap backend: libseccomp failed to {what}: {os.strerror(-rc)}", FIX)


def _add_rules(lib: ctypes.CDLL, ctx: int) -> int:
    """Add every rule of RULES; returns the number of libseccomp rules added."""
    added = 0
    for rule in RULES:
        action = scmp_act_errno(rule.errno)
        bits = [1 << i for i in range(64) if rule.flag_mask >> i & 1]
        for name in rule.syscalls:
            nr = lib.seccomp_syscall_resolve_name(name.encode())
            if nr == NR_SCMP_ERROR:
                continue  # a syscall this libseccomp does not know: no architecture here can have it
            if not bits:
                _check(lib.seccomp_rule_add_array(ctx, action, nr, 0, None), f"deny {name}")
                added += 1
            for bit in bits:
                cmp = _ArgCmp(0, SCMP_CMP_MASKED_EQ, bit, bit)
                _check(lib.seccomp_rule_add_array(ctx, action, nr, 1, ctypes.byref(cmp)), f"deny {name}")
                added += 1
    return added


def compile_bpf() -> bytes:
    """The filter as a classic BPF program (what ``bwrap --seccomp`` and ``seccomp(2)`` take)."""
    lib = _load()
    ctx = lib.seccomp_init(SCMP_ACT_ALLOW)
    if not ctx:
        raise BackendUnavailable("bwrap backend: seccomp_init failed", FIX)
    try:
        _check(lib.seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, scmp_act_errno(errno.EPERM)),
               "set the bad-architecture action")
        if lib.seccomp_arch_native() == SCMP_ARCH_X86_64:
            for arch in (SCMP_ARCH_X86, SCMP_ARCH_X32):
                rc = lib.seccomp_arch_add(ctx, arch)
                if rc != -errno.EEXIST:
                    _check(rc, f"add architecture {arch:#x}")
        _add_rules(lib, ctx)
        fd = os.memfd_create("envfarm-seccomp", os.MFD_CLOEXEC)
        try:
            _check(lib.seccomp_export_bpf(ctx, fd), "export the filter")
            size = os.lseek(fd, 0, os.SEEK_END)
            return os.pread(fd, size, 0)
        finally:
            os.close(fd)
    finally:
        lib.seccomp_release(ctx)


F_ADD_SEALS = getattr(fcntl, "F_ADD_SEALS", 1033)
SEALS = 0x1 | 0x2 | 0x4 | 0x8  # F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE

_lock = threading.Lock()
_cached: tuple[int, int] | None = None  # (pid, sealed memfd holding the program)


def _program_fd() -> int:
    """The sealed memfd with the compiled program, made once per process (a forked child makes its own)."""
    global _cached
    with _lock:
        if _cached is None or _cached[0] != os.getpid():
            program = compile_bpf()
            fd = os.memfd_create("envfarm-seccomp", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
            os.write(fd, program)
            fcntl.fcntl(fd, F_ADD_SEALS, SEALS)
            _cached = (os.getpid(), fd)
        return _cached[1]


def ensure_filter() -> int:
    """Compile the program now (once per process); its size in bytes. BackendUnavailable if it cannot."""
    return os.fstat(_program_fd()).st_size


def seccomp_fd() -> int:
    """A new read-only descriptor of the program, at offset 0, for one bwrap; the caller closes it.

    Raises BackendUnavailable (with the fix) when libseccomp cannot be loaded or used."""
    return os.open(f"/proc/self/fd/{_program_fd()}", os.O_RDONLY | os.O_CLOEXEC)


__all__ = ["RULES", "Rule", "compile_bpf", "ensure_filter", "seccomp_fd"]
