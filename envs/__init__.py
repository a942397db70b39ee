"""Gymnasium environments for agents. Contract: ``envs/core.py``; registry: ``envs/registration.py``.

``import envfarm.envs`` registers the built-in envs and loads third-party plugins (entry-point group
``envfarm.envs``), after which ``gymnasium.make("envfarm/ToolCalc-v0")`` works.
"""

from __future__ import annotations

from .actions import ActionError, ParsedAction, ToolCall, parse_action, read_action
from .core import AgentEnv, Outcome, Tool, tool
from .meta import EpisodeMeta
from .registration import EnvInfo, discover_plugins, env_info, plugin_errors, register, registered

BUILTIN = {
    "envfarm/ToolCalc-v0": ("envfarm.envs.tool_use.toolcalc:ToolCalcEnv",
                            "Arithmetic word problems solved with a sandboxed calculator tool"),
    "envfarm/SqlQuery-v0": ("envfarm.envs.tool_use.sqlquery:SqlQueryEnv",
                            "Questions answered by read-only SQL over a generated SQLite database"),
    "envfarm/FileOps-v0": ("envfarm.envs.tool_use.fileops:FileOpsEnv",
                           "Reach a target filesystem state with a shell tool; the state is verified"),
    "envfarm/OrderDesk-v0": ("envfarm.envs.tool_use.orderdesk:OrderDeskEnv",
                             "Customer-service desk: look up and modify orders under written policy rules"),
    "envfarm/CodeRepair-v0": ("envfarm.envs.code_repair.env:CodeRepairEnv",
                              "Fix a reported bug in a real repository; graded by the SWE-bench harness"),
    "envfarm/Harbor-v0": ("envfarm.envs.harbor.env:HarborEnv",
                          "A Harbor task folder: instruction.md, bash, graded by its tests/test.sh"),
}


def _register_builtins() -> None:
    for env_id, (entry_point, description) in BUILTIN.items():
        register(env_id, entry_point, description=description)


_register_builtins()
discover_plugins()

__all__ = ["ActionError", "AgentEnv", "EnvInfo", "EpisodeMeta", "Outcome", "ParsedAction", "Tool", "ToolCall",
           "env_info", "parse_action", "plugin_errors", "read_action", "register", "registered", "tool"]
