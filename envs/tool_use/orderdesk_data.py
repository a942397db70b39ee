"""Seeded OrderDesk tasks: a store database, one customer's request, and the correct way to handle it.

A task kind fixes what the customer asks and whether the policy allows it. Allowed kinds (the correct end
state has the change applied): ``cancel``, ``address``, ``return``, ``exchange``. Refused kinds (the correct
end state is the unchanged database): ``cancel_refused`` (the order is past pending), ``address_refused``
(already shipped), ``return_refused`` (not delivered yet), ``exchange_refused`` (the wanted variant is out of
stock, or the order is not delivered), ``not_owner`` (the order belongs to someone else) and ``unverified``
(the identity given matches no customer). The level (1-3) adds distractors: more orders per customer, a
namesake customer, several items of the same product in one order.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from .orderdesk_program import run

T = TypeVar("T")

# kind -> (refused by policy, sampling weight): allowed and refused requests are drawn equally often
KINDS: dict[str, tuple[bool, int]] = {
    "cancel": (False, 3), "address": (False, 3), "return": (False, 3), "exchange": (False, 3),
    "cancel_refused": (True, 2), "address_refused": (True, 2), "return_refused": (True, 2),
    "exchange_refused": (True, 2), "not_owner": (True, 2), "unverified": (True, 2),
}
STATUSES = ("pending", "processing", "shipped", "delivered", "cancelled")
FIRST = ("Mia", "Noah", "Olivia", "Liam", "Ava", "Ethan", "Sofia", "Lucas", "Amelia", "Mason", "Harper",
         "Yusuf", "Chen", "Aisha", "Mateo", "Priya", "Omar", "Lena", "Ivan", "Fatima", "Diego", "Hana")
LAST = ("Garcia", "Smith", "Kim", "Nguyen", "Patel", "Johnson", "Rossi", "Silva", "Khan", "Lopez", "Brown",
        "Ito", "Ahmed", "Novak", "Wilson", "Moreau", "Cohen", "Okafor", "Larsen", "Davis", "Singh")
STREETS = ("Oak Street", "Maple Avenue", "Cedar Lane", "Pine Road", "Elm Street", "Willow Way", "Lake Drive",
           "Hill Road", "River Street", "Park Avenue", "Sunset Boulevard", "Birch Court")
CITIES = (("Austin", "TX"), ("Denver", "CO"), ("Portland", "OR"), ("Columbus", "OH"), ("Phoenix", "AZ"),
          ("Raleigh", "NC"), ("Madison", "WI"), ("Boise", "ID"), ("Tampa", "FL"), ("Fresno", "CA"))
PAYMENT_KINDS = ("credit_card", "paypal", "gift_card")
COLORS = ("black", "white", "blue", "red", "green", "gray")
SIZES = ("S", "M", "L", "XL")
SHOE_SIZES = ("8", "9", "10", "11")
# name, options (name, values), price range in cents; similar products sit next to each other
CATALOG: tuple[tuple[str, tuple[tuple[str, tuple[str, ...]], ...], tuple[int, int]], ...] = (
    ("T-Shirt", (("color", COLORS), ("size", SIZES)), (1500, 3500)),
    ("Polo Shirt", (("color", COLORS), ("size", SIZES)), (2500, 5500)),
    ("Running Shoes", (("color", COLORS[:4]), ("size", SHOE_SIZES)), (6000, 14000)),
    ("Hiking Boots", (("color", ("brown", "black", "gray")), ("size", SHOE_SIZES)), (8000, 18000)),
    ("Water Bottle", (("capacity", ("500ml", "750ml", "1000ml")), ("color", COLORS)), (1000, 4000)),
    ("Travel Mug", (("capacity", ("350ml", "500ml")), ("color", COLORS)), (1200, 3000)),
    ("Backpack", (("color", COLORS[:4]), ("capacity", ("20L", "30L", "40L"))), (4000, 12000)),
    ("Desk Lamp", (("color", ("black", "white", "silver")), ("bulb", ("LED", "halogen"))), (2500, 9000)),
    ("Wireless Headphones", (("color", ("black", "white", "blue")), ("style", ("in-ear", "over-ear"))),
     (5000, 25000)),
    ("Bluetooth Speaker", (("color", ("black", "blue", "red")), ("battery", ("10h", "20h"))), (3000, 15000)),
    ("Coffee Maker", (("capacity", ("4 cups", "8 cups", "12 cups")), ("type", ("drip", "espresso"))),
     (4000, 20000)),
    ("Yoga Mat", (("thickness", ("4mm", "6mm", "8mm")), ("color", COLORS)), (2000, 6000)),
)
CANCEL_WHY = (("I ordered it by mistake", "ordered by mistake"), ("I no longer need it", "no longer needed"))


@dataclass(frozen=True)
class Call:
    """One tool call of a reference solution."""

    name: str
    args: Mapping[str, Any] = field(default_factory=dict)

    def action(self) -> str:
        """The call as an action string (OpenAI-style JSON)."""
        return json.dumps({"name": self.name, "arguments": dict(self.args)})


@dataclass(frozen=True)
class DeskTask:
    task_id: str
    kind: str
    level: int
    refuse: bool
    """True when the policy forbids the request: the correct end state is the initial database."""
    customer_id: str
    order_id: str
    request: str
    """The customer's message."""
    db_json: str
    """The initial database (written into the sandbox)."""
    expected_json: str
    """The database after correct handling."""
    solution: tuple[Call, ...]


@dataclass(frozen=True)
class Plan:
    """How one request is to be handled (made by a kind's planner)."""

    order_id: str
    ask: str
    call: Call | None
    """The change to make, or None when the request must be refused."""
    reply: str
    product_id: str | None = None
    """A product to look up before acting (exchanges)."""
    lookup: bool = True
    """Whether the oracle opens the order (not for another customer's order)."""
    verify: bool = True
    """Whether the identity given is correct."""


def describe(item: Mapping[str, Any]) -> str:
    """``the T-Shirt (color: red, size: L)``."""
    opts = ", ".join(f"{k}: {v}" for k, v in item["options"].items())
    return f"the {item['name']} ({opts})"


def format_address(a: Mapping[str, str]) -> str:
    line = f"{a['address1']}, {a['address2']}" if a["address2"] else a["address1"]
    return f"{line}, {a['city']}, {a['state']} {a['zip']}"


class _Builder:
    """Draws a database from ``rng``; ids are unique within the task."""

    def __init__(self, rng: np.random.Generator, level: int) -> None:
        self.rng, self.level = rng, level
        self.used: set[str] = set()
        self.db: dict[str, dict[str, Any]] = {"customers": {}, "orders": {}, "products": {}}

    def n(self, lo: int, hi: int) -> int:
        return int(self.rng.integers(lo, hi + 1))

    def pick(self, seq: Sequence[T]) -> T:
        return seq[int(self.rng.integers(len(seq)))]

    def sample(self, seq: Sequence[T], k: int) -> list[T]:
        return [seq[int(i)] for i in sorted(self.rng.choice(len(seq), size=k, replace=False))]

    def fresh(self, digits: int) -> str:
        while True:
            value = str(int(self.rng.integers(10 ** (digits - 1), 10**digits)))
            if value not in self.used:
                self.used.add(value)
                return value

    def catalog(self) -> None:
        for name, options, (lo, hi) in CATALOG:
            combos = list(itertools.product(*(values for _, values in options)))
            pid, variants = self.fresh(10), {}
            for combo in self.sample(combos, min(len(combos), self.n(4, 7))):
                item_id = self.fresh(10)
                opts = dict(zip([o for o, _ in options], combo, strict=True))
                price = round(self.n(lo, hi) / 100, 2)
                variants[item_id] = {"item_id": item_id, "options": opts, "price": price,
                                     "available": self.n(1, 10) <= 7}
            self.db["products"][pid] = {"product_id": pid, "name": name, "variants": variants}

    def address(self) -> dict[str, str]:
        city, state = self.pick(CITIES)
        unit = self.pick(("", "", f"Apt {self.n(1, 40)}", f"Suite {self.n(100, 900)}"))
        return {"address1": f"{self.n(1, 9999)} {self.pick(STREETS)}", "address2": unit, "city": city,
                "state": state, "zip": self.fresh(5)}  # unique: name + zip identifies one customer

    def customer(self, name: str | None = None) -> dict[str, Any]:
        name = name or f"{self.pick(FIRST)} {self.pick(LAST)}"
        first, last = name.lower().split()
        num = self.fresh(4)
        kinds = self.sample(PAYMENT_KINDS, self.n(1, 3) if self.level == 1 else self.n(2, 3))
        methods = [{"id": f"{k}_{self.fresh(7)}", "kind": k} for k in kinds]
        cid = f"{first}_{last}_{num}"
        self.db["customers"][cid] = {"customer_id": cid, "name": name,
                                     "email": f"{first}.{last}{num}@example.com", "address": self.address(),
                                     "payment_methods": methods, "orders": []}
        made: dict[str, Any] = self.db["customers"][cid]
        return made

    def item(self, product: Mapping[str, Any], variant: Mapping[str, Any]) -> dict[str, Any]:
        return {"item_id": variant["item_id"], "product_id": product["product_id"], "name": product["name"],
                "options": dict(variant["options"]), "price": variant["price"]}

    def order(self, customer: dict[str, Any], status: str, n_items: int | None = None) -> dict[str, Any]:
        products = list(self.db["products"].values())
        items: dict[str, dict[str, Any]] = {}
        want = n_items or self.n(1, 1 + self.level)
        while len(items) < want:
            product = self.pick(products)
            if self.level == 3 and items and self.n(0, 1):  # a second variant of a product already there
                product = self.db["products"][self.pick(list(items.values()))["product_id"]]
            variant = self.pick(list(product["variants"].values()))
            items.setdefault(variant["item_id"], self.item(product, variant))
        oid = f"#W{self.fresh(7)}"
        self.db["orders"][oid] = {
            "order_id": oid, "customer_id": customer["customer_id"], "status": status,
            "items": list(items.values()), "payment_method_id": self.pick(customer["payment_methods"])["id"],
            "address": dict(customer["address"])}
        customer["orders"] = sorted([*customer["orders"], oid])
        order: dict[str, Any] = self.db["orders"][oid]
        return order


def _plan_cancel(b: _Builder, me: dict[str, Any], refuse: bool) -> Plan:
    status = b.pick(("processing", "shipped", "delivered")) if refuse else "pending"
    oid = b.order(me, status)["order_id"]
    phrase, reason = b.pick(CANCEL_WHY)
    ask = f"Please cancel my order {oid}, {phrase}."
    if refuse:
        return Plan(oid, ask, None, f"I'm sorry, order {oid} is already {status}; only pending orders can be "
                                    "cancelled, so I have not changed it.")
    return Plan(oid, ask, Call("cancel_order", {"order_id": oid, "reason": reason}),
                f"Your order {oid} has been cancelled ({reason}).")


def _plan_address(b: _Builder, me: dict[str, Any], refuse: bool) -> Plan:
    status = b.pick(("shipped", "delivered") if refuse else ("pending", "processing"))
    order = b.order(me, status)
    oid, new = order["order_id"], b.address()
    ask = f"I have moved. Please ship order {oid} to my new address: {format_address(new)}."
    if refuse:
        return Plan(oid, ask, None, f"I'm sorry, order {oid} is already {status}, so its shipping address "
                                    "can no longer be changed.")
    return Plan(oid, ask, Call("modify_address", {"order_id": oid, **new}),
                f"Order {oid} will now ship to {format_address(new)}.")


def _plan_return(b: _Builder, me: dict[str, Any], refuse: bool) -> Plan:
    status = b.pick(("pending", "processing", "shipped")) if refuse else "delivered"
    order = b.order(me, status, n_items=b.n(1, 1 + b.level))
    items = b.sample(order["items"], 2 if len(order["items"]) >= 3 and b.n(0, 1) else 1)
    oid = order["order_id"]
    ask = f"I'd like to return {' and '.join(describe(i) for i in items)} from order {oid}."
    if refuse:
        return Plan(oid, ask, None, f"I'm sorry, order {oid} is {status}; returns are only possible once an "
                                    "order has been delivered.")
    args = {"order_id": oid, "item_ids": [i["item_id"] for i in items],
            "payment_method_id": order["payment_method_id"]}
    return Plan(oid, ask, Call("return_items", args),
                f"The return for order {oid} is requested; the refund goes to {order['payment_method_id']}.")


def _plan_exchange(b: _Builder, me: dict[str, Any], refuse: bool) -> Plan:
    out_of_stock = refuse and bool(b.n(0, 1))
    status = b.pick(("processing", "shipped")) if refuse and not out_of_stock else "delivered"
    choices: list[tuple[dict[str, Any], dict[str, Any]]] = []
    while not choices:  # an item whose product has a variant that is not in the order
        order = b.order(me, status, n_items=b.n(1, 1 + b.level))
        in_order = {i["item_id"] for i in order["items"]}
        choices = [(i, v) for i in order["items"]
                   for v in b.db["products"][i["product_id"]]["variants"].values()
                   if v["item_id"] not in in_order]
    item, variant = b.pick(choices)
    product = b.db["products"][item["product_id"]]
    variant["available"] = not out_of_stock
    oid, new_opts = order["order_id"], ", ".join(f"{k}: {v}" for k, v in variant["options"].items())
    ask = f"I'd like to exchange {describe(item)} from order {oid} for the same product with {new_opts}."
    pid = product["product_id"]
    if out_of_stock:
        return Plan(oid, ask, None, f"I'm sorry, the {product['name']} with {new_opts} is out of stock, so I "
                                    "cannot exchange it.", product_id=pid)
    if refuse:
        return Plan(oid, ask, None, f"I'm sorry, order {oid} is {status}; exchanges are only possible once "
                                    "an order has been delivered.", product_id=pid)
    args = {"order_id": oid, "item_ids": [item["item_id"]], "new_item_ids": [variant["item_id"]]}
    return Plan(oid, ask, Call("exchange_items", args), f"The exchange for order {oid} is requested.",
                product_id=pid)


def _plan_not_owner(b: _Builder, me: dict[str, Any], refuse: bool) -> Plan:
    other = b.customer()
    plan = _plan_cancel(b, other, refuse=False) if b.n(0, 1) else _plan_address(b, other, refuse=False)
    return Plan(plan.order_id, plan.ask, None, f"I'm sorry, order {plan.order_id} is not one of your orders, "
                                               "so I cannot act on it.", lookup=False)


def _plan_unverified(b: _Builder, me: dict[str, Any], refuse: bool) -> Plan:
    plan = _plan_cancel(b, me, refuse=False)
    reply = "Sorry, I could not verify your identity with the details you gave, so I cannot change orders."
    return Plan(plan.order_id, plan.ask, None, reply, verify=False)


PLANNERS = {"cancel": _plan_cancel, "address": _plan_address, "return": _plan_return,
            "exchange": _plan_exchange, "not_owner": _plan_not_owner, "unverified": _plan_unverified}


def _identity(b: _Builder, me: Mapping[str, Any], verify: bool) -> tuple[str, dict[str, str]]:
    """The greeting the customer writes and the find_customer arguments it supports."""
    name, zip_code = me["name"], me["address"]["zip"]
    if not verify:
        taken = {c["address"]["zip"] for c in b.db["customers"].values() if c["name"] == name}
        while zip_code in taken:
            zip_code = str(b.n(10000, 99999))
    elif b.n(0, 1):
        return f"Hello, this is {name}, my email is {me['email']}.", {"email": me["email"]}
    return f"Hi, I'm {name}, zip code {zip_code}.", {"name": name, "zip": zip_code}


def _solution(me: Mapping[str, Any], plan: Plan, identity: Mapping[str, str]) -> tuple[Call, ...]:
    calls = [Call("find_customer", dict(identity))]
    if plan.verify:
        calls.append(Call("get_customer", {"customer_id": me["customer_id"]}))
        if plan.lookup:
            calls.append(Call("get_order", {"order_id": plan.order_id}))
        if plan.product_id:
            calls.append(Call("get_product", {"product_id": plan.product_id}))
        if plan.call:
            calls.append(plan.call)
    calls.append(Call("respond", {"message": plan.reply}))
    return tuple(calls)


def make_task(rng: np.random.Generator, level: int, kind: str | None = None) -> DeskTask:
    """A task of ``level`` (1-3) and ``kind`` (None: drawn) from ``rng``."""
    b = _Builder(rng, level)
    if kind is None:
        names, weights = list(KINDS), np.array([w for _, w in KINDS.values()], dtype=float)
        kind = names[int(rng.choice(len(names), p=weights / weights.sum()))]
    b.catalog()
    me = b.customer()
    if level >= 2:
        b.customer(name=me["name"])  # a namesake in another zip code
    for _ in range(2 + 2 * level):
        other = b.customer()
        for _ in range(b.n(1, 3)):
            b.order(other, b.pick(STATUSES))
    plan = PLANNERS[kind.removesuffix("_refused")](b, me, KINDS[kind][0])
    for _ in range(b.n(level - 1, level + 1)):
        b.order(me, b.pick(STATUSES))
    greeting, identity = _identity(b, me, plan.verify)
    expected = json.loads(json.dumps(b.db))
    if plan.call is not None:
        run(expected, plan.call.name, dict(plan.call.args))
    return DeskTask(
        task_id=f"orderdesk-{level}-{kind}-{me['customer_id']}-{plan.order_id.lstrip('#')}", kind=kind,
        level=level, refuse=plan.call is None, customer_id=me["customer_id"], order_id=plan.order_id,
        request=f"{greeting} {plan.ask}", db_json=json.dumps(b.db, sort_keys=True),
        expected_json=json.dumps(expected, sort_keys=True), solution=_solution(me, plan, identity))
