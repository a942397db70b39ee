"""File transfer between the host and a sandbox, built on the agent's read/write ops and ``tar``."""

from __future__ import annotations

import asyncio
import base64
import io
import posixpath
import tarfile
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envfarm.errors import ConfigError, SandboxFileError

from .values import TIMEOUTS, ExecResult

CHUNK = 4 << 20  # bytes per agent read/write request


class Transfers:
    """Mixin for Sandbox: read_file, write_file, upload, download."""

    workdir: str

    if TYPE_CHECKING:  # provided by Sandbox

        async def _call(self, op: str, deadline_s: float, **fields: Any) -> dict[str, Any]: ...

        async def exec(self, cmd: Any, timeout_s: float | None = None, cwd: str | None = None,
                       env: Any = None, check: bool = False) -> ExecResult: ...

    def _abs(self, path: str) -> str:
        return path if posixpath.isabs(path) else posixpath.join(self.workdir, path)

    async def read_file(self, path: str) -> bytes:
        """The bytes of file ``path`` (relative paths are under the workspace)."""
        path, parts, offset = self._abs(path), [], 0
        while True:
            reply = await self._call("read", TIMEOUTS.file_op_s, path=path, offset=offset, size=CHUNK)
            data = base64.b64decode(reply["data"])
            parts.append(data)
            offset += len(data)
            if reply["eof"] or not data:
                return b"".join(parts)

    async def write_file(self, path: str, data: bytes | str, mode: int = 0o644) -> None:
        """Create or replace file ``path`` (parents are created) with ``data``."""
        raw = data.encode() if isinstance(data, str) else bytes(data)
        path = self._abs(path)
        for start in range(0, max(len(raw), 1), CHUNK):
            chunk = base64.b64encode(raw[start : start + CHUNK]).decode()
            await self._call("write", TIMEOUTS.file_op_s, path=path, data=chunk, append=start > 0, mode=mode)

    async def upload(self, local: str | Path, dest: str) -> None:
        """Copy a local file or folder to ``dest`` inside the sandbox (a folder's contents go into dest)."""
        src = Path(local)
        dest = self._abs(dest)
        kind, payload, mode = await asyncio.to_thread(_pack, src)
        if kind == "file":
            await self.write_file(dest, payload, mode=mode)
            return
        archive = payload
        tmp = f"/tmp/.envfarm-upload-{uuid.uuid4().hex}.tar"
        await self.write_file(tmp, archive)
        await self._run_checked(f"mkdir -p {_q(dest)} && tar -x -f {tmp} -C {_q(dest)} --no-same-owner"
                                f" --no-same-permissions; rc=$?; rm -f {tmp}; exit $rc", "upload")

    async def download(self, path: str, local_dest: str | Path) -> Path:
        """Copy file or folder ``path`` from the sandbox into the local folder ``local_dest``.

        Returns the local path of the copy (``local_dest/<basename of path>``)."""
        path = self._abs(path).rstrip("/") or "/"
        tmp = f"/tmp/.envfarm-download-{uuid.uuid4().hex}.tar"
        parent, name = posixpath.split(path)
        await self._run_checked(f"tar -c -f {tmp} -C {_q(parent or '/')} {_q(name)}", "download")
        try:
            archive = await self.read_file(tmp)
        finally:
            await self.exec(["rm", "-f", tmp])
        out = Path(local_dest)
        await asyncio.to_thread(_untar, archive, out)
        return out.joinpath(name)

    async def _run_checked(self, script: str, what: str) -> None:
        res = await self.exec(script, timeout_s=TIMEOUTS.file_op_s)
        if res.exit_code != 0:
            raise SandboxFileError(0, f"{what} failed in {self}: {res.stderr.strip()[-500:]}")


def _q(path: str) -> str:
    return "'" + path.replace("'", "'\\''") + "'"


def _pack(src: Path) -> tuple[str, bytes, int]:
    """("file", bytes, mode) for a file, ("dir", tar bytes, 0) for a folder."""
    if not src.exists():
        raise ConfigError(f"upload: local path {src} does not exist")
    if src.is_file():
        return "file", src.read_bytes(), src.stat().st_mode & 0o777
    return "dir", _tar_folder(src), 0


def _tar_folder(src: Path) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for child in sorted(src.iterdir()):
            tar.add(child, arcname=child.name)
    return buf.getvalue()


def _untar(archive: bytes, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r") as tar:
        tar.extractall(dest, filter="data")
