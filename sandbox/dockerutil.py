"""The one place envfarm opens a Docker client and maps "no daemon" to :class:`BackendUnavailable`.

Every module that talks to Docker (the image builder, the docker backend, ``envfarm doctor``) calls
:func:`client`; none calls ``docker.from_env()`` itself.
"""

from __future__ import annotations

import logging
import threading

import docker
import requests
from docker.errors import DockerException
from docker.models.images import Image

from envfarm.errors import BackendUnavailable, ImageError

log = logging.getLogger(__name__)

NO_DAEMON = "the Docker daemon does not answer"
FIX = "run `make setup`"
HTTP_TIMEOUT_S = 120  # per HTTP request to the daemon; long builds and imports pass their own timeout

_lock = threading.Lock()
_client: docker.DockerClient | None = None


def client() -> docker.DockerClient:
    """The shared Docker client (created and pinged once, then cached).

    Raises :class:`BackendUnavailable` when the daemon cannot be reached; the next call tries again.
    """
    global _client
    with _lock:
        if _client is None:
            try:
                fresh = docker.from_env(timeout=HTTP_TIMEOUT_S)
                fresh.ping()
            except (DockerException, requests.RequestException) as e:
                log.debug("docker.from_env failed: %s", e)
                raise BackendUnavailable(NO_DAEMON, FIX) from e
            _client = fresh
        return _client


def ping() -> bool:
    """True when the daemon answers now (never raises). A failed ping drops the cached client."""
    try:
        return bool(client().ping())
    except (BackendUnavailable, DockerException, requests.RequestException) as e:
        log.debug("docker ping failed: %s", e)
        reset()
        return False


def reset() -> None:
    """Forget the cached client (after the daemon restarted, or in tests)."""
    global _client
    with _lock:
        if _client is not None:
            try:
                _client.close()
            except Exception as e:  # closing a dead client must never mask the caller's error
                log.debug("closing docker client: %s", e)
        _client = None


def get_image(ref: str) -> Image | None:
    """The docker image ``ref``, or None when it does not exist; ImageError when the daemon fails."""
    try:
        return client().images.get(ref)
    except docker.errors.ImageNotFound:
        return None
    except (DockerException, requests.RequestException) as e:
        raise ImageError(f"cannot inspect docker image {ref}: {e}") from e
