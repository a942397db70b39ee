"""Cancel a sandbox start while a blocking call of it runs in its thread."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any

import pytest


async def cancel_midway(start: Coroutine[Any, Any, Any], began: threading.Event,
                        ended: threading.Event) -> None:
    """Run ``start``, cancel it once ``began`` is set (the call is under way), expect the cancellation,
    then wait until ``ended`` (the call returned: whatever it made exists or was cleaned up)."""
    task = asyncio.ensure_future(start)
    assert await asyncio.to_thread(began.wait, 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await asyncio.to_thread(ended.wait, 10)
