"""The in-sandbox agent: one long-lived, stdlib-only Python process per sandbox.

The host starts it once (``python3 -c BOOT``, which reads this source from the pipe first: see
``agent_io.AGENT_BOOT``) and then talks to it with one JSON object per line in each direction. It stays
silent until the first request, so nothing can be lost in a half-read HTTP upgrade. Requests carry an
``id``; every answer repeats it.

    {"id": 1, "op": "ping"}
    {"id": 2, "op": "exec", "argv": [...], "cwd": "/workspace", "env": {...}, "timeout": 5, "max_output": N}
    {"id": 3, "op": "read", "path": "...", "offset": 0, "size": 4194304}
    {"id": 4, "op": "write", "path": "...", "data": "<base64>", "append": false, "mode": 420}
    {"id": 5, "op": "cancel"}          (only meaningful while an exec runs: kills it)

Answers: ``{"id": N, "ok": true, ...}`` or ``{"id": N, "ok": false, "kind": "FileNotFoundError",
"errno": 2, "error": "..."}``.

Every command runs in a new session with stdin from /dev/null. The agent is a child subreaper, so when a
command ends, times out or is cancelled, its whole process tree is killed, including daemons that called
``setsid``: no exec leaves a process behind. The backends run the agent as PID 1 of the sandbox's pid
namespace and it installs no signal handler, so commands (same uid) cannot signal it; it is also
non-dumpable, so they cannot reach its pipes through /proc. Output beyond ``max_output`` bytes
per stream is drained and dropped (``truncated``). A command that cannot start answers exit code 127,
like a shell.

This file must stay importable with nothing but the standard library of Python >= 3.9: it runs inside
images built from any Debian suite. It also stays small in memory, since thousands of idle sandboxes each
hold one: C modules instead of the ``json``, ``base64``, ``signal`` and ``ctypes`` packages (which pull in
re and enum), and the heap the start freed handed back (``trim``).
"""

import binascii
import os
import select
import sys
import time

try:  # the C module: the ``signal`` wrapper imports enum, a megabyte of every idle sandbox
    import _signal as signal
except ImportError:  # pragma: no cover - a Python without it
    import signal

ADDR_NO_RANDOMIZE = 0x0040000
MADV_MERGEABLE = 12
PR_SET_CHILD_SUBREAPER = 36
PR_SET_DUMPABLE = 4
SHARE_PAGES_ENV = "ENVFARM_SHARE_PAGES"
CHUNK = 1 << 16
DRAIN_AFTER_KILL_S = 2.0  # stop reading this long after a kill, even if a pipe stays open
DEFAULT_SIGNALS = (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT, signal.SIGTERM, signal.SIGCHLD)
EXIT_GRACE_S = 0.05  # after the command exits, wait this long for its pipes to close before killing
STDIN = 0


def libc_function(name, argtypes=None):
    """A libc function returning a C int, through ``_ctypes`` alone: the ``ctypes`` package costs every
    idle sandbox half a megabyte. Arguments are C ints, or ``argtypes`` letters ("P" pointer, "L" size_t,
    "i" int). None when there is no such function."""
    try:
        import _ctypes

        def c_type(letter):
            return type("C" + letter, (_ctypes._SimpleCData,), {"_type_": letter})

        class Function(_ctypes.CFuncPtr):
            _flags_ = _ctypes.FUNCFLAG_CDECL
            _restype_ = c_type("i")

        class Libc:
            _handle = _ctypes.dlopen(None)

        function = Function((name, Libc()))
        if argtypes:
            function.argtypes = tuple(c_type(letter) for letter in argtypes)
        return function
    except (ImportError, OSError, AttributeError, TypeError):  # pragma: no cover - non-Linux or no libc
        return None


def harden():
    """Child subreaper (orphans of commands come back to us and die with their exec) and non-dumpable
    (commands run as our uid: without this they could open /proc/<agent>/fd and write to our pipes)."""
    prctl = libc_function("prctl")
    if prctl is None:  # pragma: no cover - non-Linux or no libc
        return
    prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)


def trim():
    """Hand the heap the interpreter freed at start (compiling this file) back to the kernel: with
    thousands of idle sandboxes, each megabyte kept is gigabytes."""
    malloc_trim = libc_function("malloc_trim")
    if malloc_trim is not None:
        malloc_trim(0)


def share_pages():
    """Offer this process's pages to the kernel's same-page merging (KSM), when the host asked for it.

    The host asks by starting us with ``SHARE_PAGES_ENV`` set, a fixed hash seed (``PYTHONHASHSEED``) and
    address randomisation off (``setarch -R``): every agent of an image then boots into the same bytes at
    the same addresses, and where the host runs ksmd, thousands of idle agents hold one copy of the ~2.7
    MiB they have in common. Both settings are undone for the commands we run: the variables leave our
    environment, and randomisation comes back for every program we start (a persona is inherited)."""
    if os.environ.pop(SHARE_PAGES_ENV, None) is None:
        return
    os.environ.pop("PYTHONHASHSEED", None)
    personality = libc_function("personality")
    if personality is not None:
        persona = personality(-1)  # 0xffffffff: a query
        if persona != -1 and persona & ADDR_NO_RANDOMIZE:
            personality(persona & ~ADDR_NO_RANDOMIZE)
    madvise = libc_function("madvise", "PLi")
    if madvise is None:  # pragma: no cover - non-Linux or no libc
        return
    with open("/proc/self/maps") as maps:
        for line in maps:
            span, perms = line.split(None, 2)[:2]
            if perms[3] == "p" and not line.rstrip().endswith(("[vvar]", "[vdso]", "[vsyscall]")):
                start, end = (int(x, 16) for x in span.split("-"))
                madvise(start, end - start, MADV_MERGEABLE)  # a refusal leaves the pages private


# ------------------------------------------------------------------------------------------------- json


class JsonContext:
    """What ``_json.make_scanner`` reads from ``json.JSONDecoder``: the defaults of ``json.loads``."""

    strict = True
    object_hook = object_pairs_hook = None
    parse_float, parse_int = float, int
    parse_constant = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}.__getitem__
    memo = {}


class Json:
    """``json.loads``/``dumps`` on the C accelerator alone: the ``json`` package imports re and enum, a
    megabyte more in every idle sandbox. Falls back to the package where the accelerator is missing."""

    def __init__(self):
        try:
            import _json

            self.quote = _json.encode_basestring_ascii
            self.scan = _json.make_scanner(JsonContext())
        except (ImportError, AttributeError):  # pragma: no cover - a Python built without it
            import json

            self.quote = self.scan = None
            self.loads, self.dumps = json.loads, lambda obj: json.dumps(obj, separators=(",", ":"))

    def loads(self, line):
        text = line.decode("utf-8").strip(" \t\r\n")
        try:
            obj, end = self.scan(text, 0)
        except StopIteration as e:
            raise ValueError("Expecting value at char %s" % e.value) from None
        if end != len(text):
            raise ValueError("Extra data at char %d" % end)
        return obj

    def dumps(self, obj):
        """Compact JSON of the agent's answers: dicts, lists, str, int, float, bool and None."""
        if isinstance(obj, str):
            return self.quote(obj)
        if obj is None or obj is True or obj is False:
            return "null" if obj is None else "true" if obj else "false"
        if isinstance(obj, (int, float)):
            return repr(obj) if obj == obj and obj not in (float("inf"), float("-inf")) else "null"
        if isinstance(obj, dict):
            return "{%s}" % ",".join("%s:%s" % (self.quote(str(k)), self.dumps(v)) for k, v in obj.items())
        if isinstance(obj, (list, tuple)):
            return "[%s]" % ",".join(self.dumps(v) for v in obj)
        raise TypeError("cannot encode %s as JSON" % type(obj).__name__)


JSON = Json()


class Lines:
    """Newline-framed reads from a raw fd, usable both blocking and from a poll loop."""

    def __init__(self, fd):
        self.fd = fd
        self.buf = b""
        self.eof = False

    def pop(self):
        """One complete line from the buffer, or None."""
        idx = self.buf.find(b"\n")
        if idx < 0:
            return None
        line, self.buf = self.buf[:idx], self.buf[idx + 1 :]
        return line

    def fill(self):
        data = os.read(self.fd, 1 << 20)
        if not data:
            self.eof = True
        self.buf += data

    def next(self):
        """Block until a line arrives; None at end of input."""
        while True:
            line = self.pop()
            if line is not None:
                return line
            if self.eof:
                return None
            self.fill()


def send(obj):
    data = (JSON.dumps(obj) + "\n").encode()
    view = memoryview(data)
    while view:
        n = os.write(1, view)
        view = view[n:]


# ---------------------------------------------------------------------------------------------- processes


def proc_table():
    """{pid: ppid} of live (non-zombie) processes visible in /proc."""
    table = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name, "rb") as f:
                stat = f.read()
        except OSError:
            continue
        rest = stat[stat.rfind(b")") + 2 :].split()
        if rest and rest[0] != b"Z":
            table[int(name)] = int(rest[1])
    return table


def descendants(root):
    table = proc_table()
    children = {}
    for pid, ppid in table.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            found.append(child)
            todo.append(child)
    return found


REAPED = {}  # pid -> wait status of children reaped by reap(), so the command's own status is not lost


def reap():
    """Collect exited children; True while some child (hence some descendant, we are a subreaper) lives."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return False
        if pid == 0:
            return True
        REAPED[pid] = status


def wait_for(pid):
    """The wait status of our child ``pid``, even if reap() already collected it."""
    if pid in REAPED:
        return REAPED.pop(pid)
    try:
        return os.waitpid(pid, 0)[1]
    except ChildProcessError:
        return REAPED.pop(pid, -signal.SIGKILL & 0x7F)


def kill_tree(pgid):
    """SIGKILL the command's process group, then every remaining descendant of the agent."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        pass
    me = os.getpid()
    for _ in range(200):
        if not reap():
            return  # no child left: as a subreaper, that means no descendant either
        for pid in descendants(me):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.001)


def which(name, path):
    if "/" in name:
        return name
    for folder in path.split(":"):
        full = os.path.join(folder or ".", name)
        if os.access(full, os.X_OK) and not os.path.isdir(full):
            return full
    return None


def spawn(argv, cwd, env):
    """Start argv in a new session, stdin from /dev/null; returns (pid, stdout fd, stderr fd).

    posix_spawn (vfork underneath) costs a quarter of os.fork from a Python process. A program that
    cannot start raises OSError here; the caller turns it into exit code 127/126 like a shell."""
    exe = which(argv[0], env.get("PATH", os.defpath))
    if exe is None:
        raise FileNotFoundError(2, "command not found", argv[0])
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    here = os.getcwd()
    try:
        if cwd:
            try:
                os.chdir(cwd)
            except OSError as e:
                raise FileNotFoundError(e.errno, "cannot enter working directory: " + e.strerror, cwd) from e
        pid = os.posix_spawn(
            exe, argv, env, setsid=True, setsigdef=DEFAULT_SIGNALS,
            file_actions=[(os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
                          (os.POSIX_SPAWN_DUP2, out_w, 1), (os.POSIX_SPAWN_DUP2, err_w, 2)],
        )
    except BaseException:
        for fd in (out_r, err_r):
            os.close(fd)
        raise
    finally:
        os.close(out_w)
        os.close(err_w)
        os.chdir(here)
    return pid, out_r, err_r


class Capture:
    """Keeps the first ``cap`` bytes of a stream and counts the rest."""

    def __init__(self, cap):
        self.cap = cap
        self.parts = []
        self.kept = 0
        self.dropped = 0

    def add(self, data):
        room = self.cap - self.kept
        if room > 0:
            self.parts.append(data[:room])
            self.kept += min(room, len(data))
        self.dropped += max(0, len(data) - max(room, 0))

    def text(self):
        return b"".join(self.parts).decode("utf-8", "replace")


def exit_code(status):
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


class Running:
    """One command in flight: its pid, its output pipes and what has been captured so far."""

    def __init__(self, req):
        env = dict(os.environ)
        env.update(req.get("env") or {})
        cap = int(req.get("max_output") or 1 << 20)
        self.id = req["id"]
        self.start = time.monotonic()
        self.deadline = self.start + float(req.get("timeout") or 60)
        self.pid, out_r, err_r = spawn(req["argv"], req.get("cwd"), env)
        self.pidfd = os.pidfd_open(self.pid)
        self.out, self.err = Capture(cap), Capture(cap)
        self.open = {out_r: self.out, err_r: self.err}
        self.status = None
        self.timed_out = self.cancelled = False
        self.killed_at = self.exited_at = None

    def should_kill(self, now):
        if self.killed_at is not None:
            return False
        self.timed_out = self.timed_out or now >= self.deadline
        lingering = self.exited_at is not None and now - self.exited_at > EXIT_GRACE_S and bool(self.open)
        return self.timed_out or self.cancelled or lingering

    def done(self, now):
        if self.killed_at is not None and now - self.killed_at > DRAIN_AFTER_KILL_S:
            return True
        return not self.open and self.status is not None

    def wait_ms(self, now):
        if self.killed_at is not None or self.exited_at is not None:
            return 10
        return max(0, int((self.deadline - now) * 1000) + 1)

    def on_pipe(self, fd, poller):
        data = os.read(fd, CHUNK)
        if data:
            self.open[fd].add(data)
        else:
            poller.unregister(fd)
            os.close(fd)
            del self.open[fd]

    def on_exit(self, poller):
        poller.unregister(self.pidfd)
        self.status = wait_for(self.pid)
        self.exited_at = time.monotonic()

    def close(self):
        kill_tree(self.pid)
        for fd in self.open:
            os.close(fd)
        os.close(self.pidfd)
        if self.status is None:  # only after a kill that outlived the drain window
            self.status = wait_for(self.pid)
        REAPED.clear()

    def result(self):
        code = -signal.SIGKILL if self.timed_out or self.cancelled else exit_code(self.status)
        return {
            "exit_code": code,
            "stdout": self.out.text(),
            "stderr": self.err.text(),
            "duration": time.monotonic() - self.start,
            "timed_out": self.timed_out,
            "cancelled": self.cancelled,
            "truncated": bool(self.out.dropped or self.err.dropped),
        }


def run_exec(req, lines):
    try:
        run = Running(req)
    except OSError as e:
        code = 127 if isinstance(e, FileNotFoundError) else 126
        msg = "envfarm-agent: %s: %s\n" % (e.filename or req["argv"][0], e.strerror or e)
        return {"exit_code": code, "stdout": "", "stderr": msg, "duration": 0.0,
                "timed_out": False, "cancelled": False, "truncated": False}
    poller = select.poll()
    for fd in (*run.open, run.pidfd, STDIN):
        poller.register(fd, select.POLLIN)
    try:
        while True:
            now = time.monotonic()
            if run.should_kill(now):
                kill_tree(run.pid)
                run.killed_at = now
            if run.done(now):
                break
            wait_ms = run.wait_ms(now)
            for fd, _ in poller.poll(wait_ms):
                if fd == run.pidfd:
                    run.on_exit(poller)
                elif fd == STDIN:
                    run.cancelled = read_control(lines, run.id, poller) or run.cancelled
                elif fd in run.open:
                    run.on_pipe(fd, poller)
    finally:
        run.close()
    return run.result()


def read_control(lines, current_id, poller):
    """Read stdin while a command runs; True when a cancel for it arrived."""
    lines.fill()
    if lines.eof:
        poller.unregister(STDIN)
        return True
    cancel = False
    kept = []
    while True:
        line = lines.pop()
        if line is None:
            break
        try:
            msg = JSON.loads(line)
        except ValueError:
            continue
        if msg.get("op") == "cancel" and msg.get("target") in (None, current_id):
            cancel = True
        elif msg.get("op") != "cancel":
            kept.append(line)
    lines.buf = b"".join(k + b"\n" for k in kept) + lines.buf
    return cancel


# ------------------------------------------------------------------------------------------------- files


def run_read(req, _lines):
    with open(req["path"], "rb") as f:
        size = os.fstat(f.fileno()).st_size
        f.seek(int(req.get("offset") or 0))
        data = f.read(int(req.get("size") or 1 << 22))
    end = int(req.get("offset") or 0) + len(data)
    return {"data": binascii.b2a_base64(data, newline=False).decode(), "size": size, "eof": end >= size}


def run_write(req, _lines):
    path = req["path"]
    parent = os.path.dirname(path)
    if parent:
        os.makedirs(parent, exist_ok=True)
    data = binascii.a2b_base64(req.get("data") or "")
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if req.get("append") else os.O_TRUNC)
    fd = os.open(path, flags, int(req.get("mode") or 0o644))
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)
    return {"written": len(data)}


def run_ping(_req, _lines):
    return {"pid": os.getpid(), "uid": os.getuid(), "python": sys.version.split()[0]}


OPS = {"ping": run_ping, "exec": run_exec, "read": run_read, "write": run_write}


def handle(req, lines):
    op = OPS.get(req.get("op"))
    if op is None:
        return {"ok": False, "kind": "ValueError", "error": "unknown op %r" % req.get("op")}
    try:
        out = op(req, lines)
    except OSError as e:
        return {"ok": False, "kind": type(e).__name__, "errno": e.errno, "error": str(e)}
    except Exception as e:
        return {"ok": False, "kind": type(e).__name__, "error": str(e)}
    out["ok"] = True
    return out


def main():
    harden()
    share_pages()
    trim()
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # an inherited SIG_IGN would auto-reap our children
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    # No handler for any signal: as PID 1 of the sandbox's pid namespace (both backends start us so) the
    # kernel then drops every signal sent from inside, SIGKILL included: `kill -9 -1` or `kill -INT 1` in a
    # command cannot take the agent down and turn a failing episode into an infrastructure error.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    lines = Lines(STDIN)
    while True:
        line = lines.next()
        if line is None:
            return
        try:
            req = JSON.loads(line)
        except ValueError as e:
            send({"id": None, "ok": False, "kind": "ValueError", "error": "bad request: %s" % e})
            continue
        if req.get("op") == "cancel":
            continue  # the command it targeted already finished
        out = handle(req, lines)
        out["id"] = req.get("id")
        send(out)


if __name__ == "__main__":
    main()
