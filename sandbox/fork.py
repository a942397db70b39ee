"""Copying one live sandbox's writable paths into another: ``Sandbox.fork`` on bwrap and docker.

A sandbox's writable state lives in tmpfs mounts inside its own mount namespace (``/workspace``, ``/tmp``,
``/dev/shm``; the root is read-only on both backends), sized by ``Limits``. A fork starts a fresh sandbox
with the same image and limits, then streams a tar of the parent's writable paths into it, from the host:

    cd /proc/<parent pid>/root; tar -c <what workspace, tmp, dev/shm hold>   host root, the parent's view
      | nsenter -t <child pid> -U -m -S 1000 -G 1000 tar -x -p -C /          the child's namespaces, uid 1000

(bwrap: the pids are the agents; docker: each container's PID 1.) The reading tar runs as host root, so it
reads files the parent made unreadable (mode 000), and it never follows a symlink (tar archives links as
links). The writing tar runs inside the child's user and mount namespaces as the agent uid, without
capabilities: it cannot write anywhere the child's own processes could not, the child's tmpfs size caps
hold, and every file ends up owned by the agent as in the parent (the mount points themselves keep the
child's modes: docker's /tmp belongs to root). The child's tmpfs are its own, so the
two sandboxes are independent from then on, deletions included. Processes are not copied: the child's
agent is fresh. The copy runs between two commands of the parent, when nothing runs in it (the agent kills
each command's whole tree), so it is a consistent snapshot; should a process outlive its command and write
meanwhile, the child gets the file as tar read it, and the fork does not fail. The copy costs
what the parent holds: tmpfs cannot share pages copy-on-write. GNU tar opens every member relative to its
folder with O_NOFOLLOW, so a parent racing to swap a folder for a symlink cannot point the host-side read
outside its own tree.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from envfarm.config import AGENT_UID
from envfarm.errors import ForkError, tail

WRITABLE = ("workspace", "tmp", "dev/shm")
"""The writable paths of a sandbox (tmpfs mounts on both backends), relative to its root."""

COPY_SCRIPT = r"""src=$1 dst=$2 uid=$3; shift 3
userns=-U  # a container without a user namespace of its own shares ours: setns into it would fail
[ "$(readlink "/proc/$dst/ns/user")" = "$(readlink /proc/self/ns/user)" ] && userns=
cd "/proc/$src/root" || exit 1  # the parent's root; members: what each mount point holds, not the mount
find "$@" -mindepth 1 -maxdepth 1 -print0 \
  | tar -c --null -T - --warning=no-file-changed --warning=no-file-removed \
  | nsenter -t "$dst" $userns -m -S "$uid" -G "$uid" -- tar -x -p -C /
st=("${PIPESTATUS[@]}")  # 1 from find or tar -c: a file changed or vanished while read
[ "${st[0]}" -le 1 ] && [ "${st[1]}" -le 1 ] && [ "${st[2]}" = 0 ] && exit 0
echo "envfarm: copy failed: find ${st[0]}, tar -c ${st[1]}, tar -x ${st[2]}" >&2
exit 1
"""


def bwrap_agent_pid(outer_pid: int) -> int:
    """Host pid of the agent (PID 1 of the sandbox), the only child of the outer bwrap process."""
    try:
        children = Path(f"/proc/{outer_pid}/task/{outer_pid}/children").read_text().split()
    except OSError as e:
        raise ForkError(f"bwrap process {outer_pid} is gone: {e}") from e
    if len(children) != 1:
        raise ForkError(f"bwrap process {outer_pid} has {len(children)} children, expected the agent alone")
    return int(children[0])


async def copy_writable(src_pid: int, dst_pid: int, what: str) -> None:
    """Stream the writable paths of the sandbox whose agent is ``src_pid`` into the one of ``dst_pid``."""
    proc = await asyncio.create_subprocess_exec(
        "/bin/bash", "-c", COPY_SCRIPT, "envfarm-fork", str(src_pid), str(dst_pid), str(AGENT_UID), *WRITABLE,
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}, cwd="/",
    )
    try:
        _, err = await proc.communicate()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    if proc.returncode != 0:
        raise ForkError(f"copying the files of {what} failed ({proc.returncode}): "
                        f"{tail(err.decode(errors='replace'))}")


__all__ = ["WRITABLE", "bwrap_agent_pid", "copy_writable"]
