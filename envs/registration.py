"""Registering environments with Gymnasium's own registry, and discovering third-party plugins.

Built-in envs register on ``import envfarm.envs``. A third-party package registers through the entry-point
group ``envfarm.envs``; the entry point names a zero-argument function that calls :func:`register`:

    # pyproject.toml of the plugin package
    [project.entry-points."envfarm.envs"]
    mypkg = "mypkg.envs:register_envs"

    # mypkg/envs.py
    from envfarm.envs import register
    def register_envs() -> None:
        register("mypkg/Echo-v0", "mypkg.envs:EchoEnv", description="Say it back")

A plugin may also register an id scheme: ``register_scheme("openenv", "openenv/Remote-v0", "base_url")``
makes ``openenv:http://HOST:PORT`` name ``openenv/Remote-v0`` with ``base_url="http://HOST:PORT"``
(:func:`resolve`, which the farm applies to every id it is given).

Discovery runs once, on the first import of ``envfarm.envs``; a broken plugin is logged with its name and
error (and listed by :func:`plugin_errors`) without stopping the others.
"""

from __future__ import annotations

import importlib.metadata
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import gymnasium

from envfarm.errors import ConfigError

log = logging.getLogger(__name__)

GROUP = "envfarm.envs"


@dataclass(frozen=True)
class EnvInfo:
    """One registered envfarm environment."""

    id: str
    entry_point: str
    source: str
    """The distribution that registered it ("envfarm" for built-ins)."""
    description: str


@dataclass(frozen=True)
class PluginError:
    """A plugin entry point that failed to load or register."""

    name: str
    value: str
    error: str


_REGISTRY: dict[str, EnvInfo] = {}
_SCHEMES: dict[str, tuple[str, str]] = {}
_ERRORS: list[PluginError] = []
_current_source = "envfarm"
_discovered = False


def register(
    id: str,
    entry_point: str | Any,
    description: str = "",
    max_episode_steps: int | None = None,
    **kwargs: Any,
) -> None:
    """Register ``id`` with Gymnasium (so ``gymnasium.make(id)`` works) and with envfarm's listing.

    ``kwargs`` become the env's default constructor arguments. Registering the same id twice with the
    same entry point is a no-op; with another entry point it is a ConfigError."""
    if isinstance(entry_point, str):
        target = entry_point
    else:
        target = f"{entry_point.__module__}:{entry_point.__qualname__}"
    known = _REGISTRY.get(id)
    if known is not None:
        if known.entry_point != target:
            raise ConfigError(f"env id {id!r} is already registered by {known.source} ({known.entry_point})")
        return
    gymnasium.register(id=id, entry_point=entry_point, max_episode_steps=max_episode_steps,
                       kwargs=kwargs, disable_env_checker=True)
    _REGISTRY[id] = EnvInfo(id, target, _current_source, description)


def register_scheme(prefix: str, env_id: str, argument: str) -> None:
    """Ids ``PREFIX:VALUE`` name the registered ``env_id`` with the constructor argument
    ``argument=VALUE``."""
    known = _SCHEMES.get(prefix)
    if known is not None and known != (env_id, argument):
        raise ConfigError(f"env id scheme {prefix!r}: is already registered for {known[0]}")
    _SCHEMES[prefix] = (env_id, argument)


def resolve(id: str, env_kwargs: Mapping[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
    """``(registered id, env kwargs)`` for ``id``: a scheme id (``openenv:URL``) becomes its env id plus its
    argument; any other id is returned as given."""
    prefix, sep, value = id.partition(":")
    kwargs = dict(env_kwargs or {})
    if sep and prefix in _SCHEMES and "/" not in prefix:
        target, argument = _SCHEMES[prefix]
        return target, {**kwargs, argument: value}
    return id, kwargs


def registered() -> list[EnvInfo]:
    """Every env registered through envfarm, sorted by id."""
    return sorted(_REGISTRY.values(), key=lambda e: e.id)


def plugin_errors() -> list[PluginError]:
    return list(_ERRORS)


def env_info(id: str) -> EnvInfo:
    """The listing entry for ``id`` (or for the env its scheme names), or ConfigError with a suggestion."""
    id = resolve(id)[0]
    if id in _REGISTRY:
        return _REGISTRY[id]
    import difflib

    hint = difflib.get_close_matches(id, list(_REGISTRY), n=1)
    did = f"; did you mean {hint[0]!r}?" if hint else "; run `envfarm envs list`"
    raise ConfigError(f"unknown environment {id!r}{did}")


def discover_plugins() -> None:
    """Load every ``envfarm.envs`` entry point once. Failures are recorded, not raised."""
    global _discovered, _current_source
    if _discovered:
        return
    _discovered = True
    for ep in importlib.metadata.entry_points(group=GROUP):
        _current_source = ep.dist.name if ep.dist is not None else ep.name
        try:
            ep.load()()
        except Exception as e:  # a broken plugin must not stop the others
            _ERRORS.append(PluginError(ep.name, ep.value, f"{type(e).__name__}: {e}"))
            log.error("envfarm plugin %r (%s) failed: %s: %s", ep.name, ep.value, type(e).__name__, e)
        finally:
            _current_source = "envfarm"
