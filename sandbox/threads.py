"""Blocking calls in a thread that a cancellation of their caller waits for.

A cancelled ``await asyncio.to_thread(f)`` returns at once while ``f`` runs on. The cleanup that follows
(remove the container by name, unmount the sandbox's layers) can then run before ``f`` has made what it
cleans up: a daemon that answers a create late makes the container after "no such container", and that
container outlives its sandbox. ``to_the_end`` holds the cancellation until ``f`` has returned, so the
cleanup sees all that ``f`` made. Use it for calls that make something; a call that only reads needs none.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any, TypeVar

T = TypeVar("T")


async def to_the_end(fn: Callable[..., T], *args: Any, executor: Executor | None = None) -> T:
    """``fn(*args)`` in ``executor`` (the loop's default: None); a cancellation takes effect once it ends."""
    future = asyncio.get_running_loop().run_in_executor(executor, fn, *args)
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        await asyncio.wait([future])
        raise
