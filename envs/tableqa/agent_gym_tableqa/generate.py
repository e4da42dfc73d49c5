"""Procedurally generated tables and verifiable questions over them.

A task is fully determined by ``(split, difficulty, index)``: :func:`generate_task` seeds Python's
``random.Random`` with the string ``"tableqa/<split>/<difficulty>/<index>"`` (string seeds are hashed
with SHA-512, so the task is the same in every process and on every machine, whatever
``PYTHONHASHSEED`` is). Splits use disjoint seeds.

Two tables per task:

- ``orders`` (200-400 rows): ``order_id`` int, ``date`` date (one year), ``region`` str category,
  ``product`` str (a key into ``products``), ``quantity`` int, ``unit_price`` float (2 decimals);
- ``products`` (8-14 rows): ``product`` str, ``category`` str, ``supplier`` str, ``list_price``
  float, ``launch_year`` int.

Questions come from templates per difficulty: ``easy`` (one filter and an aggregate: count, sum, mean,
max), ``medium`` (two conditions, date ranges, group-by arg-max), ``hard`` (a join of the two tables,
then filters, group-by, arg-max; one answer is a date). Answers are computed exactly (money in integer
cents, means as fractions); questions whose answer is ill-defined (an empty filter, a tied arg-max)
are redrawn. Every task carries a reference pandas solution (used by the tests, never shown).
"""

from __future__ import annotations

import calendar
import csv
import datetime as dt
import io
import random
from collections import Counter, defaultdict
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Callable

from agent_gym.core.tasks import GeneratedTaskId

__all__ = ["DIFFICULTIES", "SPLITS", "Table", "TableTask", "generate_task", "parse_task_id"]

SPLITS: tuple[str, ...] = ("train", "test")
DIFFICULTIES: tuple[str, ...] = ("easy", "medium", "hard")

_REGIONS = ["North", "South", "East", "West", "Central"]
_CATEGORIES = ["Furniture", "Electronics", "Office", "Kitchen", "Outdoor", "Toys", "Garden"]
_SUPPLIERS = ["Acme Corp", "Globex", "Initech", "Umbrella", "Stark Supply", "Wayne Goods", "Hooli"]
_ADJECTIVES = ["Alpha", "Nova", "Zen", "Apex", "Luna", "Orbit", "Pixel", "Terra", "Echo", "Vista", "Polar", "Ember"]
_NOUNS = ["Desk", "Lamp", "Chair", "Kettle", "Router", "Stapler", "Tent", "Drone", "Shelf", "Blender", "Speaker", "Planter"]


@dataclass(frozen=True)
class Table:
    """A table: its name, typed columns and rows (dates as ``datetime.date``, money as floats)."""

    name: str
    columns: tuple[tuple[str, str], ...]
    rows: tuple[tuple[Any, ...], ...]

    @property
    def filename(self) -> str:
        return f"{self.name}.csv"

    def to_csv(self) -> str:
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow([c for c, _ in self.columns])
        for row in self.rows:
            writer.writerow([_cell(v) for v in row])
        return buf.getvalue()

    def head(self, n: int = 3) -> str:
        """The header and first ``n`` rows as CSV text (for the prompt)."""
        return "\n".join(self.to_csv().splitlines()[: n + 1])


def _cell(value: Any) -> str:
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


@dataclass(frozen=True)
class TableTask:
    """One question over generated tables.

    Attributes:
        id: ``"<split>-<difficulty>-<index>"``.
        question: the question shown to the policy.
        answer: the reference answer as text (numbers rounded as the question asks).
        answer_type: ``int``, ``decimal`` (2 decimal places), ``str`` or ``date`` (``YYYY-MM-DD``).
        exact: the exact value (``Fraction`` for numbers, ``str`` otherwise) that answers are checked against.
        solution: a reference pandas solution that prints the answer (never shown to the policy).
        template: which question template produced it.
    """

    id: str
    split: str
    difficulty: str
    index: int
    tables: tuple[Table, ...]
    question: str
    answer: str
    answer_type: str
    exact: Any
    solution: str
    template: str

    def files(self) -> dict[str, str]:
        """The tables as CSV files, for the sandbox's working directory."""
        return {t.filename: t.to_csv() for t in self.tables}


def parse_task_id(task_id: str) -> GeneratedTaskId:
    """``"test-hard-42"`` -> ``("test", "hard", 42)``; ``KeyError`` with the expected form otherwise."""
    return GeneratedTaskId.parse(task_id, splits=SPLITS, variants=DIFFICULTIES, name="TableQA task")


# ---------------------------------------------------------------------------------------------------
# tables


@dataclass
class _Db:
    year: int
    orders: list[dict[str, Any]]
    products: dict[str, dict[str, Any]]
    regions: list[str]


def _make_db(rng: random.Random) -> _Db:
    year = rng.randint(2019, 2024)
    n_products = rng.randint(8, 14)
    names: set[str] = set()
    while len(names) < n_products:
        names.add(f"{rng.choice(_ADJECTIVES)} {rng.choice(_NOUNS)}")
    categories = rng.sample(_CATEGORIES, rng.randint(3, 5))
    suppliers = rng.sample(_SUPPLIERS, rng.randint(3, 5))
    products: dict[str, dict[str, Any]] = {}
    for name in sorted(names):
        products[name] = {
            "product": name,
            "category": rng.choice(categories),
            "supplier": rng.choice(suppliers),
            "list_cents": rng.randint(5, 500) * 100 + rng.choice([0, 49, 95, 99]),
            "launch_year": rng.randint(year - 8, year),
        }
    regions = rng.sample(_REGIONS, rng.randint(4, 5))
    n_orders = rng.randint(200, 400)
    weights = [rng.uniform(0.3, 3.0) for _ in products]
    start = dt.date(year, 1, 1)
    days = 366 if calendar.isleap(year) else 365
    orders = []
    for i in range(n_orders):
        name = rng.choices(list(products), weights)[0]
        discount = rng.choice([100, 100, 100, 95, 90, 85])
        orders.append(
            {
                "order_id": i + 1,
                "date": start + dt.timedelta(days=rng.randrange(days)),
                "region": rng.choice(regions),
                "product": name,
                "quantity": rng.randint(1, 20),
                "cents": products[name]["list_cents"] * discount // 100,
            }
        )
    return _Db(year, orders, products, regions)


def _tables(db: _Db) -> tuple[Table, ...]:
    orders = Table(
        "orders",
        (("order_id", "int"), ("date", "date"), ("region", "str"), ("product", "str"), ("quantity", "int"), ("unit_price", "float")),
        tuple((o["order_id"], o["date"], o["region"], o["product"], o["quantity"], o["cents"] / 100) for o in db.orders),
    )
    products = Table(
        "products",
        (("product", "str"), ("category", "str"), ("supplier", "str"), ("list_price", "float"), ("launch_year", "int")),
        tuple((p["product"], p["category"], p["supplier"], p["list_cents"] / 100, p["launch_year"]) for p in db.products.values()),
    )
    return orders, products


# ---------------------------------------------------------------------------------------------------
# questions: each template returns (question, exact, answer_type, solution) or None to redraw

_Q = tuple[str, Any, str, str]
_MONTHS = list(calendar.month_name)


def _cents(total: int) -> Fraction:
    return Fraction(total, 100)


def _unique_argmax(totals: dict[Any, Any]) -> Any | None:
    if not totals:
        return None
    best = max(totals.values())
    winners = [k for k, v in totals.items() if v == best]
    return winners[0] if len(winners) == 1 else None


def _quarter(d: dt.date) -> int:
    return (d.month - 1) // 3 + 1


def _e_count_region(rng: random.Random, db: _Db) -> _Q | None:
    region = rng.choice(db.regions)
    n = sum(o["region"] == region for o in db.orders)
    return (
        f"How many orders were placed in the {region} region?",
        Fraction(n), "int",
        f"print(len(orders[orders['region'] == {region!r}]))",
    )


def _e_total_quantity_product(rng: random.Random, db: _Db) -> _Q | None:
    product = rng.choice(sorted({o["product"] for o in db.orders}))
    total = sum(o["quantity"] for o in db.orders if o["product"] == product)
    return (
        f"What is the total quantity ordered of the product {product}?",
        Fraction(total), "int",
        f"print(orders.loc[orders['product'] == {product!r}, 'quantity'].sum())",
    )


def _e_mean_price_product(rng: random.Random, db: _Db) -> _Q | None:
    product = rng.choice(sorted({o["product"] for o in db.orders}))
    prices = [o["cents"] for o in db.orders if o["product"] == product]
    return (
        f"What is the average unit price over all orders of the product {product}? Round to 2 decimal places.",
        Fraction(sum(prices), 100 * len(prices)), "decimal",
        f"print(round(orders.loc[orders['product'] == {product!r}, 'unit_price'].mean(), 2))",
    )


def _e_max_quantity_region(rng: random.Random, db: _Db) -> _Q | None:
    region = rng.choice(db.regions)
    qs = [o["quantity"] for o in db.orders if o["region"] == region]
    if not qs:
        return None
    return (
        f"What is the largest quantity in a single order in the {region} region?",
        Fraction(max(qs)), "int",
        f"print(orders.loc[orders['region'] == {region!r}, 'quantity'].max())",
    )


def _e_count_quantity_gt(rng: random.Random, db: _Db) -> _Q | None:
    k = rng.randint(5, 17)
    n = sum(o["quantity"] > k for o in db.orders)
    return (
        f"How many orders have a quantity greater than {k}?",
        Fraction(n), "int",
        f"print((orders['quantity'] > {k}).sum())",
    )


def _m_revenue_region_month(rng: random.Random, db: _Db) -> _Q | None:
    region, month = rng.choice(db.regions), rng.randint(1, 12)
    rows = [o for o in db.orders if o["region"] == region and o["date"].month == month]
    if not rows:
        return None
    total = sum(o["quantity"] * o["cents"] for o in rows)
    return (
        f"What was the total revenue (quantity times unit price) of the orders in the {region} region in "
        f"{_MONTHS[month]} {db.year}? Round to 2 decimal places.",
        _cents(total), "decimal",
        f"m = orders[(orders['region'] == {region!r}) & (orders['date'].dt.month == {month})]\n"
        "print(round((m['quantity'] * m['unit_price']).sum(), 2))",
    )


def _m_argmax_product_region(rng: random.Random, db: _Db) -> _Q | None:
    region = rng.choice(db.regions)
    totals: dict[str, int] = defaultdict(int)
    for o in db.orders:
        if o["region"] == region:
            totals[o["product"]] += o["quantity"]
    best = _unique_argmax(totals)
    if best is None:
        return None
    return (
        f"Which product had the highest total quantity ordered in the {region} region?",
        best, "str",
        f"print(orders[orders['region'] == {region!r}].groupby('product')['quantity'].sum().idxmax())",
    )


def _m_count_daterange_quantity(rng: random.Random, db: _Db) -> _Q | None:
    start = dt.date(db.year, 1, 1) + dt.timedelta(days=rng.randrange(300))
    end = start + dt.timedelta(days=rng.randint(14, 60))
    k = rng.randint(5, 15)
    n = sum(start <= o["date"] <= end and o["quantity"] >= k for o in db.orders)
    if n == 0:
        return None
    return (
        f"How many orders placed between {start.isoformat()} and {end.isoformat()} (both inclusive) have a "
        f"quantity of at least {k}?",
        Fraction(n), "int",
        f"m = orders[(orders['date'] >= {start.isoformat()!r}) & (orders['date'] <= {end.isoformat()!r})]\n"
        f"print((m['quantity'] >= {k}).sum())",
    )


def _m_mean_quantity_product_quarter(rng: random.Random, db: _Db) -> _Q | None:
    product, q = rng.choice(sorted({o["product"] for o in db.orders})), rng.randint(1, 4)
    qs = [o["quantity"] for o in db.orders if o["product"] == product and _quarter(o["date"]) == q]
    if not qs:
        return None
    return (
        f"What was the average quantity per order of the product {product} in quarter Q{q} of {db.year} "
        f"(months {3 * q - 2}-{3 * q})? Round to 2 decimal places.",
        Fraction(sum(qs), len(qs)), "decimal",
        f"m = orders[(orders['product'] == {product!r}) & (orders['date'].dt.quarter == {q})]\n"
        "print(round(m['quantity'].mean(), 2))",
    )


def _m_argmax_region_month(rng: random.Random, db: _Db) -> _Q | None:
    month = rng.randint(1, 12)
    counts = Counter(o["region"] for o in db.orders if o["date"].month == month)
    best = _unique_argmax(dict(counts))
    if best is None:
        return None
    return (
        f"Which region had the most orders in {_MONTHS[month]} {db.year}?",
        best, "str",
        f"print(orders[orders['date'].dt.month == {month}]['region'].value_counts().idxmax())",
    )


_JOIN = "j = orders.merge(products, on='product')\n"


def _h_revenue_category(rng: random.Random, db: _Db) -> _Q | None:
    category = rng.choice(sorted({p["category"] for p in db.products.values()}))
    rows = [o for o in db.orders if db.products[o["product"]]["category"] == category]
    if not rows:
        return None
    total = sum(o["quantity"] * o["cents"] for o in rows)
    return (
        f"What was the total revenue (quantity times unit price) of the orders for products in the {category} "
        "category? Round to 2 decimal places.",
        _cents(total), "decimal",
        _JOIN + f"m = j[j['category'] == {category!r}]\nprint(round((m['quantity'] * m['unit_price']).sum(), 2))",
    )


def _h_argmax_supplier_region(rng: random.Random, db: _Db) -> _Q | None:
    region = rng.choice(db.regions)
    totals: dict[str, int] = defaultdict(int)
    for o in db.orders:
        if o["region"] == region:
            totals[db.products[o["product"]]["supplier"]] += o["quantity"]
    best = _unique_argmax(totals)
    if best is None:
        return None
    return (
        f"Which supplier's products had the highest total quantity ordered in the {region} region?",
        best, "str",
        _JOIN + f"print(j[j['region'] == {region!r}].groupby('supplier')['quantity'].sum().idxmax())",
    )


def _h_count_launch_region(rng: random.Random, db: _Db) -> _Q | None:
    region = rng.choice(db.regions)
    year = rng.randint(db.year - 6, db.year)
    n = sum(o["region"] == region and db.products[o["product"]]["launch_year"] < year for o in db.orders)
    if n == 0:
        return None
    return (
        f"How many orders in the {region} region were for products launched before {year}?",
        Fraction(n), "int",
        _JOIN + f"print(((j['region'] == {region!r}) & (j['launch_year'] < {year})).sum())",
    )


def _h_mean_price_category_month(rng: random.Random, db: _Db) -> _Q | None:
    category = rng.choice(sorted({p["category"] for p in db.products.values()}))
    month = rng.randint(1, 12)
    prices = [o["cents"] for o in db.orders if db.products[o["product"]]["category"] == category and o["date"].month == month]
    if not prices:
        return None
    return (
        f"What was the average unit price of the orders for {category} products in {_MONTHS[month]} {db.year}? "
        "Round to 2 decimal places.",
        Fraction(sum(prices), 100 * len(prices)), "decimal",
        _JOIN + f"m = j[(j['category'] == {category!r}) & (j['date'].dt.month == {month})]\nprint(round(m['unit_price'].mean(), 2))",
    )


def _h_argmax_category_quarter(rng: random.Random, db: _Db) -> _Q | None:
    q = rng.randint(1, 4)
    totals: dict[str, int] = defaultdict(int)
    for o in db.orders:
        if _quarter(o["date"]) == q:
            totals[db.products[o["product"]]["category"]] += o["quantity"] * o["cents"]
    best = _unique_argmax(totals)
    if best is None:
        return None
    return (
        f"Which product category had the highest total revenue (quantity times unit price) in quarter Q{q} of "
        f"{db.year} (months {3 * q - 2}-{3 * q})?",
        best, "str",
        _JOIN + f"m = j[j['date'].dt.quarter == {q}]\nprint((m['quantity'] * m['unit_price']).groupby(m['category']).sum().idxmax())",
    )


def _h_argmax_date_supplier(rng: random.Random, db: _Db) -> _Q | None:
    supplier = rng.choice(sorted({p["supplier"] for p in db.products.values()}))
    totals: dict[dt.date, int] = defaultdict(int)
    for o in db.orders:
        if db.products[o["product"]]["supplier"] == supplier:
            totals[o["date"]] += o["quantity"] * o["cents"]
    best = _unique_argmax(totals)
    if best is None:
        return None
    return (
        f"On which date did the products of the supplier {supplier} bring in the highest total revenue "
        "(quantity times unit price)? Answer with the date as YYYY-MM-DD.",
        best.isoformat(), "date",
        _JOIN + f"m = j[j['supplier'] == {supplier!r}]\n"
        "print((m['quantity'] * m['unit_price']).groupby(m['date']).sum().idxmax().date())",
    )


TEMPLATES: dict[str, list[Callable[[random.Random, _Db], _Q | None]]] = {
    "easy": [_e_count_region, _e_total_quantity_product, _e_mean_price_product, _e_max_quantity_region, _e_count_quantity_gt],
    "medium": [_m_revenue_region_month, _m_argmax_product_region, _m_count_daterange_quantity, _m_mean_quantity_product_quarter, _m_argmax_region_month],
    "hard": [_h_revenue_category, _h_argmax_supplier_region, _h_count_launch_region, _h_mean_price_category_month, _h_argmax_category_quarter, _h_argmax_date_supplier],
}


def _format(exact: Any, answer_type: str) -> str:
    if answer_type == "int":
        return str(int(exact))
    if answer_type == "decimal":
        # round half up, as a person would
        cents = (exact * 100 + Fraction(1, 2)).__floor__()
        sign = "-" if cents < 0 else ""
        cents = abs(cents)
        return f"{sign}{cents // 100}.{cents % 100:02d}"
    return str(exact)


def generate_task(split: str, difficulty: str, index: int) -> TableTask:
    """The task ``(split, difficulty, index)``: the same in every process (see the module docstring)."""
    GeneratedTaskId.check(split, difficulty, splits=SPLITS, variants=DIFFICULTIES, env="TableQA")
    if index < 0:
        raise ValueError(f"task index must be >= 0, got {index}")
    rng = random.Random(f"tableqa/{split}/{difficulty}/{index}")
    db = _make_db(rng)
    templates = TEMPLATES[difficulty]
    for _ in range(200):
        template = rng.choice(templates)
        drawn = template(rng, db)
        if drawn is not None:
            break
    else:  # pragma: no cover - every template succeeds with overwhelming probability
        raise RuntimeError(f"could not draw a well-defined question for {split}-{difficulty}-{index}")
    question, exact, answer_type, solution = drawn
    return TableTask(
        id=str(GeneratedTaskId(split, difficulty, index)),
        split=split,
        difficulty=difficulty,
        index=index,
        tables=_tables(db),
        question=question,
        answer=_format(exact, answer_type),
        answer_type=answer_type,
        exact=exact,
        solution=solution,
        template=template.__name__.lstrip("_"),
    )
