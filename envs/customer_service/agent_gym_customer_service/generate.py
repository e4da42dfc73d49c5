"""Seeded customer-service tasks: a small shop, a customer with a goal, and the goal's end state.

A task is built *from its requests*: for each request the generator makes an order of the customer that
the request fits (a pending order to cancel, a recently delivered one to return from, ...), adds other
customers and orders around it, and then applies the reference actions to the initial rows with the
same :class:`~agent_gym_customer_service.domain.Store` operations the tools run. The resulting state is
the task's ``expected_db`` and the operations' results give the information the user asks for
(refund amounts, a status), so every generated task is solvable by construction.

Difficulties: ``easy`` one request; ``medium`` two; ``hard`` two plus a *trap*: a request the policy
forbids (cancel a delivered or shipped order, return items of an undelivered order or one delivered
too long ago, change the address of a shipped order), which the agent must refuse.

Ids and splits: ``"<split>-<difficulty>-<n>"``; generation seeds numpy with ``n`` and draws candidates
until one falls in the split, which is a stable hash (sha256) of the task's content: about 10% of all
tasks are ``test``, so no test task appears in training under any seed.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

import numpy as np

from agent_gym.core.tasks import GeneratedTaskId

from agent_gym_customer_service.domain import SCHEMA, Store

__all__ = [
    "DIFFICULTIES",
    "REQUEST_KINDS",
    "SPLITS",
    "TEST_FRACTION",
    "TRAP_KINDS",
    "CustomerServiceTask",
    "Request",
    "apply_actions",
    "generate_task",
    "reference_actions",
    "sample_task",
    "split_of",
    "task_from_id",
    "task_from_mapping",
]

SPLITS = ("train", "test")
DIFFICULTIES = ("easy", "medium", "hard")
TEST_FRACTION = 0.1
#: Requests the policy allows (what a goal is made of).
REQUEST_KINDS = ("status", "cancel", "address", "return", "exchange")
#: Requests the policy forbids (hard tasks' traps): the kind the user asks for, and the order it names.
TRAP_KINDS = ("cancel_delivered", "cancel_shipped", "return_pending", "return_late", "address_shipped")

_FIRST = ("Ava", "Liam", "Mia", "Noah", "Emma", "Lucas", "Sofia", "Ethan", "Chloe", "Omar", "Yuki", "Ines",
          "Raj", "Lena", "Mateo", "Zoe", "Ivan", "Amara", "Felix", "Nora")
_LAST = ("Garcia", "Kim", "Patel", "Nguyen", "Smith", "Rossi", "Muller", "Silva", "Cohen", "Okafor", "Tanaka",
         "Lopez", "Novak", "Khan", "Berg", "Moreau")
_STREETS = ("Oak St", "Maple Ave", "Pine Rd", "Cedar Ln", "Elm St", "Birch Way", "Lake Dr", "Hill Rd", "River St", "Park Ave")
_CITIES = ("Springfield", "Riverton", "Fairview", "Madison", "Georgetown", "Clinton", "Salem", "Ashland", "Dover", "Milton")
#: Products: name, option axes (each a name and its values), price range in dollars.
_PRODUCTS: tuple[tuple[str, tuple[tuple[str, tuple[str, ...]], ...], tuple[int, int]], ...] = (
    ("T-Shirt", (("color", ("red", "blue", "black", "white")), ("size", ("S", "M", "L", "XL"))), (12, 30)),
    ("Running Shoes", (("color", ("black", "white", "gray")), ("size", ("8", "9", "10", "11"))), (60, 140)),
    ("Wireless Mouse", (("color", ("black", "white", "gray")), ("connection", ("bluetooth", "usb receiver"))), (15, 45)),
    ("Desk Lamp", (("color", ("black", "white", "brass")), ("bulb", ("LED", "halogen"))), (25, 80)),
    ("Water Bottle", (("capacity", ("500ml", "750ml", "1l")), ("color", ("green", "blue", "steel"))), (10, 35)),
    ("Backpack", (("color", ("black", "navy", "olive")), ("capacity", ("20l", "30l"))), (40, 120)),
    ("Mechanical Keyboard", (("switch", ("red", "blue", "brown")), ("layout", ("full", "compact"))), (70, 180)),
    ("Headphones", (("color", ("black", "silver", "blue")), ("type", ("over-ear", "on-ear"))), (50, 250)),
    ("Yoga Mat", (("color", ("purple", "green", "gray")), ("thickness", ("4mm", "6mm"))), (20, 60)),
    ("Coffee Maker", (("color", ("black", "silver")), ("capacity", ("4 cups", "8 cups", "12 cups"))), (35, 150)),
    ("Sunglasses", (("frame", ("black", "tortoise", "gold")), ("lens", ("polarized", "standard"))), (20, 120)),
    ("Phone Case", (("color", ("clear", "black", "pink")), ("model", ("A12", "A13", "A14"))), (10, 40)),
)
_START = dt.date(2024, 1, 1)


@dataclass(frozen=True)
class Request:
    """One part of the customer's goal.

    Attributes:
        kind: ``status``, ``cancel``, ``address``, ``return`` or ``exchange`` (what the user asks for).
        order_id: the order the user names.
        item_ids: the order's items to return or exchange.
        item_names: how the user names those items (``"Desk Lamp (color: black, bulb: LED)"``).
        new_item_ids: the variants to exchange to (same order as ``item_ids``).
        new_options: how the user describes them (``"color: white, bulb: LED"``).
        address: the new shipping address (``street``, ``city``, ``zip``) of an ``address`` request.
        info: what the agent must tell the user: ``["amount", "45.00"]`` (a sum of money) or
            ``["word", "shipped"]`` (an order status).
        trap: why the policy forbids the request (``None``: it is allowed and part of the goal's end state).
    """

    kind: str
    order_id: str
    item_ids: tuple[str, ...] = ()
    item_names: tuple[str, ...] = ()
    new_item_ids: tuple[str, ...] = ()
    new_options: tuple[str, ...] = ()
    address: dict[str, str] | None = None
    info: tuple[tuple[str, str], ...] = ()
    trap: str | None = None

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> Request:
        return cls(
            kind=str(data["kind"]),
            order_id=str(data["order_id"]),
            item_ids=tuple(str(x) for x in data.get("item_ids", ())),
            item_names=tuple(str(x) for x in data.get("item_names", ())),
            new_item_ids=tuple(str(x) for x in data.get("new_item_ids", ())),
            new_options=tuple(str(x) for x in data.get("new_options", ())),
            address=None if data.get("address") is None else {k: str(v) for k, v in dict(data["address"]).items()},
            info=tuple((str(k), str(v)) for k, v in data.get("info", ())),
            trap=None if data.get("trap") is None else str(data["trap"]),
        )


@dataclass(frozen=True)
class CustomerServiceTask:
    """One episode's world and goal (JSON data: :meth:`to_dict` and :func:`task_from_mapping`).

    Attributes:
        id: ``"<split>-<difficulty>-<n>"`` for generated tasks.
        difficulty: ``easy``/``medium``/``hard`` (``custom`` for tasks given as a dict).
        today: the episode's date (ISO), for the return window.
        user: the customer's profile: ``customer_id``, ``first_name``, ``last_name``, ``email``,
            ``zip`` and ``prefers`` (``"email"`` or ``"name_zip"``: how it identifies itself when asked
            for either).
        requests: the goal, in the order the user reveals it (traps included).
        db: the initial rows per table (:data:`~agent_gym_customer_service.domain.SCHEMA`).
        expected_db: the rows after the goal's actions (what grading compares the end state with).
    """

    id: str
    difficulty: str
    today: str
    user: dict[str, str]
    requests: tuple[Request, ...]
    db: dict[str, list[dict[str, Any]]]
    expected_db: dict[str, list[dict[str, Any]]] = field(default_factory=dict, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id, "difficulty": self.difficulty, "today": self.today, "user": dict(self.user),
            "requests": [asdict(r) for r in self.requests], "db": self.db,
        }

    def info_expected(self) -> list[tuple[str, str]]:
        """Every piece of information the user asks for, over all requests."""
        return [pair for r in self.requests for pair in r.info]


def reference_actions(task_requests: tuple[Request, ...]) -> list[dict[str, Any]]:
    """The changes that fulfil the allowed requests, as tool calls (``{"name", "arguments"}``)."""
    calls: list[dict[str, Any]] = []
    for r in task_requests:
        if r.trap is not None or r.kind == "status":
            continue
        if r.kind == "cancel":
            calls.append({"name": "cancel_order", "arguments": {"order_id": r.order_id}})
        elif r.kind == "address":
            assert r.address is not None
            calls.append({"name": "change_address", "arguments": {"order_id": r.order_id, "street": r.address["street"],
                                                                   "city": r.address["city"], "zip_code": r.address["zip"]}})
        elif r.kind == "return":
            calls.append({"name": "return_items", "arguments": {"order_id": r.order_id, "item_ids": list(r.item_ids)}})
        elif r.kind == "exchange":
            calls.append({"name": "exchange_items", "arguments": {"order_id": r.order_id, "item_ids": list(r.item_ids),
                                                                   "new_item_ids": list(r.new_item_ids)}})
    return calls


def apply_actions(db: Mapping[str, Any], today: str, customer_id: str, calls: list[dict[str, Any]]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The rows after ``calls`` (made by the verified ``customer_id``) and each call's result.

    Raises:
        ValueError: a call is refused: the requests do not fit the rows (a custom task's mistake).
    """
    from agent_gym_customer_service.domain import DomainError

    store = Store(db, today)
    try:
        store.verified.add(customer_id)
        results = []
        for call in calls:
            try:
                results.append(getattr(store, call["name"])(**call["arguments"]))
            except DomainError as exc:
                raise ValueError(f"the goal's action {call['name']}({call['arguments']}) is refused: {exc}") from None
        return store.dump(), results
    finally:
        store.close()


# -- generation --------------------------------------------------------------------------------------------


class _Builder:
    """The rows of one candidate task, drawn with ``rng``."""

    def __init__(self, rng: np.random.Generator):
        self.rng = rng
        self.today = _START + dt.timedelta(days=int(rng.integers(0, 700)))
        self.tables: dict[str, list[dict[str, Any]]] = {t: [] for t in SCHEMA}
        self.used_ids: set[str] = set()
        self._catalog()

    def pick(self, options: tuple[Any, ...] | list[Any]) -> Any:
        return options[int(self.rng.integers(0, len(options)))]

    def new_id(self, prefix: str, digits: int) -> str:
        while True:
            value = f"{prefix}{int(self.rng.integers(10 ** (digits - 1), 10**digits))}"
            if value not in self.used_ids:
                self.used_ids.add(value)
                return value

    def _catalog(self) -> None:
        """Six products, each with three or four variants (at least two available)."""
        chosen = self.rng.permutation(len(_PRODUCTS))[:6]
        self.variants: dict[str, list[dict[str, Any]]] = {}
        for index in sorted(int(i) for i in chosen):
            name, axes, (low, high) = _PRODUCTS[index]
            pid = f"P{100 + index}"
            self.tables["products"].append({"product_id": pid, "name": name})
            combos = [(a, b) for a in axes[0][1] for b in axes[1][1]]
            picks = self.rng.permutation(len(combos))[: int(self.rng.integers(3, 5))]
            base = int(self.rng.integers(low, high + 1)) * 100
            rows = []
            for k, c in enumerate(sorted(int(p) for p in picks)):
                a, b = combos[c]
                rows.append({
                    "item_id": self.new_id("", 6), "product_id": pid, "options": f"{axes[0][0]}: {a}, {axes[1][0]}: {b}",
                    "price_cents": base + int(self.rng.integers(-3, 4)) * 100 + int(self.pick((0, 49, 99))),
                    "available": 0 if k >= 2 and self.rng.random() < 0.4 else 1,
                })
            self.variants[pid] = rows
            self.tables["items"].extend(rows)

    def customer(self, first: str, last: str) -> dict[str, Any]:
        row = {
            "customer_id": f"{first.lower()}_{last.lower()}_{int(self.rng.integers(1000, 10000))}",
            "first_name": first, "last_name": last,
            "email": f"{first.lower()}.{last.lower()}{int(self.rng.integers(10, 100))}@example.com",
            "zip": str(int(self.rng.integers(10000, 100000))),
            "street": f"{int(self.rng.integers(1, 999))} {self.pick(_STREETS)}", "city": self.pick(_CITIES),
        }
        self.tables["customers"].append(row)
        return row

    def order(self, customer: dict[str, Any], status: str, *, lines: int | None = None, age: tuple[int, int] = (2, 25)) -> dict[str, Any]:
        """An order of ``customer`` with ``lines`` items of distinct products; ``age``: days since
        delivery (delivered orders) or since it was placed (the others)."""
        days = int(self.rng.integers(age[0], age[1] + 1))
        if status == "delivered":
            delivered: str | None = (self.today - dt.timedelta(days=days)).isoformat()
            placed = self.today - dt.timedelta(days=days + int(self.rng.integers(2, 7)))
        else:
            delivered, placed = None, self.today - dt.timedelta(days=min(days, 3) if status == "pending" else days)
        row = {
            "order_id": "#W" + self.new_id("", 7), "customer_id": customer["customer_id"], "status": status,
            "placed_on": placed.isoformat(), "delivered_on": delivered,
            "street": customer["street"], "city": customer["city"], "zip": customer["zip"], "refund_cents": 0,
        }
        self.tables["orders"].append(row)
        count = lines if lines is not None else int(self.rng.integers(1, 4))
        for pid in self.rng.permutation(sorted(self.variants))[:count]:
            item = self.pick(self.variants[str(pid)])
            self.tables["order_items"].append({
                "order_id": row["order_id"], "item_id": item["item_id"], "price_cents": item["price_cents"],
                "status": "ordered", "exchange_item_id": None, "refund_cents": 0,
            })
        return row

    def lines_of(self, order_id: str) -> list[dict[str, Any]]:
        return [line for line in self.tables["order_items"] if line["order_id"] == order_id]

    def item(self, item_id: str) -> dict[str, Any]:
        return next(i for i in self.tables["items"] if i["item_id"] == item_id)

    def item_name(self, item_id: str) -> str:
        item = self.item(item_id)
        name = next(p["name"] for p in self.tables["products"] if p["product_id"] == item["product_id"])
        return f"{name} ({item['options']})"


def _request(b: _Builder, customer: dict[str, Any], kind: str) -> Request:
    """An allowed request of ``kind`` and the order it is about (made to fit it)."""
    if kind == "status":
        order = b.order(customer, str(b.pick(("pending", "shipped", "delivered", "cancelled"))))
        return Request("status", order["order_id"], info=(("word", order["status"]),))
    if kind in ("cancel", "address"):
        order = b.order(customer, "pending")
        if kind == "cancel":
            return Request("cancel", order["order_id"])  # the refund is filled in from the action's result
        address = {"street": f"{int(b.rng.integers(1, 999))} {b.pick(_STREETS)}", "city": str(b.pick(_CITIES)),
                   "zip": str(int(b.rng.integers(10000, 100000)))}
        return Request("address", order["order_id"], address=address)
    if kind == "return":
        order = b.order(customer, "delivered", lines=int(b.rng.integers(2, 4)))
        lines = b.lines_of(order["order_id"])
        chosen = sorted(line["item_id"] for line in lines[: int(b.rng.integers(1, len(lines)))])
        return Request("return", order["order_id"], item_ids=tuple(chosen), item_names=tuple(b.item_name(i) for i in chosen))
    order = b.order(customer, "delivered", lines=int(b.rng.integers(1, 3)))
    line = b.lines_of(order["order_id"])[0]
    item = b.item(line["item_id"])
    others = [v for v in b.variants[item["product_id"]] if v["item_id"] != item["item_id"] and v["available"]]
    if not others:  # every product has two available variants, so another one always exists...
        other = next(v for v in b.variants[item["product_id"]] if v["item_id"] != item["item_id"])
        other["available"] = 1  # ...except when the ordered one is the only available one: make one available
        others = [other]
    new = b.pick(others)
    return Request("exchange", order["order_id"], item_ids=(item["item_id"],), item_names=(b.item_name(item["item_id"]),),
                   new_item_ids=(new["item_id"],), new_options=(new["options"],))


def _trap(b: _Builder, customer: dict[str, Any], kind: str) -> Request:
    """A request the policy forbids, and the order it names."""
    if kind in ("cancel_delivered", "cancel_shipped"):
        status = kind.split("_")[1]
        order = b.order(customer, status)
        return Request("cancel", order["order_id"], trap=f"a {status} order cannot be cancelled (only pending ones)")
    if kind == "address_shipped":
        order = b.order(customer, "shipped")
        address = {"street": f"{int(b.rng.integers(1, 999))} {b.pick(_STREETS)}", "city": str(b.pick(_CITIES)),
                   "zip": str(int(b.rng.integers(10000, 100000)))}
        return Request("address", order["order_id"], address=address, trap="a shipped order's address cannot be changed")
    if kind == "return_pending":
        order = b.order(customer, "pending", lines=2)
        why = "items of an order that is not delivered yet cannot be returned (it can be cancelled)"
    else:
        order = b.order(customer, "delivered", lines=2, age=(45, 120))
        why = "the order was delivered more than 30 days ago, past the return window"
    item_id = b.lines_of(order["order_id"])[0]["item_id"]
    return Request("return", order["order_id"], item_ids=(item_id,), item_names=(b.item_name(item_id),), trap=why)


def _candidate(rng: np.random.Generator, difficulty: str) -> tuple[str, dict[str, str], tuple[Request, ...], dict[str, Any]]:
    b = _Builder(rng)
    first, last = str(b.pick(_FIRST)), str(b.pick(_LAST))
    customer = b.customer(first, last)
    if rng.random() < 0.5:  # a namesake elsewhere: the name alone does not identify the customer
        namesake = b.customer(first, last)
        b.order(namesake, str(b.pick(("pending", "delivered"))))
    for _ in range(int(rng.integers(1, 3))):
        other = b.customer(str(b.pick(_FIRST)), str(b.pick(_LAST)))
        b.order(other, str(b.pick(("pending", "shipped", "delivered"))))
    b.order(customer, str(b.pick(("delivered", "shipped", "cancelled"))), age=(3, 200))  # an unrelated earlier order
    count = {"easy": 1, "medium": 2, "hard": 2}[difficulty]
    kinds = [str(k) for k in rng.permutation(REQUEST_KINDS)[:count]]
    requests = [_request(b, customer, k) for k in kinds]
    if difficulty == "hard":
        trap = _trap(b, customer, str(b.pick(TRAP_KINDS)))
        requests.insert(int(rng.integers(0, len(requests) + 1)), trap)
    # the customer's orders in the tables in id order, so the row order tells nothing about the goal
    b.tables["orders"].sort(key=lambda o: o["order_id"])
    user = {k: customer[k] for k in ("customer_id", "first_name", "last_name", "email", "zip")}
    user["prefers"] = str(b.pick(("email", "name_zip")))
    return b.today.isoformat(), user, tuple(requests), b.tables


def split_of(today: str, user: Mapping[str, str], db: Mapping[str, Any]) -> str:
    """The split of a task's content (its date, customer and initial rows, which the requests are
    built into): a stable hash, independent of the seed."""
    key = json.dumps({"today": today, "user": user, "db": db}, sort_keys=True, default=str)
    bucket = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") % 1000
    return "test" if bucket < TEST_FRACTION * 1000 else "train"


def _finish(task_id: str, difficulty: str, today: str, user: dict[str, str], requests: tuple[Request, ...], db: dict[str, Any]) -> CustomerServiceTask:
    """The task with its expected end state, and the refunds it asks for filled in from the actions' results."""
    calls = reference_actions(requests)
    expected, results = apply_actions(db, today, user["customer_id"], calls)
    by_order = {call["arguments"]["order_id"]: result for call, result in zip(calls, results)}
    filled = []
    for r in requests:
        if r.trap is None and r.kind in ("cancel", "return") and not r.info:
            r = Request(**{**asdict(r), "info": (("amount", by_order[r.order_id]["refund"]),)})
        filled.append(r)
    return CustomerServiceTask(task_id, difficulty, today, user, tuple(filled), db, expected)


def generate_task(n: int, difficulty: str = "medium", split: str = "train") -> CustomerServiceTask:
    """The task with id ``f"{split}-{difficulty}-{n}"`` (deterministic in any process)."""
    GeneratedTaskId.check(split, difficulty, splits=SPLITS, variants=DIFFICULTIES, env="CustomerService")
    if not 0 <= int(n) < 2**63:
        raise ValueError(f"task number must be in [0, 2**63), got {n}")
    rng = np.random.default_rng(int(n))
    for _ in range(10_000):
        today, user, requests, db = _candidate(rng, difficulty)
        if split_of(today, user, db) == split:
            return _finish(str(GeneratedTaskId(split, difficulty, int(n))), difficulty, today, user, requests, db)
    raise RuntimeError(f"could not generate a {difficulty} customer-service task from seed {n}")  # pragma: no cover


def sample_task(rng: np.random.Generator, difficulty: str = "medium", split: str = "train") -> CustomerServiceTask:
    """A task drawn with ``rng`` (the env's seeded ``np_random``)."""
    return generate_task(int(rng.integers(0, 2**31)), difficulty, split)


def task_from_id(task_id: str) -> CustomerServiceTask:
    split, difficulty, n = GeneratedTaskId.parse(task_id, splits=SPLITS, variants=DIFFICULTIES, name="CustomerService task")
    return generate_task(n, difficulty, split)


def task_from_mapping(task: Mapping[str, Any]) -> CustomerServiceTask:
    """A task from :meth:`CustomerServiceTask.to_dict`'s form (``{"id": ...}`` alone: a generated task).

    The expected end state is recomputed from the requests, so an edited task stays consistent.

    Raises:
        ValueError: keys are missing, or an allowed request does not fit the rows (the message says which).
    """
    if set(task) == {"id"}:
        return task_from_id(str(task["id"]))
    missing = {"today", "user", "requests", "db"} - set(task)
    if missing:
        raise ValueError(
            f"a CustomerService task needs the keys today, user, requests and db (CustomerServiceTask.to_dict's form); "
            f"missing {sorted(missing)}"
        )
    requests = tuple(Request.from_mapping(r) for r in task["requests"])
    if not requests:
        raise ValueError("a CustomerService task needs at least one request")
    user = {k: str(v) for k, v in dict(task["user"]).items()}
    user.setdefault("prefers", "email")
    db = {t: [dict(row) for row in task["db"].get(t, [])] for t in SCHEMA}
    return _finish(str(task.get("id", "custom")), str(task.get("difficulty", "custom")), str(task["today"]), user, requests, db)

