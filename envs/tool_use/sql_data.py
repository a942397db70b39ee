"""Seeded shop-like databases for SqlQuery: three schema variants of one shape, data drawn from a seed.

Every variant has four tables in the same roles, under its own table and column names:

    person (id, name, city, joined year)       customers / members / clients
    item   (id, name, category, price)         products / books / parts
    order  (id, person id, date, status)       orders / purchases / purchase_orders
    line   (id, order id, item id, quantity, unit price)

Prices are kept in whole cents on the host (exact answers) and stored as REAL dollars in SQLite. A line's
unit price is its item's price, sometimes discounted by 10%, so "revenue" questions must use the line.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np

FIRST = ("Ada", "Ben", "Cleo", "Dan", "Eva", "Finn", "Gia", "Hugo", "Ines", "Jon", "Kai", "Lena", "Milo",
         "Nora", "Omar", "Pia", "Quinn", "Rosa", "Sam", "Tara", "Uma", "Viktor", "Wren", "Yara", "Zed")
LAST = ("Adams", "Baker", "Chen", "Diaz", "Evans", "Fischer", "Garcia", "Hill", "Ito", "Jensen", "Khan",
        "Lopez", "Moreau", "Novak", "Okafor", "Park", "Rossi", "Silva", "Tanaka", "Weber")
CITIES = ("Oslo", "Lisbon", "Austin", "Kyoto", "Nairobi", "Lima", "Porto", "Dublin", "Seoul", "Quebec")
STATUSES = ("pending", "shipped", "delivered", "cancelled")
STATUS_P = (0.15, 0.3, 0.4, 0.15)
CANCELLED = "cancelled"
YEARS = (2023, 2024)


@dataclass(frozen=True)
class Schema:
    """Table/column names and nouns of one variant."""

    key: str
    about: str
    person: str
    person_noun: str
    p_name: str
    p_city: str
    p_joined: str
    item: str
    item_noun: str
    i_name: str
    i_category: str
    i_price: str
    order: str
    order_noun: str
    o_person: str
    o_date: str
    o_status: str
    line: str
    l_order: str
    l_item: str
    l_qty: str
    l_price: str
    categories: tuple[str, ...]
    adjectives: tuple[str, ...]
    nouns: tuple[str, ...]


SCHEMAS: tuple[Schema, ...] = (
    Schema("shop", "an online shop", "customers", "customer", "name", "city", "signup_year",
           "products", "product", "name", "category", "price",
           "orders", "order", "customer_id", "order_date", "status",
           "order_items", "order_id", "product_id", "quantity", "unit_price",
           ("electronics", "kitchen", "garden", "toys", "sports"),
           ("Compact", "Deluxe", "Classic", "Smart", "Portable", "Eco", "Mini", "Turbo"),
           ("Blender", "Lamp", "Kettle", "Speaker", "Backpack", "Drill", "Puzzle", "Tent", "Mug", "Charger")),
    Schema("bookstore", "a bookstore", "members", "member", "full_name", "city", "joined_year",
           "books", "book", "title", "genre", "list_price",
           "purchases", "purchase", "member_id", "purchased_on", "status",
           "purchase_lines", "purchase_id", "book_id", "copies", "unit_price",
           ("mystery", "fantasy", "history", "poetry", "science"),
           ("Silent", "Golden", "Hidden", "Last", "Broken", "Winter", "Distant", "Crimson"),
           ("River", "Garden", "Empire", "Letters", "Harbor", "Forest", "Atlas", "Orchard", "Tower", "Map")),
    Schema("wholesale", "a parts wholesaler", "clients", "client", "company", "city", "client_since",
           "parts", "part", "part_name", "family", "unit_cost",
           "purchase_orders", "purchase order", "client_id", "ordered_on", "state",
           "po_lines", "po_id", "part_id", "qty", "price_each",
           ("fasteners", "valves", "bearings", "cables", "filters"),
           ("Steel", "Brass", "Nylon", "Heavy", "Micro", "Sealed", "Flex", "Coated"),
           ("Bolt", "Valve", "Bearing", "Clamp", "Hose", "Washer", "Gasket", "Spring", "Filter", "Cable")),
)


@dataclass(frozen=True)
class Person:
    id: int
    name: str
    city: str
    joined: int


@dataclass(frozen=True)
class Item:
    id: int
    name: str
    category: str
    cents: int


@dataclass(frozen=True)
class Order:
    id: int
    person_id: int
    date: str
    status: str


@dataclass(frozen=True)
class Line:
    id: int
    order_id: int
    item_id: int
    qty: int
    cents: int
    """Unit price in cents."""


@dataclass(frozen=True)
class Database:
    schema: Schema
    persons: tuple[Person, ...]
    items: tuple[Item, ...]
    orders: tuple[Order, ...]
    lines: tuple[Line, ...]

    def spec(self) -> dict[str, Any]:
        """The JSON spec the in-sandbox helper builds the SQLite file from."""
        s = self.schema
        return {"tables": [
            {"name": s.person, "rows": [[p.id, p.name, p.city, p.joined] for p in self.persons],
             "ddl": f"CREATE TABLE {s.person} (id INTEGER PRIMARY KEY, {s.p_name} TEXT NOT NULL, "
                    f"{s.p_city} TEXT NOT NULL, {s.p_joined} INTEGER NOT NULL)"},
            {"name": s.item, "rows": [[i.id, i.name, i.category, i.cents / 100] for i in self.items],
             "ddl": f"CREATE TABLE {s.item} (id INTEGER PRIMARY KEY, {s.i_name} TEXT NOT NULL, "
                    f"{s.i_category} TEXT NOT NULL, {s.i_price} REAL NOT NULL)"},
            {"name": s.order, "rows": [[o.id, o.person_id, o.date, o.status] for o in self.orders],
             "ddl": f"CREATE TABLE {s.order} (id INTEGER PRIMARY KEY, {s.o_person} INTEGER NOT NULL "
                    f"REFERENCES {s.person}(id), {s.o_date} TEXT NOT NULL, {s.o_status} TEXT NOT NULL)"},
            {"name": s.line, "rows": [[ln.id, ln.order_id, ln.item_id, ln.qty, ln.cents / 100]
                                      for ln in self.lines],
             "ddl": f"CREATE TABLE {s.line} (id INTEGER PRIMARY KEY, {s.l_order} INTEGER NOT NULL "
                    f"REFERENCES {s.order}(id), {s.l_item} INTEGER NOT NULL REFERENCES {s.item}(id), "
                    f"{s.l_qty} INTEGER NOT NULL, {s.l_price} REAL NOT NULL)"},
        ]}

    def spec_json(self) -> str:
        return json.dumps(self.spec(), separators=(",", ":"))

    # ------------------------------------------------------------------------------- host-side lookups

    def person_of(self, order: Order) -> Person:
        return self.persons[order.person_id - 1]

    def item_of(self, line: Line) -> Item:
        return self.items[line.item_id - 1]

    def order_of(self, line: Line) -> Order:
        return self.orders[line.order_id - 1]


def _pick(rng: np.random.Generator, options: tuple[str, ...]) -> str:
    return options[int(rng.integers(len(options)))]


def _unique_names(rng: np.random.Generator, left: tuple[str, ...], right: tuple[str, ...], n: int,
                  fmt: str) -> list[str]:
    combos = [fmt.format(a, b) for a in left for b in right]
    picks = rng.choice(len(combos), size=n, replace=False)
    return [combos[int(i)] for i in picks]


def _persons(rng: np.random.Generator) -> tuple[Person, ...]:
    n = int(rng.integers(12, 31))
    cities = list(rng.choice(CITIES, size=int(rng.integers(4, 7)), replace=False))
    names = _unique_names(rng, FIRST, LAST, n, "{} {}")
    return tuple(Person(i + 1, names[i], str(_pick(rng, tuple(cities))), int(rng.integers(2018, 2025)))
                 for i in range(n))


def _items(rng: np.random.Generator, s: Schema) -> tuple[Item, ...]:
    n = int(rng.integers(10, 25))
    fmt = "The {} {}" if s.key == "bookstore" else "{} {}"
    names = _unique_names(rng, s.adjectives, s.nouns, n, fmt)
    return tuple(Item(i + 1, names[i], _pick(rng, s.categories), int(rng.integers(3, 200)) * 50 - 1)
                 for i in range(n))


def _date(rng: np.random.Generator) -> str:
    day = np.datetime64("2023-01-01") + int(rng.integers(0, 731))
    return str(day)


def _orders(rng: np.random.Generator, persons: tuple[Person, ...]) -> tuple[Order, ...]:
    n = int(rng.integers(25, 91))
    active = rng.choice(len(persons), size=max(1, len(persons) - int(rng.integers(0, 5))), replace=False)
    dates = sorted(_date(rng) for _ in range(n))
    return tuple(Order(i + 1, int(active[int(rng.integers(len(active)))]) + 1, dates[i],
                       str(rng.choice(STATUSES, p=STATUS_P))) for i in range(n))


def _lines(rng: np.random.Generator, orders: tuple[Order, ...], items: tuple[Item, ...]) -> tuple[Line, ...]:
    lines: list[Line] = []
    for order in orders:
        k = int(rng.integers(1, 5))
        for idx in rng.choice(len(items), size=k, replace=False):
            item = items[int(idx)]
            cents = item.cents if rng.random() > 0.2 else round(item.cents * 0.9)
            lines.append(Line(len(lines) + 1, order.id, item.id, int(rng.integers(1, 6)), cents))
    return tuple(lines)


def make_database(rng: np.random.Generator, schema: Schema | None = None) -> Database:
    """A database of ``schema`` (a random variant when None) drawn from ``rng``."""
    s = schema or SCHEMAS[int(rng.integers(len(SCHEMAS)))]
    persons = _persons(rng)
    items = _items(rng, s)
    orders = _orders(rng, persons)
    return Database(s, persons, items, orders, _lines(rng, orders, items))
