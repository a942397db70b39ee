"""Making env instances for the farm from a registered id, all leasing from one registry of sandbox pools."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium
from gymnasium.envs.registration import load_env_creator

from envfarm.envs.core import AgentEnv
from envfarm.envs.registration import resolve
from envfarm.errors import ConfigError
from envfarm.sandbox import Backend, Limits
from envfarm.sandbox.pool import Pools, SandboxPool


def env_class(env_id: str) -> type[AgentEnv[Any]]:
    """The AgentEnv class registered as ``env_id``; ConfigError (with a suggestion) otherwise."""
    import envfarm.envs
    from envfarm.envs import env_info

    env_id = resolve(env_id)[0]  # a scheme id (openenv:URL) names a registered env
    env_info(env_id)
    spec = gymnasium.spec(env_id)
    entry = spec.entry_point
    cls = load_env_creator(entry) if isinstance(entry, str) else entry
    if not (isinstance(cls, type) and issubclass(cls, AgentEnv)):
        raise ConfigError(f"{env_id} ({envfarm.envs.env_info(env_id).entry_point}) is not an envfarm "
                          "AgentEnv; the farm needs its async areset/astep")
    return cls


def env_defaults(env_id: str, env_kwargs: Mapping[str, Any]) -> tuple[str | None, Limits]:
    """(image, limits) the env's sandboxes use, so the shared pool starts the right ones."""
    cls = env_class(env_id)
    env_id, env_kwargs = resolve(env_id, env_kwargs)
    kwargs = {**gymnasium.spec(env_id).kwargs, **env_kwargs}
    image = kwargs.get("image", cls.default_image)
    limits = kwargs.get("limits") or cls.default_limits
    return image, limits


async def start_pools(env_id: str, env_kwargs: Mapping[str, Any], backend: Backend, *, warm: int,
                      max_live: int | None, prefill: bool = False) -> tuple[Pools, SandboxPool | None]:
    """The pool registry every env of ``env_id`` is handed (``pools=``), and the warm pool when there is one.

    For a ``"shared"`` family the backend is checked and the pool of the env's image and limits starts with
    ``warm`` sandboxes and is leased once, so a missing image or a broken backend fails here, before any
    episode; ``prefill`` waits until it is full. A ``"per_task"`` family (CodeRepair) gets pools made on
    demand with nothing kept warm; a ``"none"`` family (openenv:URL) starts nothing. The caller closes the
    registry; ``backend`` stays the caller's to close."""
    cls = env_class(env_id)
    pools = Pools([backend], size=0, max_live=max_live)
    if cls.sandboxes == "none":
        return pools, None
    await backend.check()
    if cls.sandboxes == "per_task":
        return pools, None
    image, limits = env_defaults(env_id, env_kwargs)
    pool = pools.get(backend, image, limits)
    pool.size = warm
    try:
        await pool.start()
        async with pool.lease():
            pass
        if prefill:
            await pool.wait_filled()
    except BaseException:
        await pools.aclose()
        raise
    return pools, pool


def make_env(env_id: str, backend: str, pools: Pools | None,
             env_kwargs: Mapping[str, Any]) -> AgentEnv[Any]:
    """One env instance that leases from ``pools`` (and never closes them). Arguments the env does not take
    are a ConfigError. With ``pools=None`` nothing starts until ``areset``: the farm makes one that way to
    check the arguments before it starts anything.

    The env class is called directly, not through ``gymnasium.make``: the farm steps the bare env, so make's
    wrappers would be bypassed anyway (its TimeLimit would swallow ``max_episode_steps``, which the env
    takes itself), and make deep-copies its spec, pool and event loop objects included."""
    env_id, env_kwargs = resolve(env_id, env_kwargs)
    cls, spec = env_class(env_id), gymnasium.spec(env_id)
    kwargs = {**spec.kwargs, **env_kwargs}
    if spec.max_episode_steps is not None:
        kwargs.setdefault("max_episode_steps", spec.max_episode_steps)
    try:
        return cls(backend=backend, pools=pools, **kwargs)
    except TypeError as e:
        raise ConfigError(f"{env_id} does not take the env arguments {dict(env_kwargs)!r}: {e}; fix "
                          "--env-kwargs") from e


__all__ = ["env_class", "env_defaults", "make_env", "start_pools"]
