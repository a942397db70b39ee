"""TRL's GRPOTrainer on a served envfarm env: an ``environment_factory`` whose tools are the env's.

    # envfarm envs serve --env envfarm/ToolCalc-v0 --backend bwrap --port 8010 --max-sessions 64
    factory = environment_factory("http://127.0.0.1:8010")
    trainer = GRPOTrainer(model=..., processing_class=..., args=GRPOConfig(...), train_dataset=dataset,
                          environment_factory=factory)     # rewards come from envfarm (get_reward)
    trainer.train()
    factory.close()                                        # the WebSocket sessions

TRL's environments mode calls ``reset(**row)`` per rollout (the dataset row's fields; ``seed`` picks the
task, ``options`` is passed on), offers every public method but ``reset``/``get_reward`` to the model as a
tool (schema from its signature and docstring), calls the ones the model asks for, and scores the rollout with
``get_reward``. The methods are built here from the served env's own tool schemas (``calc(expr)``,
``submit(answer)`` for ToolCalc), and each call is one OpenEnv ``step`` with an OpenAI tool-call dict, over
OpenEnv's own ``GenericEnvClient`` (one WebSocket session per environment instance).
"""

from __future__ import annotations

import inspect
import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from envfarm.errors import ConfigError

log = logging.getLogger(__name__)

JSON_TYPES: dict[str, type] = {"string": str, "integer": int, "number": float, "boolean": bool, "array": list,
                               "object": dict}
RESERVED = frozenset({"reset", "get_reward"})


class ServedEnvironment:
    """Base of the generated classes: one OpenEnv session; the tools are added per served env."""

    base_url: str = ""

    def __init__(self) -> None:
        from openenv.core.generic_client import GenericEnvClient

        self._client = GenericEnvClient(base_url=self.base_url, message_timeout_s=600.0).sync()
        self._client.connect()
        self._reward, self._done = 0.0, True

    def reset(self, seed: int | None = None, options: Mapping[str, Any] | None = None, **row: Any) -> str:
        """Start the row's episode (``seed`` picks the task); the prompt is appended to the user message."""
        kwargs: dict[str, Any] = {} if seed is None else {"seed": int(seed)}
        if options:
            kwargs["options"] = dict(options)
        result = self._client.reset(**kwargs)
        self._reward, self._done = 0.0, bool(result.done)
        return str(result.observation.get("text", ""))

    def get_reward(self) -> float:
        """The episode's reward from envfarm (0 until the env grades an answer)."""
        return self._reward

    def _call(self, name: str, arguments: Mapping[str, Any]) -> str:
        if self._done:
            return "The episode is over."
        result = self._client.step({"action": {"name": name, "arguments": dict(arguments)}})
        self._reward += float(result.reward or 0.0)
        self._done = bool(result.done)
        return str(result.observation.get("text", ""))

    def _close(self) -> None:
        self._client.close()


class EnvironmentFactory:
    """``environment_factory`` for GRPOTrainer: each call makes one :class:`ServedEnvironment`; ``close()``
    ends every session it opened."""

    def __init__(self, cls: type[ServedEnvironment]) -> None:
        self.cls = cls
        self._made: list[ServedEnvironment] = []
        self._lock = threading.Lock()

    def __call__(self) -> ServedEnvironment:
        env = self.cls()
        with self._lock:
            self._made.append(env)
        return env

    def close(self) -> None:
        with self._lock:
            made, self._made = self._made, []
        for env in made:
            try:
                env._close()
            except Exception as e:  # one broken socket must not keep the others open
                log.warning("closing an OpenEnv session: %s: %s", type(e).__name__, e)


def environment_factory(base_url: str, tools: list[Mapping[str, Any]] | None = None) -> EnvironmentFactory:
    """A factory for TRL's ``environment_factory`` over the envfarm OpenEnv server at ``base_url``; its tools
    are the served env's (asked from one session unless ``tools`` gives the OpenAI schemas)."""
    schemas = list(tools) if tools is not None else served_tools(base_url)
    if not schemas:
        raise ConfigError(f"the env served at {base_url} has no tools; TRL's environments mode needs some")
    namespace: dict[str, Any] = {"base_url": base_url.rstrip("/")}
    for schema in schemas:
        fn = _tool_method(schema["function"])
        namespace[fn.__name__] = fn
    return EnvironmentFactory(type("EnvfarmEnvironment", (ServedEnvironment,), namespace))


def served_tools(base_url: str) -> list[dict[str, Any]]:
    """The OpenAI tool schemas of the env served at ``base_url`` (from one reset in a short session)."""
    from openenv.core.generic_client import GenericEnvClient

    try:
        with GenericEnvClient(base_url=base_url).sync() as client:
            tools = client.reset(seed=0).observation.get("tools")
    except (ConnectionError, OSError, RuntimeError) as e:
        raise ConfigError(f"cannot read the tools of the env served at {base_url} ({type(e).__name__}: {e}); "
                          "start it with `envfarm envs serve --env ID --port PORT`") from e
    return list(tools or [])


def _tool_method(function: Mapping[str, Any]) -> Callable[..., str]:
    """A method ``name(self, **arguments) -> str`` with the signature and Google-style docstring that
    ``transformers.utils.get_json_schema`` (which TRL uses) turns back into ``function``'s schema."""
    name = str(function["name"])
    if not name.isidentifier() or name in RESERVED or name.startswith("_"):
        raise ConfigError(f"tool {name!r} cannot be a method of a TRL environment (reserved or not an "
                          "identifier)")
    params = function.get("parameters") or {}
    props: dict[str, Any] = params.get("properties") or {}
    required = set(params.get("required") or [])

    def method(self: ServedEnvironment, **arguments: Any) -> str:
        return self._call(name, {k: v for k, v in arguments.items() if v is not None})

    signature = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, Any] = {}
    for arg, spec in props.items():
        kind = JSON_TYPES.get(spec.get("type", "string"), str)
        annotations[arg] = kind if arg in required else kind | None
        signature.append(inspect.Parameter(arg, inspect.Parameter.KEYWORD_ONLY, annotation=annotations[arg],
                                           default=inspect.Parameter.empty if arg in required else None))
    annotations["return"] = str
    method.__name__ = method.__qualname__ = name
    method.__annotations__ = annotations
    method.__signature__ = inspect.Signature(signature, return_annotation=str)  # type: ignore[attr-defined]
    args_doc = "".join(f"\n    {arg}: {spec.get('description') or arg}" for arg, spec in props.items())
    method.__doc__ = (f"{function.get('description') or name}\n\nArgs:{args_doc}\n\nReturns:\n"
                      "    The environment's answer.")
    return method


__all__ = ["EnvironmentFactory", "ServedEnvironment", "environment_factory", "served_tools"]
