"""OrderDesk-v0: generation and grading on the host, episodes on the real bwrap sandbox."""

from __future__ import annotations

import copy
import json
import logging
from collections import Counter
from collections.abc import Iterator
from typing import Any

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import envfarm.envs  # noqa: F401  (registers the envs)
from envfarm.envs.tool_use.orderdesk import OrderDeskEnv
from envfarm.envs.tool_use.orderdesk_data import KINDS, Call, make_task
from envfarm.envs.tool_use.orderdesk_policy import Desk, grade
from envfarm.envs.tool_use.orderdesk_program import OpError, run
from envfarm.errors import ConfigError

log = logging.getLogger(__name__)
ENV_ID = "envfarm/OrderDesk-v0"


def _make(**kwargs: Any) -> gymnasium.Env:
    return gymnasium.make(ENV_ID, backend="bwrap", **kwargs)


@pytest.fixture
def make_env() -> Iterator[Any]:
    made: list[gymnasium.Env] = []

    def make(**kwargs: Any) -> OrderDeskEnv:
        env = _make(**kwargs)
        made.append(env)
        return env.unwrapped

    try:
        yield make
    finally:
        for env in made:
            env.close()


def _call(tool: str, /, **arguments: Any) -> str:
    return json.dumps({"name": tool, "arguments": arguments})


def _play(env: OrderDeskEnv, actions: list[str]) -> tuple[str, float, bool, dict[str, Any]]:
    obs, reward, terminated, info = "", 0.0, False, {}
    for action in actions:
        obs, reward, terminated, truncated, info = env.step(action)
        assert not truncated, (action, obs, info.get("infra_error"))
        if terminated:
            break
    return obs, reward, terminated, info


def _oracle_calls(env: OrderDeskEnv) -> list[dict[str, Any]]:
    return [json.loads(a) for a in env.oracle()]


# ----------------------------------------------------------------------------------- host only, no sandbox


def _host_play(task_seed: int, level: int, kind: str | None = None) -> tuple[float, str]:
    task = make_task(np.random.default_rng(task_seed), level, kind)
    desk = Desk(task.db_json)
    for step, call in enumerate(task.solution[:-1], 1):
        violation = desk.check(call.name, call.args, step)
        try:
            run(copy.deepcopy(desk.db), call.name, dict(call.args))
            ok = True
        except OpError:
            ok = False
        assert ok or (task.kind == "unverified" and call.name == "find_customer")
        desk.record(call.name, call.args, step, ok, violation)
    verdict = grade(json.loads(task.expected_json), desk.db, desk.violations)
    return verdict.reward, task.kind


def test_solutions_grade_one_on_the_host_for_every_kind_and_level() -> None:
    kinds: Counter[str] = Counter()
    for seed in range(150):
        for level in (1, 2, 3):
            reward, kind = _host_play(seed, level)
            assert reward == 1.0, (seed, level, kind)
            kinds[kind] += 1
    assert set(kinds) == set(KINDS)
    for kind in KINDS:
        assert _host_play(7, 3, kind) == (1.0, kind)


def test_refused_kinds_expect_the_initial_database() -> None:
    for seed in range(100):
        task = make_task(np.random.default_rng(seed), 2)
        assert task.refuse == KINDS[task.kind][0]
        assert (task.expected_json == task.db_json) == task.refuse
        assert task.solution[-1].name == "respond"
        assert task.order_id in task.request


def test_bad_constructor_arguments_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="difficulty"):
        OrderDeskEnv(difficulty=4)
    with pytest.raises(ConfigError, match="choose one of"):
        OrderDeskEnv(kind="refund")


# ---------------------------------------------------------------------------------------- real sandbox


@pytest.mark.bwrap
def test_oracle_solves_200_seeds(make_env: Any) -> None:
    env = make_env()
    solved, kinds = 0, Counter()
    for seed in range(200):
        env.reset(seed=seed)
        kinds[env.task.kind] += 1
        _, reward, terminated, info = _play(env, env.oracle())
        assert terminated
        solved += reward == 1.0
        if reward != 1.0:
            log.warning("seed %d (%s) unsolved: %s", seed, env.task.kind, info)
    log.info("OrderDesk oracle solved %d/200 seeds; kinds %s", solved, dict(kinds))
    assert solved / 200 >= 0.99
    assert set(kinds) == set(KINDS)


@pytest.mark.bwrap
def test_seeded_reset_is_deterministic(make_env: Any) -> None:
    env = make_env()
    obs1, info1 = env.reset(seed=11)
    oracle1 = env.oracle()
    obs2, info2 = env.reset(seed=11)
    assert (obs1, info1["task_id"], oracle1) == (obs2, info2["task_id"], env.oracle())
    obs3, info3 = env.reset(seed=12)
    assert obs3 != obs1 and info3["task_id"] != info1["task_id"]
    assert "1. Verify identity first" in obs1 and "The customer writes:" in obs1


@pytest.mark.bwrap
def test_performing_a_refused_request_gets_zero_and_names_the_rule(make_env: Any) -> None:
    env = make_env(kind="cancel_refused", difficulty=2)
    env.reset(seed=3)
    assert env.task.refuse
    actions = env.oracle()
    bad = _call("cancel_order", order_id=env.task.order_id, reason="ordered by mistake")
    _play(env, actions[:-1])
    obs, reward, terminated, _, info = env.step(bad)  # the tool does not enforce the policy
    assert '"status": "cancelled"' in obs and not terminated
    assert info["rule_broken"]["name"] == "cancel_pending_only"
    obs, reward, terminated, info = _play(env, actions[-1:])
    assert terminated and reward == 0.0
    assert info["rule"] == "cancel_pending_only"
    assert info["violations"][0]["rule"] == 3
    assert not info["state_ok"] and any(".status" in d for d in info["state_diff"])
    assert "cancel_pending_only" in obs


@pytest.mark.bwrap
def test_acting_before_verification_gets_zero(make_env: Any) -> None:
    env = make_env(kind="cancel")
    env.reset(seed=5)
    peek = _call("get_order", order_id=env.task.order_id)
    _, reward, terminated, info = _play(env, [peek, *env.oracle()])
    assert terminated and reward == 0.0
    assert info["state_ok"] and info["rule"] == "verify_identity"


@pytest.mark.bwrap
def test_acting_on_another_customers_order_gets_zero(make_env: Any) -> None:
    env = make_env(kind="not_owner")
    env.reset(seed=2)
    actions = env.oracle()
    peek = _call("get_order", order_id=env.task.order_id)
    _, reward, _, info = _play(env, [*actions[:-1], peek, actions[-1]])
    assert reward == 0.0 and info["rule"] == "own_orders_only" and info["state_ok"]


@pytest.mark.bwrap
def test_wrong_final_state_gets_zero(make_env: Any) -> None:
    env = make_env(kind="cancel")
    env.reset(seed=8)
    calls = _oracle_calls(env)
    cancel = next(c for c in calls if c["name"] == "cancel_order")
    other = {"no longer needed", "ordered by mistake"} - {cancel["arguments"]["reason"]}
    cancel["arguments"]["reason"] = other.pop()
    _, reward, _, info = _play(env, [json.dumps(c) for c in calls])
    assert reward == 0.0 and info["violations"] == [] and not info["state_ok"]
    assert any("cancel_reason" in d for d in info["state_diff"])

    env.reset(seed=9)  # doing nothing on an allowed request is wrong too
    _, reward, _, info = _play(env, [_call("end_conversation")])
    assert reward == 0.0 and not info["state_ok"] and info["rule"] is None


@pytest.mark.bwrap
def test_changing_an_order_twice_breaks_the_one_change_rule(make_env: Any) -> None:
    env = make_env(kind="address")
    env.reset(seed=4)
    calls = [Call(c["name"], c["arguments"]) for c in _oracle_calls(env)]
    change = next(c for c in calls if c.name == "modify_address")
    _, reward, _, info = _play(env, [c.action() for c in calls[:-1]] + [change.action(), calls[-1].action()])
    assert reward == 0.0 and info["rule"] == "one_change_per_order" and info["state_ok"]


@pytest.mark.bwrap
def test_malformed_actions_give_error_observations(make_env: Any) -> None:
    env = make_env(kind="exchange", difficulty=3)
    env.reset(seed=1)
    bad = [
        ('{"name": "get_order", "arguments": ', "not valid JSON"),
        (_call("refund_everything"), "unknown tool"),
        (_call("get_order", order_id=123), "valid string"),
        (_call("get_order", order_id="#W1", extra=1), "Extra inputs"),
        (_call("find_customer"), "email, or both name and zip"),
        (_call("find_customer", name="Nobody Here", zip="00000"), "no customer matches"),
        (_call("get_order", order_id="#W0000000"), "not found"),
        (_call("cancel_order", order_id="#W0000000", reason="because"), "no longer needed"),
        (_call("modify_address", order_id="#W0000000", address1="1 A St", city="X", state="CO", zip="12"),
         "zip"),
        (_call("exchange_items", order_id="#W0000000", item_ids=["1"], new_item_ids=[]), "new_item_ids"),
        (_call("get_product", product_id="nope"), "not found"),
    ]
    for action, expected in bad:
        obs, reward, terminated, truncated, info = env.step(action)
        assert expected in obs, (action, obs)
        assert reward == 0.0 and not terminated and not truncated and "infra_error" not in info
    _, reward, terminated, info = _play(env, env.oracle())  # failed calls broke no rule: still solvable
    assert terminated and reward == 1.0, info


@pytest.mark.bwrap
def test_item_errors_name_the_valid_items(make_env: Any) -> None:
    env = make_env(kind="return")
    env.reset(seed=6)
    calls = _oracle_calls(env)
    _play(env, [json.dumps(c) for c in calls[:3]])
    ret = next(c for c in calls if c["name"] == "return_items")["arguments"]
    obs, *_ = env.step(_call("return_items", **{**ret, "item_ids": ["0000000000"]}))
    assert "not in order" in obs and ret["item_ids"][0] in obs
    obs, *_ = env.step(_call("return_items", **{**ret, "payment_method_id": "bitcoin_1"}))
    assert "not one of the customer's" in obs
    _, reward, _, info = _play(env, [json.dumps(c) for c in calls[3:]])
    assert reward == 1.0, info


@pytest.mark.bwrap
def test_env_checker_passes() -> None:
    env = _make()
    try:
        check_env(env.unwrapped)
    finally:
        env.close()


@pytest.mark.bwrap
@pytest.mark.slow
def test_conformance_suite_passes() -> None:
    from envfarm.envs.checks import run_conformance

    report = run_conformance("envfarm/OrderDesk-v0", backend="bwrap", seeds=200)
    assert not report.failures, report.failures
