"""Copy-on-write writable paths: host-side overlayfs stacks of tmpfs layers, shared by forked sandboxes.

Every writable path of a sandbox (``/workspace``, ``/tmp``, ``/dev/shm``) is an overlay mounted on the host,
under the layer store (``$ENVFARM_HOME/layers``, a shared mount), and bind-mounted into the sandbox:

    layers/l/<layer>/u, w        one tmpfs per layer: u holds the files, w is overlayfs' work folder
    layers/s/<sandbox>/<path>    the overlay: lowerdir = frozen layers (newest first), upperdir = a live layer

``/dev/shm`` is no overlay but its live tmpfs itself (``PathSpec.copied``: old glibc wants a tmpfs
there), and a fork copies its files into the child's own.

A live layer (the upper) is a tmpfs of the path's cap (``Limits.disk_mb``, ``shm_mb``): what a sandbox
writes is bounded by it, and only what it writes costs memory. A fork freezes the parent's upper (the
tmpfs is remounted read-only, so nothing can change it again), and both the parent and the child get a
fresh empty upper over the same frozen layers. The parent's new overlay is mounted on top of its old one
on the host; the store is a shared mount and the sandbox's bind a slave of it, so the new overlay
propagates into the running sandbox on top of its path (commands resolve the path afresh; the agent has
no file open between commands). A parent that wrote nothing since its last fork is not frozen again, so
siblings share one stack. A stack deeper than ``MAX_DEPTH`` is flattened: its frozen layers are copied,
through a read-only overlay of them, into one fresh layer.

Layers are counted: one is unmounted when the last sandbox that used it closes (a parent holds the layers
of its earlier, hidden overlays until it closes). Names carry the owner pid, so ``gc`` removes the
leftovers of dead owners. Everything here is blocking (mount syscalls, a ``cp`` when flattening): callers
run it in a thread.
"""

from __future__ import annotations

import ctypes
import errno
import itertools
import json
import logging
import os
import shutil
import subprocess
import threading
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from envfarm.errors import ForkError

from .cgroups import pid_alive

log = logging.getLogger(__name__)

MAX_DEPTH = 8
"""Frozen layers one overlay may stack; a fork past it flattens them into one."""
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC, MS_SHARED = 1, 2, 4, 32, 4096, 16384, 1 << 20
MNT_DETACH = 2
META = "meta.json"
OVERLAY_OPTS = "redirect_dir=on,index=off,metacopy=off"  # redirect_dir: renaming a lower folder works
_LAYER_NUMBERS = itertools.count(1)
_libc = ctypes.CDLL(None, use_errno=True)


def _mount(source: str, target: Path, fstype: str | None, flags: int, data: str | None = None) -> None:
    rc = _libc.mount(source.encode(), str(target).encode(), fstype.encode() if fstype else None,
                     ctypes.c_ulong(flags), data.encode() if data else None)
    if rc != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"mount {fstype or 'flags'} on {target}: {os.strerror(e)}")


def _umount(target: Path) -> bool:
    """Detach the topmost mount at ``target``; False when nothing is mounted there."""
    if _libc.umount2(str(target).encode(), MNT_DETACH) == 0:
        return True
    e = ctypes.get_errno()
    if e in (errno.EINVAL, errno.ENOENT):
        return False
    raise OSError(e, f"umount {target}: {os.strerror(e)}")


def _is_mount(path: Path) -> bool:
    """Whether a mount sits at ``path`` (a bind of a folder onto itself included, unlike os.path.ismount)."""
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == str(path) for line in f)


@dataclass(frozen=True)
class PathSpec:
    """One writable path of a sandbox, as the host sees its root folder."""

    name: str
    """Short name (the mount point's name in the store): workspace, tmp, shm."""
    size_mb: int
    """Cap of what the sandbox may write there."""
    uid: int
    gid: int
    mode: int
    copied: bool = False
    """The live tmpfs itself is bound at the path (no overlay), and a fork copies its files into the
    child's: for a path whose file system must be tmpfs (glibc before 2.34 keeps POSIX semaphores and
    shared memory only where ``statfs`` says tmpfs, else it tries the first tmpfs it finds, ``/dev``)."""


@dataclass(frozen=True)
class Layer:
    """One tmpfs of the store; ``data`` holds the files."""

    path: Path

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def data(self) -> Path:
        return self.path / "u"

    @property
    def work(self) -> Path:
        return self.path / "w"


@dataclass(frozen=True)
class Stack:
    """One writable path of one sandbox: frozen lowers (newest first) under a live upper."""

    spec: PathSpec
    lowers: tuple[Layer, ...]
    upper: Layer
    clean_ctime: int
    """ctime of the upper's root when it was made: unchanged and empty means nothing was written."""

    def dirty(self) -> bool:
        st = os.stat(self.upper.data)
        return st.st_ctime_ns != self.clean_ctime or any(os.scandir(self.upper.data))


@dataclass
class Files:
    """The writable paths of one sandbox in the store."""

    sandbox_id: str
    folder: Path
    stacks: dict[str, Stack]
    held: set[Layer]
    """Every layer this sandbox's overlays ever used (hidden ones too): released when it closes."""

    def mount_point(self, name: str) -> Path:
        return self.folder / name


class LayerStore:
    """The host folder holding every layer and overlay of this host's sandboxes."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._refs: dict[Layer, int] = {}
        self._lock = threading.RLock()  # counts, and whole create / fork / release steps: a sandbox
        # released while a child of it is made must not drop layers the child is about to hold
        self._ready = False
        self.layers, self.boxes, self.empty = root / "l", root / "s", root / "empty"

    def ensure(self) -> None:
        """Make the store a shared mount (once), so overlays mounted later reach the sandboxes' binds."""
        if self._ready:
            return
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o711)  # the sandbox host uid binds paths below it
        if not _is_mount(self.root):
            _mount(str(self.root), self.root, None, MS_BIND)
        _mount("none", self.root, None, MS_SHARED)
        for sub in (self.layers, self.boxes, self.empty):
            sub.mkdir(mode=0o711 if sub != self.empty else 0o755, exist_ok=True)
        self._ready = True

    # -------------------------------------------------------------------------------------- sandboxes

    def create(self, sandbox_id: str, specs: list[PathSpec],
               lowers: Mapping[str, tuple[Layer, ...]] | None = None,
               meta: Mapping[str, str] | None = None) -> Files:
        """Overlays for a new sandbox: over ``lowers`` (a fork) or over nothing; ``meta`` is what
        ``listing`` shows of it (backend, image, parent, owner)."""
        with self._lock:
            return self._create(sandbox_id, specs, lowers, meta)

    def _create(self, sandbox_id: str, specs: list[PathSpec], lowers: Mapping[str, tuple[Layer, ...]] | None,
                meta: Mapping[str, str] | None) -> Files:
        self.ensure()
        files = Files(sandbox_id, self.boxes / sandbox_id, {}, set())
        files.folder.mkdir(mode=0o711)
        try:
            (files.folder / META).write_text(json.dumps({"id": sandbox_id, **(meta or {})}))
            for spec in specs:
                below = (lowers or {}).get(spec.name, ())
                if spec.copied:
                    stack = self._copied_stack(files, spec, below)
                else:
                    self._hold(files, below)
                    stack = self._fresh_stack(files, spec, below)
                self._mount_stack(files, stack)
        except BaseException:
            self.release(files)
            raise
        return files

    def fork(self, parent: Files) -> dict[str, tuple[Layer, ...]]:
        """Freeze what ``parent`` wrote since its last fork; returns the lowers of a child, per path.

        The parent goes on over the same frozen layers with fresh uppers (mounted over its old overlays)."""
        with self._lock:
            if not parent.stacks:
                raise ForkError(f"sandbox {parent.sandbox_id} was closed")
            out: dict[str, tuple[Layer, ...]] = {}
            for name, stack in list(parent.stacks.items()):
                if stack.spec.copied:  # the child copies the live files (``_copied_stack``)
                    out[name] = (stack.upper,)
                    continue
                if stack.dirty():
                    stack = self._refreeze(parent, stack)
                out[name] = stack.lowers
            return out

    def fork_into(self, parent: Files, child_id: str, specs: list[PathSpec],
                  meta: Mapping[str, str] | None = None) -> Files:
        """``fork`` then ``create`` of the child over the lowers, as one step."""
        with self._lock:
            return self._create(child_id, specs, self.fork(parent), meta)

    def release(self, files: Files) -> None:
        """Unmount a sandbox's overlays and drop its layers. Idempotent."""
        with self._lock:
            _remove_box(files.folder)
            files.stacks.clear()
            held, files.held = files.held, set()
            for layer in held:
                self._drop(layer)

    # ----------------------------------------------------------------------------------------- layers

    def _fresh_stack(self, files: Files, spec: PathSpec, lowers: tuple[Layer, ...]) -> Stack:
        upper = self._new_layer(spec.size_mb, files)
        root = upper.data
        top = lowers[0].data if lowers else None
        st = os.stat(top) if top else None
        os.chown(root, st.st_uid if st else spec.uid, st.st_gid if st else spec.gid)
        os.chmod(root, (st.st_mode & 0o7777) if st else spec.mode)
        return Stack(spec, lowers, upper, os.stat(root).st_ctime_ns)

    def _copied_stack(self, files: Files, spec: PathSpec, source: tuple[Layer, ...]) -> Stack:
        """A fresh tmpfs for a ``copied`` path, holding a copy of ``source``'s files (a parent's live
        layer, when forking)."""
        stack = replace(self._fresh_stack(files, spec, source), lowers=())
        if source:
            _copy(source[0].data, stack.upper.data, f"copying {spec.name} into {files.sandbox_id}")
        return stack

    def _mount_stack(self, files: Files, stack: Stack) -> None:
        point = files.mount_point(stack.spec.name)
        point.mkdir(mode=0o755, exist_ok=True)
        if stack.spec.copied:
            _mount(str(stack.upper.data), point, None, MS_BIND)
            _mount("none", point, None, MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV)
            files.stacks[stack.spec.name] = stack
            return
        below = ":".join(str(layer.data) for layer in stack.lowers) or str(self.empty)
        opts = f"lowerdir={below},upperdir={stack.upper.data},workdir={stack.upper.work},{OVERLAY_OPTS}"
        _mount("overlay", point, "overlay", MS_NOSUID | MS_NODEV, opts)
        # the mount itself may mark the upper's root (xattrs): clean is how it is now
        files.stacks[stack.spec.name] = replace(stack, clean_ctime=os.stat(stack.upper.data).st_ctime_ns)

    def _refreeze(self, files: Files, stack: Stack) -> Stack:
        """Freeze ``stack``'s upper as its newest lower; mount a fresh upper over it, on top."""
        try:
            _mount("none", stack.upper.path, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
        except OSError as e:
            raise ForkError(f"cannot freeze {stack.spec.name} of sandbox {files.sandbox_id}: a process "
                            f"still writes to it ({e})") from e
        try:
            lowers = (stack.upper, *stack.lowers)
            if len(lowers) > MAX_DEPTH:
                lowers = (self._flatten(files, lowers),)
            new = self._fresh_stack(files, stack.spec, lowers)
            self._hold(files, lowers)
            self._mount_stack(files, new)
        except BaseException:  # the parent keeps writing where it did
            _mount("none", stack.upper.path, None, MS_REMOUNT | MS_NOSUID | MS_NODEV)
            raise
        return files.stacks[new.spec.name]

    def _flatten(self, files: Files, lowers: tuple[Layer, ...]) -> Layer:
        """One frozen layer holding what ``lowers`` show together (whiteouts applied)."""
        size = sum(shutil.disk_usage(layer.path).used for layer in lowers) >> 20
        flat = self._new_layer(size + 16, files)
        view = flat.path / "view"
        view.mkdir()
        _mount("overlay", view, "overlay", MS_RDONLY | MS_NOSUID | MS_NODEV,
               "lowerdir=" + ":".join(str(layer.data) for layer in lowers))
        try:
            os.rmdir(flat.data)
            _copy(view, flat.data, f"flattening the layers of {files.sandbox_id}")
        finally:
            _umount(view)
            view.rmdir()
        _mount("none", flat.path, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
        return flat

    def _new_layer(self, size_mb: int, files: Files) -> Layer:
        layer = Layer(self.layers / f"{os.getpid()}.{next(_LAYER_NUMBERS)}")
        layer.path.mkdir(mode=0o711)
        try:
            _mount("tmpfs", layer.path, "tmpfs", MS_NOSUID | MS_NODEV, f"size={max(1, size_mb)}m,mode=0711")
            layer.data.mkdir()
            layer.work.mkdir(mode=0o700)
        except BaseException:
            _umount(layer.path)
            layer.path.rmdir()
            raise
        self._hold(files, (layer,))
        return layer

    def _hold(self, files: Files, layers: tuple[Layer, ...]) -> None:
        with self._lock:
            for layer in layers:
                if layer not in files.held:
                    files.held.add(layer)
                    self._refs[layer] = self._refs.get(layer, 0) + 1

    def _drop(self, layer: Layer) -> None:
        with self._lock:
            left = self._refs.get(layer, 1) - 1
            if left > 0:
                self._refs[layer] = left
                return
            self._refs.pop(layer, None)
        _remove_layer(layer.path)

    def listing(self) -> list[dict[str, str]]:
        """What ``create`` was told of every sandbox in the store (this host's, any owner)."""
        out = []
        for box in sorted(self.boxes.iterdir()) if self.boxes.is_dir() else ():
            try:
                out.append(json.loads((box / META).read_text()))
            except (OSError, ValueError):
                out.append({"id": box.name})
        return out

    # --------------------------------------------------------------------------------------------- gc

    def gc(self, all_runs: bool = False, owner: int | None = None) -> int:
        """Remove the overlays and layers of dead owners (of every owner with ``all_runs``, of ``owner``
        alone when given: a process at exit); returns how many sandboxes' folders went. Layers of live
        owners are theirs to drop."""
        removed = 0
        for folder, remove in ((self.boxes, _remove_box), (self.layers, _remove_layer)):
            for entry in sorted(folder.iterdir()) if folder.is_dir() else ():
                pid = owner_pid(entry.name, layer=folder == self.layers)
                if pid is None or (pid != owner if owner is not None else not all_runs and pid_alive(pid)):
                    continue
                remove(entry)
                removed += folder == self.boxes
        if all_runs:
            self._refs.clear()
        return removed


def owner_pid(name: str, layer: bool) -> int | None:
    """Owner pid in a store entry's name: ``<pid>.<n>`` (a layer) or ``<run>-<pid hex>-<n>`` (a sandbox)."""
    try:
        if layer:
            return int(name.split(".", 1)[0])
        return int(name.rsplit("-", 2)[-2], 16)
    except (ValueError, IndexError):
        return None


def _copy(source: Path, target: Path, what: str) -> None:
    """``source``'s files into ``target`` with owners, modes and links as they are (``cp -a``)."""
    try:
        subprocess.run(["cp", "-a", "--", f"{source}/.", str(target)], check=True, capture_output=True)
    except subprocess.CalledProcessError as e:
        raise ForkError(f"{what} failed: {e.stderr.decode(errors='replace')[-500:]}") from e


def _remove_layer(path: Path) -> None:
    while _umount(path):
        pass
    shutil.rmtree(path, ignore_errors=True)


def _remove_box(folder: Path) -> None:
    """Unmount every overlay stacked on a sandbox's mount points, then remove its folder."""
    for point in folder.iterdir() if folder.is_dir() else ():
        while point.name != META and _umount(point):
            pass
    shutil.rmtree(folder, ignore_errors=True)


__all__ = ["MAX_DEPTH", "Files", "Layer", "LayerStore", "PathSpec", "Stack", "owner_pid"]
