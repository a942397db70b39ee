"""Question templates for SqlQuery, with answers computed on the host from the generated data (no SQL).

Each template returns a :class:`Question` (text, a reference SQL query for the oracle, the answer) or None
when the drawn parameters do not give a unique, meaningful answer (a tie for an argmax, an empty group);
:func:`make_question` then draws again. Levels: 1 one table, 2 one join or a group aggregate,
3 several joins with an aggregate, ranking or anti-join.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from .sql_answers import Answer
from .sql_data import CANCELLED, YEARS, Database

MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December")
MAX_DRAWS = 50


@dataclass(frozen=True)
class Question:
    template: str
    text: str
    sql: str
    """A query whose result is the answer (the oracle's)."""
    answer: Answer


def lit(text: str) -> str:
    """``text`` as an SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


def _draw(rng: np.random.Generator, options: list[str] | tuple[str, ...]) -> str:
    return options[int(rng.integers(len(options)))]


def _argmax(totals: Mapping[Hashable, int | Fraction]) -> Hashable | None:
    """The key with the strictly largest value, or None on a tie (or when empty)."""
    ranked = sorted(totals.items(), key=lambda kv: kv[1], reverse=True)
    if not ranked or (len(ranked) > 1 and ranked[0][1] == ranked[1][1]):
        return None
    return ranked[0][0]


def _revenue(db: Database, key: Callable[..., Hashable | None]) -> dict[Hashable, int]:
    """Cents of quantity x unit price over lines of non-cancelled orders, grouped by ``key(line, order)``."""
    totals: dict[Hashable, int] = defaultdict(int)
    for ln in db.lines:
        order = db.order_of(ln)
        group = key(ln, order)
        if order.status != CANCELLED and group is not None:
            totals[group] += ln.qty * ln.cents
    return dict(totals)


# ------------------------------------------------------------------------------------------- level 1


def count_city(db: Database, rng: np.random.Generator) -> Question | None:
    s, city = db.schema, _draw(rng, sorted({p.city for p in db.persons}))
    n = sum(p.city == city for p in db.persons)
    return Question("count_city", f"How many {s.person_noun}s are located in {city}?",
                    f"SELECT COUNT(*) FROM {s.person} WHERE {s.p_city} = {lit(city)}", Answer.integer(n))


def count_status(db: Database, rng: np.random.Generator) -> Question | None:
    s, status = db.schema, _draw(rng, sorted({o.status for o in db.orders}))
    n = sum(o.status == status for o in db.orders)
    return Question("count_status", f"How many {s.order_noun}s have the status '{status}'?",
                    f"SELECT COUNT(*) FROM {s.order} WHERE {s.o_status} = {lit(status)}", Answer.integer(n))


def count_price_above(db: Database, rng: np.random.Generator) -> Question | None:
    s, dollars = db.schema, int(rng.integers(10, 90))
    n = sum(i.cents > dollars * 100 for i in db.items)
    return Question("count_price_above", f"How many {s.item_noun}s have a price above {dollars} dollars?",
                    f"SELECT COUNT(*) FROM {s.item} WHERE {s.i_price} > {dollars}", Answer.integer(n))


def count_joined(db: Database, rng: np.random.Generator) -> Question | None:
    s, year = db.schema, int(rng.integers(2019, 2025))
    n = sum(p.joined >= year for p in db.persons)
    return Question("count_joined", f"How many {s.person_noun}s joined in {year} or later?",
                    f"SELECT COUNT(*) FROM {s.person} WHERE {s.p_joined} >= {year}", Answer.integer(n))


def extreme_price(db: Database, rng: np.random.Generator) -> Question | None:
    s, high = db.schema, bool(rng.integers(2))
    best = _argmax({i.name: i.cents if high else -i.cents for i in db.items})
    if best is None:
        return None
    word, order = ("most", "DESC") if high else ("least", "ASC")
    return Question("extreme_price", f"Which {s.item_noun} is the {word} expensive? Answer with its name.",
                    f"SELECT {s.i_name} FROM {s.item} ORDER BY {s.i_price} {order} LIMIT 1",
                    Answer.text(str(best)))


# ------------------------------------------------------------------------------------------- level 2


def avg_price_category(db: Database, rng: np.random.Generator) -> Question | None:
    s, cat = db.schema, _draw(rng, sorted({i.category for i in db.items}))
    prices = [i.cents for i in db.items if i.category == cat]
    mean = Fraction(sum(prices), 100 * len(prices))
    return Question("avg_price_category",
                    f"What is the average price of the {s.item_noun}s in the category '{cat}'? Round to 2 "
                    f"decimal places.",
                    f"SELECT ROUND(AVG({s.i_price}), 2) FROM {s.item} WHERE {s.i_category} = {lit(cat)}",
                    Answer.number(mean))


def orders_from_city(db: Database, rng: np.random.Generator) -> Question | None:
    s, city = db.schema, _draw(rng, sorted({p.city for p in db.persons}))
    n = sum(db.person_of(o).city == city for o in db.orders)
    return Question("orders_from_city",
                    f"How many {s.order_noun}s (of any status) were placed by {s.person_noun}s located in "
                    f"{city}?",
                    f"SELECT COUNT(*) FROM {s.order} o JOIN {s.person} p ON p.id = o.{s.o_person} "
                    f"WHERE p.{s.p_city} = {lit(city)}", Answer.integer(n))


def units_of_item(db: Database, rng: np.random.Generator) -> Question | None:
    s = db.schema
    sold = sorted({db.item_of(ln).name for ln in db.lines})
    name = _draw(rng, sold)
    n = sum(ln.qty for ln in db.lines if db.item_of(ln).name == name)
    return Question("units_of_item",
                    f"How many units of the {s.item_noun} '{name}' were ordered in total, over all "
                    f"{s.order_noun}s regardless of status?",
                    f"SELECT SUM(l.{s.l_qty}) FROM {s.line} l JOIN {s.item} i ON i.id = l.{s.l_item} "
                    f"WHERE i.{s.i_name} = {lit(name)}", Answer.integer(n))


def most_orders(db: Database, rng: np.random.Generator) -> Question | None:
    s = db.schema
    best = _argmax(Counter(db.person_of(o).name for o in db.orders))
    if best is None:
        return None
    return Question("most_orders",
                    f"Which {s.person_noun} placed the most {s.order_noun}s (counting every status)? Answer "
                    f"with their name.",
                    f"SELECT p.{s.p_name}, COUNT(*) AS n FROM {s.order} o JOIN {s.person} p "
                    f"ON p.id = o.{s.o_person} GROUP BY p.id ORDER BY n DESC LIMIT 1", Answer.text(str(best)))


def orders_in_month(db: Database, rng: np.random.Generator) -> Question | None:
    s, year, month = db.schema, _draw(rng, [str(y) for y in YEARS]), int(rng.integers(1, 13))
    prefix = f"{year}-{month:02d}-"
    n = sum(o.date.startswith(prefix) for o in db.orders)
    return Question("orders_in_month",
                    f"How many {s.order_noun}s were placed in {MONTHS[month - 1]} {year} (any status)?",
                    f"SELECT COUNT(*) FROM {s.order} WHERE {s.o_date} LIKE '{prefix}%'", Answer.integer(n))


# ------------------------------------------------------------------------------------------- level 3

REVENUE = "revenue is quantity x unit price summed over the lines of {o}s that are not cancelled"
LINE_JOIN = "FROM {line} l JOIN {order} o ON o.id = l.{l_order} "


def _revenue_sql(db: Database) -> tuple[str, str]:
    s = db.schema
    return (f"SUM(l.{s.l_qty} * l.{s.l_price})",
            LINE_JOIN.format(line=s.line, order=s.order, l_order=s.l_order))


def top_spender(db: Database, rng: np.random.Generator) -> Question | None:
    s = db.schema
    best = _argmax(_revenue(db, lambda ln, o: db.person_of(o).name))
    if best is None:
        return None
    total, joins = _revenue_sql(db)
    return Question("top_spender",
                    f"Which {s.person_noun} spent the most money in total? "
                    f"({REVENUE.format(o=s.order_noun)}.) Answer with their name.",
                    f"SELECT p.{s.p_name}, {total} AS spent {joins}JOIN {s.person} p "
                    f"ON p.id = o.{s.o_person} WHERE o.{s.o_status} <> '{CANCELLED}' GROUP BY p.id "
                    f"ORDER BY spent DESC LIMIT 1",
                    Answer.text(str(best)))


def top_items(db: Database, rng: np.random.Generator) -> Question | None:
    s, n = db.schema, int(rng.integers(2, 4))
    ranked = sorted(_revenue(db, lambda ln, o: db.item_of(ln).name).items(), key=lambda kv: -kv[1])
    values = [v for _, v in ranked[: n + 1]]
    if len(ranked) <= n or len(set(values)) != n + 1:
        return None
    total, joins = _revenue_sql(db)
    return Question("top_items",
                    f"List the {n} {s.item_noun}s with the highest revenue, highest first, as a "
                    f"comma-separated list of names. ({REVENUE.format(o=s.order_noun).capitalize()}.)",
                    f"SELECT i.{s.i_name}, {total} AS revenue {joins}JOIN {s.item} i ON i.id = l.{s.l_item} "
                    f"WHERE o.{s.o_status} <> '{CANCELLED}' GROUP BY i.id ORDER BY revenue DESC LIMIT {n}",
                    Answer.ordered([str(k) for k, _ in ranked[:n]]))


def city_revenue(db: Database, rng: np.random.Generator) -> Question | None:
    s, year = db.schema, _draw(rng, [str(y) for y in YEARS])
    best = _argmax(_revenue(db, lambda ln, o: db.person_of(o).city if o.date.startswith(year) else None))
    if best is None:
        return None
    total, joins = _revenue_sql(db)
    return Question("city_revenue",
                    f"Which city's {s.person_noun}s brought the most revenue from {s.order_noun}s placed in "
                    f"{year}? ({REVENUE.format(o=s.order_noun).capitalize()}.) Answer with the city.",
                    f"SELECT p.{s.p_city}, {total} AS revenue {joins}JOIN {s.person} p "
                    f"ON p.id = o.{s.o_person} WHERE o.{s.o_status} <> '{CANCELLED}' AND o.{s.o_date} LIKE "
                    f"'{year}-%' GROUP BY p.{s.p_city} ORDER BY revenue DESC LIMIT 1", Answer.text(str(best)))


def category_revenue(db: Database, rng: np.random.Generator) -> Question | None:
    s, year = db.schema, _draw(rng, [str(y) for y in YEARS])
    cat = _draw(rng, sorted({i.category for i in db.items}))
    totals = _revenue(db, lambda ln, o: "x" if o.date.startswith(year) and db.item_of(ln).category == cat
                      else None)
    if not totals:
        return None
    total, joins = _revenue_sql(db)
    return Question("category_revenue",
                    f"What was the total revenue of {s.item_noun}s in the category '{cat}' from "
                    f"{s.order_noun}s placed in {year}? ({REVENUE.format(o=s.order_noun).capitalize()}.) "
                    f"Round to 2 decimal places.",
                    f"SELECT ROUND({total}, 2) {joins}JOIN {s.item} i ON i.id = l.{s.l_item} "
                    f"WHERE o.{s.o_status} <> '{CANCELLED}' AND o.{s.o_date} LIKE '{year}-%' "
                    f"AND i.{s.i_category} = {lit(cat)}", Answer.number(Fraction(totals["x"], 100)))


def never_ordered(db: Database, rng: np.random.Generator) -> Question | None:
    s = db.schema
    buyers = {o.person_id for o in db.orders}
    names = [p.name for p in db.persons if p.id not in buyers]
    if not 1 <= len(names) <= 6:
        return None
    article = "an" if s.order_noun[0] in "aeiou" else "a"
    return Question("never_ordered",
                    f"Which {s.person_noun}s have never placed {article} {s.order_noun}? List all their "
                    f"names, comma-separated, in any order.",
                    f"SELECT {s.p_name} FROM {s.person} WHERE id NOT IN (SELECT {s.o_person} FROM {s.order})",
                    Answer.unordered(names))


Template = Callable[[Database, np.random.Generator], Question | None]
TEMPLATES: dict[int, tuple[Template, ...]] = {
    1: (count_city, count_status, count_price_above, count_joined, extreme_price),
    2: (avg_price_category, orders_from_city, units_of_item, most_orders, orders_in_month),
    3: (top_spender, top_items, city_revenue, category_revenue, never_ordered),
}


def make_question(db: Database, rng: np.random.Generator, level: int) -> Question:
    """A question of ``level`` about ``db`` with a unique answer; templates are redrawn on ties."""
    templates = TEMPLATES[level]
    for _ in range(MAX_DRAWS):
        question = templates[int(rng.integers(len(templates)))](db, rng)
        if question is not None:
            return question
    question = count_city(db, rng)
    assert question is not None
    return question
