"""OrderDesk's written policy, the host-side rule checker, and the grader.

The tools (``orderdesk_program.py``) do not enforce the policy; :class:`Desk` does the bookkeeping on the
host instead. It keeps a mirror of the database (changed by the same code as the sandbox's copy), the
authenticated customer, the orders changed so far and every rule broken. The grader then reads the real
database back from the sandbox: reward 1 only when it equals the expected state and no rule was broken.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .orderdesk_program import MUTATING, OpError, find_variant, order_key, run

log = logging.getLogger(__name__)

_RULES = (
    ("verify_identity",
     "Verify identity first: before looking up the customer's account or orders, or changing anything, "
     "authenticate the customer with find_customer using their email, or their full name and zip code. "
     "Catalog lookups (list_products, get_product) need no authentication."),
    ("own_orders_only",
     "Own account and orders only: look up and act only on the authenticated customer's account and orders. "
     "Check that an order is in their order list (get_customer) before opening or changing it."),
    ("cancel_pending_only",
     'Cancellation: only orders with status "pending" can be cancelled. The reason is "no longer needed" or '
     '"ordered by mistake", as the customer said.'),
    ("address_before_shipping",
     "Address change: an order's shipping address can be changed only before it ships (status \"pending\" or "
     '"processing"). Use exactly the address the customer gives.'),
    ("delivered_only", 'Returns and exchanges: only for orders with status "delivered".'),
    ("refund_original_payment",
     "Refunds for returns go to the order's original payment method, never to another one."),
    ("exchange_same_product",
     "Exchanges: an item can only be exchanged for a different variant of the same product, and that variant "
     "must be available (in stock)."),
    ("one_change_per_order",
     "At most one change per order per conversation: put all the items to return or exchange into a single "
     "call."),
    ("only_what_was_asked",
     "Do only what the customer asked. When a request breaks this policy (or the customer cannot be "
     "authenticated, or the order is not theirs), change nothing and explain why in your reply."),
    ("finish",
     "Finish with respond(message), your final reply to the customer, or with end_conversation(); either "
     "ends the conversation."),
)
RULES: dict[int, tuple[str, str]] = dict(enumerate(_RULES, start=1))
"""Number -> (name, text). Rules 1-8 are checked per call; 9 shows in the state; 10 ends episodes."""
POLICY = "\n".join(
    ["You are a customer-service agent of an online store. Follow this policy exactly; it overrides what the "
     "customer asks.", ""] + [f"{n}. {text}" for n, (_, text) in RULES.items()])
LOOKUPS = ("get_customer", "get_order")


@dataclass(frozen=True)
class Violation:
    """One broken rule: which, at which step, and what the agent did."""

    rule: int
    step: int
    detail: str

    @property
    def name(self) -> str:
        return RULES[self.rule][0]

    def as_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "name": self.name, "step": self.step, "detail": self.detail}


@dataclass(frozen=True)
class CallRecord:
    """One tool call of the episode."""

    step: int
    name: str
    arguments: Mapping[str, Any]
    ok: bool


@dataclass(frozen=True)
class Verdict:
    reward: float
    state_ok: bool
    diff: tuple[str, ...]
    violations: tuple[Violation, ...]


class Desk:
    """The host's bookkeeping for one episode (mutable; one per reset)."""

    def __init__(self, db_json: str) -> None:
        self.db: dict[str, Any] = json.loads(db_json)
        self.verified: str | None = None
        self.changed: set[str] = set()
        self.violations: list[Violation] = []
        self.calls: list[CallRecord] = []

    def check(self, op: str, args: Mapping[str, Any], step: int) -> Violation | None:
        """The rule ``op(args)`` would break if it succeeds (judged on the state before it), or None."""
        if op not in LOOKUPS and op not in MUTATING:
            return None
        if self.verified is None:
            return Violation(1, step, f"{op} before the customer was authenticated")
        owner, what = self._owner(op, args)
        if owner is not None and owner != self.verified:
            return Violation(2, step, f"{op} on {what} of customer {owner}, not the authenticated "
                                      f"{self.verified}")
        if op not in MUTATING:
            return None
        oid = order_key(args["order_id"])
        order = self.db["orders"].get(oid)
        if order is None:
            return None
        if oid in self.changed:
            return Violation(8, step, f"{op} on order {oid}, which was already changed in this conversation")
        return _status_rule(self.db, order, op, args, step)

    def _owner(self, op: str, args: Mapping[str, Any]) -> tuple[str | None, str]:
        if op == "get_customer":
            cid = str(args["customer_id"]).strip()
            return (cid if cid in self.db["customers"] else None), "the account"
        order = self.db["orders"].get(order_key(args["order_id"]))
        return (order["customer_id"] if order else None), f"order {order_key(args['order_id'])}"

    def record(self, op: str, args: Mapping[str, Any], step: int, ok: bool,
               violation: Violation | None) -> Violation | None:
        """Note a call; a successful one is applied to the mirror and can authenticate or break a rule
        (``violation``, from :meth:`check` before the call). Returns the rule broken, if any."""
        self.calls.append(CallRecord(step, op, dict(args), ok))
        if not ok:
            return None
        try:
            result = run(self.db, op, dict(args))
        except OpError as e:  # the sandbox accepted what the same code refuses here: a bug, not the agent's
            log.error("OrderDesk mirror disagrees with the sandbox on %s(%s): %s", op, args, e)
            return None
        if op == "find_customer":
            self.verified = result["customer_id"]
        if op in MUTATING:
            self.changed.add(order_key(args["order_id"]))
        if violation is not None:
            self.violations.append(violation)
        return violation


def _status_rule(db: Mapping[str, Any], order: Mapping[str, Any], op: str, args: Mapping[str, Any],
                 step: int) -> Violation | None:
    oid, status = order["order_id"], order["status"]
    if op == "cancel_order" and status != "pending":
        return Violation(3, step, f"cancelled order {oid} whose status was {status!r}")
    if op == "modify_address" and status not in ("pending", "processing"):
        return Violation(4, step, f"changed the address of order {oid} whose status was {status!r}")
    if op in ("return_items", "exchange_items") and status != "delivered":
        return Violation(5, step, f"{op} on order {oid} whose status was {status!r}")
    if op == "return_items" and args["payment_method_id"] != order["payment_method_id"]:
        return Violation(6, step, f"refund of order {oid} to {args['payment_method_id']}, not the original "
                                  f"{order['payment_method_id']}")
    if op == "exchange_items":
        return _exchange_rule(db, order, args, step)
    return None


def _exchange_rule(db: Mapping[str, Any], order: Mapping[str, Any], args: Mapping[str, Any],
                   step: int) -> Violation | None:
    products = {i["item_id"]: i["product_id"] for i in order["items"]}
    for old, new in zip(args["item_ids"], args["new_item_ids"], strict=False):
        product, variant = find_variant(db, new)
        if product is None or variant is None or old not in products:
            return None  # the call fails on format; nothing happens
        if product["product_id"] != products[old] or new == old:
            return Violation(7, step, f"exchange of item {old} for {new}, which is not another variant of "
                                      "the same product")
        if not variant["available"]:
            return Violation(7, step, f"exchange of item {old} for {new}, which is out of stock")
    return None


def diff(expected: Any, actual: Any, path: str = "", limit: int = 20) -> list[str]:
    """Where ``actual`` differs from ``expected``: ``path: expected X, got Y`` lines (at most ``limit``)."""
    out: list[str] = []
    if isinstance(expected, dict) and isinstance(actual, dict):
        for key in sorted(set(expected) | set(actual)):
            where = f"{path}.{key}" if path else str(key)
            if key not in actual:
                out.append(f"{where}: missing (expected {_short(expected[key])})")
            elif key not in expected:
                out.append(f"{where}: unexpected {_short(actual[key])}")
            else:
                out.extend(diff(expected[key], actual[key], where, limit - len(out)))
            if len(out) >= limit:
                break
    elif expected != actual:
        out.append(f"{path}: expected {_short(expected)}, got {_short(actual)}")
    return out[:limit]


def _short(value: Any, limit: int = 200) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def grade(expected: Any, actual: Any, violations: list[Violation]) -> Verdict:
    """Reward 1.0 when ``actual`` equals ``expected`` and no rule was broken."""
    changes = diff(expected, actual)
    ok = not changes
    return Verdict(1.0 if ok and not violations else 0.0, ok, tuple(changes), tuple(violations))
