"""Gymnasium environments for agents. Contract: ``envs/core.py``; registry: ``envs/registration.py``.

``import envfarm.envs`` registers the built-in envs and loads third-party plugins (entry-point group
``envfarm.envs``), after which ``gymnasium.make("envfarm/ToolCalc-v0")`` works.
"""

from __future__ import annotations

from .actions import ActionError, ToolCall, parse_action
from .core import AgentEnv, Outcome, Tool, tool
from .registration import EnvInfo, discover_plugins, env_info, plugin_errors, register, registered

BUILTIN = {
    "envfarm/ToolCalc-v0": ("envfarm.envs.tool_use.toolcalc:ToolCalcEnv",
                            "Arithmetic word problems solved with a sandboxed calculator tool"),
}


def _register_builtins() -> None:
    for env_id, (entry_point, description) in BUILTIN.items():
        register(env_id, entry_point, description=description)


_register_builtins()
discover_plugins()

__all__ = ["ActionError", "AgentEnv", "EnvInfo", "Outcome", "Tool", "ToolCall", "env_info", "parse_action",
           "plugin_errors", "register", "registered", "tool"]
