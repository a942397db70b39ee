"""OrderDesk's database operations, run inside the sandbox (stdlib only, any Python >= 3.7):

    python3 orderdesk_program.py DB_PATH OP ARGS_JSON

The database is one JSON file (``customers``, ``orders``, ``products``, each keyed by id). A read prints the
record as JSON; a change rewrites the file atomically and prints the changed order. A bad request (unknown id,
item not in the order, malformed value) prints ``Error: ...`` on stderr and exits 1.

These tools check existence and format only, never the desk's policy: cancelling a shipped order works
here; the environment judges whether it was allowed. The host imports :func:`run` to compute the expected
database and to mirror the episode's changes, so host and sandbox share one implementation.
"""

import copy
import json
import os
import sys
from collections.abc import Mapping
from typing import Any

CANCEL_REASONS = ("no longer needed", "ordered by mistake")
ADDRESS_FIELDS = ("address1", "address2", "city", "state", "zip")
MUTATING = ("cancel_order", "modify_address", "return_items", "exchange_items")


class OpError(Exception):
    pass


def _norm(text):
    return " ".join(str(text).split()).lower()


def order_key(order_id: object) -> str:
    """``W1234567`` and ``#W1234567`` name the same order."""
    oid = str(order_id).strip()
    return oid if oid.startswith("#") else "#" + oid


def _order(db, order_id):
    order = db["orders"].get(order_key(order_id))
    if order is None:
        raise OpError("order %r not found; order ids look like '#W1234567'" % order_id)
    return order


def find_variant(db: Mapping, item_id: object) -> tuple:
    """(product, variant) of catalog item ``item_id``, or (None, None)."""
    for product in db["products"].values():
        variant = product["variants"].get(item_id)
        if variant is not None:
            return product, variant
    return None, None


def _order_items(order, item_ids):
    if not item_ids:
        raise OpError("item_ids must list at least one item id")
    if len(set(item_ids)) != len(item_ids):
        raise OpError("item_ids lists the same item twice")
    by_id = dict((item["item_id"], item) for item in order["items"])
    missing = [i for i in item_ids if i not in by_id]
    if missing:
        raise OpError("item(s) %s are not in order %s; its items are %s"
                      % (", ".join(missing), order["order_id"], ", ".join(sorted(by_id))))
    return [by_id[i] for i in item_ids]


def find_customer(db, args):
    email, name, zip_code = args.get("email"), args.get("name"), args.get("zip")
    if email:
        hits = [c for c in db["customers"].values() if _norm(c["email"]) == _norm(email)]
    elif name and zip_code:
        hits = [c for c in db["customers"].values()
                if _norm(c["name"]) == _norm(name) and c["address"]["zip"] == str(zip_code).strip()]
    else:
        raise OpError("give either email, or both name and zip")
    if not hits:
        raise OpError("no customer matches these details")
    return {"customer_id": hits[0]["customer_id"]}


def get_customer(db, args):
    customer = db["customers"].get(str(args["customer_id"]).strip())
    if customer is None:
        raise OpError("customer %r not found; find_customer gives the id" % args["customer_id"])
    return customer


def get_order(db, args):
    return _order(db, args["order_id"])


def list_products(db, args):
    return sorted(({"product_id": p["product_id"], "name": p["name"]} for p in db["products"].values()),
                  key=lambda p: (p["name"], p["product_id"]))


def get_product(db, args):
    product = db["products"].get(str(args["product_id"]).strip())
    if product is None:
        raise OpError("product %r not found; list_products lists them" % args["product_id"])
    return product


def cancel_order(db, args):
    order = _order(db, args["order_id"])
    if args["reason"] not in CANCEL_REASONS:
        raise OpError("reason must be one of %s" % ", ".join(repr(r) for r in CANCEL_REASONS))
    order["status"] = "cancelled"
    order["cancel_reason"] = args["reason"]
    return order


def modify_address(db, args):
    order = _order(db, args["order_id"])
    address = dict((f, str(args.get(f) or "").strip()) for f in ADDRESS_FIELDS)
    empty = [f for f in ADDRESS_FIELDS if f != "address2" and not address[f]]
    if empty:
        raise OpError("address field(s) %s must not be empty" % ", ".join(empty))
    order["address"] = address
    return order


def return_items(db, args):
    order = _order(db, args["order_id"])
    items = _order_items(order, list(args["item_ids"]))
    methods = [m["id"] for m in db["customers"][order["customer_id"]]["payment_methods"]]
    if args["payment_method_id"] not in methods:
        raise OpError("payment method %r is not one of the customer's (%s)"
                      % (args["payment_method_id"], ", ".join(methods)))
    order["status"] = "return requested"
    order["return"] = {
        "item_ids": sorted(item["item_id"] for item in items),
        "payment_method_id": args["payment_method_id"],
        "refund_amount": round(sum(item["price"] for item in items), 2),
    }
    return order


def exchange_items(db, args):
    order = _order(db, args["order_id"])
    old_ids, new_ids = list(args["item_ids"]), list(args["new_item_ids"])
    if len(old_ids) != len(new_ids):
        raise OpError("item_ids and new_item_ids must have the same length (one new item per old item)")
    items = _order_items(order, old_ids)
    new_prices = []
    for new_id in new_ids:
        variant = find_variant(db, new_id)[1]
        if variant is None:
            raise OpError("new item %r is not in the catalog; get_product lists item ids" % new_id)
        new_prices.append(variant["price"])
    pairs = sorted((old_ids[i], new_ids[i]) for i in range(len(old_ids)))
    order["status"] = "exchange requested"
    order["exchange"] = {
        "item_ids": [old for old, _ in pairs],
        "new_item_ids": [new for _, new in pairs],
        "price_difference": round(sum(new_prices) - sum(item["price"] for item in items), 2),
    }
    return order


OPS = {f.__name__: f for f in (find_customer, get_customer, get_order, list_products, get_product,
                               cancel_order, modify_address, return_items, exchange_items)}


def run(db: dict, op: str, args: dict) -> Any:
    """Apply ``op`` to ``db`` (changed in place); returns a copy of its result. Raises OpError."""
    if op not in OPS:
        raise OpError("unknown operation %r" % op)
    return copy.deepcopy(OPS[op](db, args))


def main(argv):
    if len(argv) != 4:
        sys.stderr.write("usage: orderdesk_program.py DB_PATH OP ARGS_JSON\n")
        return 2
    path, op, raw = argv[1], argv[2], argv[3]
    with open(path) as f:
        db = json.load(f)
    try:
        result = run(db, op, json.loads(raw))
    except OpError as e:
        sys.stderr.write("Error: %s\n" % e)
        return 1
    if op in MUTATING:
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(db, f, sort_keys=True)
        os.replace(tmp, path)
    sys.stdout.write(json.dumps(result, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
