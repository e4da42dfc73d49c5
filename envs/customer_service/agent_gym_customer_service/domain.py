"""The retail shop: an in-memory SQLite database per episode and the operations the tools expose.

A :class:`Store` is built from a task's rows (plain dicts, so a task stays JSON data) and holds the
episode's state: the database, which customers proved who they are, and the count of actions the
policy forbids that were tried. Every operation either returns a JSON-able dict or raises
:class:`DomainError`, whose ``kind`` is the error kind the env counts and whose message names the fix
for the policy (the agent model), never a Python detail.

The same operations build a task's expected end state in the generator (:mod:`.generate`): the
reference actions are applied to the initial rows with exactly the code the tools run, so "the goal
is reachable" holds by construction.

Policy (also in the system prompt, ``templates/customer_service_system.j2``):

- identity first: :meth:`Store.find_customer` by email, or by full name and zip code, verifies a
  customer; reads and changes of orders need their owner verified;
- only ``pending`` orders can be cancelled (refund: the order total) or get a new shipping address;
- items of a ``delivered`` order can be returned (refund: their prices) or exchanged for another
  available variant of the same product, within :data:`RETURN_WINDOW_DAYS` days of delivery, each item
  at most once.
"""

from __future__ import annotations

import datetime as dt
import re
import sqlite3
from typing import Any, Mapping, Sequence

__all__ = [
    "DOMAIN_ERROR_KINDS",
    "RETURN_WINDOW_DAYS",
    "SCHEMA",
    "DomainError",
    "Store",
    "money",
    "normalize_order_id",
]

#: Days after delivery within which items can be returned or exchanged.
RETURN_WINDOW_DAYS = 30

#: Tables, their columns (in order) and primary keys. Rows are dicts with exactly these keys.
SCHEMA: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "customers": (("customer_id", "first_name", "last_name", "email", "zip", "street", "city"), ("customer_id",)),
    "products": (("product_id", "name"), ("product_id",)),
    "items": (("item_id", "product_id", "options", "price_cents", "available"), ("item_id",)),
    "orders": (
        ("order_id", "customer_id", "status", "placed_on", "delivered_on", "street", "city", "zip", "refund_cents"),
        ("order_id",),
    ),
    "order_items": (
        ("order_id", "item_id", "price_cents", "status", "exchange_item_id", "refund_cents"),
        ("order_id", "item_id"),
    ),
}

#: Every ``DomainError.kind``: what the env counts in ``info["tool_error_kinds"]`` besides the
#: executor's own kinds (``unknown_tool``, ``invalid_arguments``, ...).
DOMAIN_ERROR_KINDS = ("no_match", "unknown_id", "not_verified", "policy", "invalid_request")

_INTEGER_COLUMNS = {"price_cents", "available", "refund_cents"}


class DomainError(Exception):
    """A refused operation; the message is for the agent and says what to do instead.

    Attributes:
        kind: one of :data:`DOMAIN_ERROR_KINDS`.
        violation: the refused operation was a change the policy forbids (counted as a policy
            violation: the agent should have refused the request itself).
    """

    user_message = True  # the tool executor shows the message as is ("Error: ...") and counts it under kind

    def __init__(self, kind: str, message: str, *, violation: bool = False):
        super().__init__(message)
        self.kind = kind
        self.violation = violation


def money(cents: int) -> str:
    """``4500`` -> ``"45.00"`` (dollars, two decimals: the form tools and grading use)."""
    return f"{cents // 100}.{cents % 100:02d}"


def normalize_order_id(text: str) -> str:
    """``"w1234567"``, ``" #W1234567 "`` -> ``"#W1234567"``: ids as users and models write them."""
    return "#" + str(text).strip().lstrip("#").strip().upper()


def _clean(text: str) -> str:
    """Whitespace collapsed and trimmed (addresses and names are compared this way)."""
    return re.sub(r"\s+", " ", str(text)).strip()


def _date(text: str) -> dt.date:
    return dt.date.fromisoformat(text)


class Store:
    """One episode's shop: a private in-memory SQLite database and the episode's verification state.

    Args:
        tables: rows per table (:data:`SCHEMA`), e.g. a task's ``db``.
        today: the date the episode takes place (ISO ``YYYY-MM-DD``), for the return window.
        return_window_days: days after delivery within which returns and exchanges are allowed.
    """

    def __init__(self, tables: Mapping[str, Sequence[Mapping[str, Any]]], today: str, return_window_days: int = RETURN_WINDOW_DAYS):
        # check_same_thread=False: an env may be reset in one thread and stepped in another (pools,
        # asyncio.to_thread); an episode is never stepped by two threads at once.
        self.db = sqlite3.connect(":memory:", check_same_thread=False)
        self.today = _date(today)
        self.return_window_days = int(return_window_days)
        self.verified: set[str] = set()
        self.violations: list[str] = []
        for table, (columns, key) in SCHEMA.items():
            cols = ", ".join(f"{c} {'INTEGER' if c in _INTEGER_COLUMNS else 'TEXT'}" for c in columns)
            self.db.execute(f"CREATE TABLE {table} ({cols}, PRIMARY KEY ({', '.join(key)}))")
            rows = [tuple(row.get(c) for c in columns) for row in tables.get(table, ())]
            self.db.executemany(f"INSERT INTO {table} VALUES ({', '.join('?' * len(columns))})", rows)
        self.db.commit()

    def close(self) -> None:
        self.db.close()

    # -- state as data -----------------------------------------------------------------------------------

    def rows(self, table: str) -> list[dict[str, Any]]:
        """The table's rows as dicts, in primary-key order."""
        columns, key = SCHEMA[table]
        cursor = self.db.execute(f"SELECT {', '.join(columns)} FROM {table} ORDER BY {', '.join(key)}")
        return [dict(zip(columns, row)) for row in cursor.fetchall()]

    def dump(self) -> dict[str, list[dict[str, Any]]]:
        """Every table's rows: the database state that grading compares."""
        return {table: self.rows(table) for table in SCHEMA}

    # -- lookups -----------------------------------------------------------------------------------------

    def _one(self, sql: str, *args: Any) -> dict[str, Any] | None:
        cursor = self.db.execute(sql, args)
        row = cursor.fetchone()
        return None if row is None else dict(zip([d[0] for d in cursor.description], row))

    def _order(self, order_id: str, *, change: bool) -> dict[str, Any]:
        """The order, once its owner is verified; a change for an unverified owner is a violation."""
        oid = normalize_order_id(order_id)
        order = self._one("SELECT * FROM orders WHERE order_id = ?", oid)
        if order is None:
            raise DomainError("unknown_id", f"no order {oid}; order ids look like #W1234567 (list_orders shows a customer's orders)")
        if order["customer_id"] not in self.verified:
            self._refuse_if(change, f"{oid} without verifying its owner")
            raise DomainError(
                "not_verified",
                f"order {oid} belongs to a customer whose identity is not verified: call find_customer with "
                "the email, or the full name and zip code, that the user gives you first",
                violation=change,
            )
        return order

    def _refuse_if(self, change: bool, what: str) -> None:
        if change:
            self.violations.append(what)

    def _lines(self, order_id: str) -> list[dict[str, Any]]:
        cursor = self.db.execute(
            "SELECT oi.item_id, oi.price_cents, oi.status, oi.exchange_item_id, oi.refund_cents, p.product_id, p.name, i.options "
            "FROM order_items oi JOIN items i ON i.item_id = oi.item_id JOIN products p ON p.product_id = i.product_id "
            "WHERE oi.order_id = ? ORDER BY oi.item_id",
            (order_id,),
        )
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row)) for row in cursor.fetchall()]

    def find_customer(self, email: str = "", name: str = "", zip_code: str = "") -> dict[str, Any]:
        """Find and verify a customer by email, or by full name and zip code."""
        email, name, zip_code = _clean(email).lower(), _clean(name).lower(), _clean(zip_code)
        if email:
            row = self._one("SELECT * FROM customers WHERE lower(email) = ?", email)
            missing = f"no customer has the email {email!r}; check the spelling with the user, or use the full name and zip code"
        elif name and zip_code:
            row = self._one(
                "SELECT * FROM customers WHERE lower(first_name || ' ' || last_name) = ? AND zip = ?", name, zip_code
            )
            missing = f"no customer named {name!r} with zip code {zip_code!r}; check both with the user, or use the email"
        else:
            raise DomainError("invalid_request", "give the email, or both the full name (first and last) and the zip code")
        if row is None:
            raise DomainError("no_match", missing)
        self.verified.add(row["customer_id"])
        return {
            "customer_id": row["customer_id"],
            "name": f"{row['first_name']} {row['last_name']}",
            "email": row["email"],
            "address": f"{row['street']}, {row['city']}, {row['zip']}",
            "verified": True,
        }

    def list_orders(self, customer_id: str) -> list[dict[str, Any]]:
        """The customer's orders (id, status, dates, total), oldest first."""
        cid = _clean(customer_id)
        if self._one("SELECT customer_id FROM customers WHERE customer_id = ?", cid) is None:
            raise DomainError("unknown_id", f"no customer {cid!r}; use the customer_id that find_customer returns")
        if cid not in self.verified:
            raise DomainError("not_verified", f"customer {cid!r} is not verified: call find_customer with the user's details first")
        cursor = self.db.execute("SELECT order_id FROM orders WHERE customer_id = ? ORDER BY placed_on, order_id", (cid,))
        return [self._summary(oid) for (oid,) in cursor.fetchall()]

    def _summary(self, order_id: str) -> dict[str, Any]:
        order = self._one("SELECT * FROM orders WHERE order_id = ?", order_id)
        assert order is not None
        total = sum(line["price_cents"] for line in self._lines(order_id))
        return {"order_id": order_id, "status": order["status"], "placed_on": order["placed_on"], "total": money(total)}

    def get_order(self, order_id: str) -> dict[str, Any]:
        """An order's details: status, dates, shipping address, items with prices and their states."""
        order = self._order(order_id, change=False)
        lines = self._lines(order["order_id"])
        details: dict[str, Any] = {
            "order_id": order["order_id"],
            "customer_id": order["customer_id"],
            "status": order["status"],
            "placed_on": order["placed_on"],
            "delivered_on": order["delivered_on"],
            "shipping_address": f"{order['street']}, {order['city']}, {order['zip']}",
            "items": [
                {
                    "item_id": line["item_id"], "product_id": line["product_id"], "name": line["name"],
                    "options": line["options"], "price": money(line["price_cents"]), "status": line["status"],
                    **({"exchange_item_id": line["exchange_item_id"]} if line["exchange_item_id"] else {}),
                }
                for line in lines
            ],
            "total": money(sum(line["price_cents"] for line in lines)),
        }
        if order["refund_cents"]:
            details["refund"] = money(order["refund_cents"])
        return details

    def get_product(self, product_id: str) -> dict[str, Any]:
        """A product and all its variants (item ids, options, prices, availability)."""
        pid = _clean(product_id).upper()
        product = self._one("SELECT * FROM products WHERE product_id = ?", pid)
        if product is None:
            raise DomainError("unknown_id", f"no product {pid!r}; product ids look like P104 (get_order shows each item's product_id)")
        cursor = self.db.execute("SELECT item_id, options, price_cents, available FROM items WHERE product_id = ? ORDER BY item_id", (pid,))
        variants = [
            {"item_id": i, "options": o, "price": money(p), "available": bool(a)} for i, o, p, a in cursor.fetchall()
        ]
        return {"product_id": pid, "name": product["name"], "variants": variants}

    # -- changes -----------------------------------------------------------------------------------------

    def _policy(self, what: str, message: str) -> DomainError:
        self.violations.append(what)
        return DomainError("policy", message, violation=True)

    def cancel_order(self, order_id: str) -> dict[str, Any]:
        """Cancel a pending order; the whole total is refunded."""
        order = self._order(order_id, change=True)
        oid = order["order_id"]
        if order["status"] != "pending":
            raise self._policy(
                f"cancel {oid} ({order['status']})",
                f"order {oid} is {order['status']}: only pending orders can be cancelled; tell the user it cannot be cancelled"
                + (" (a delivered order's items may be returned instead)" if order["status"] == "delivered" else ""),
            )
        refund = sum(line["price_cents"] for line in self._lines(oid))
        self.db.execute("UPDATE orders SET status = 'cancelled', refund_cents = ? WHERE order_id = ?", (refund, oid))
        self.db.commit()
        return {"order_id": oid, "status": "cancelled", "refund": money(refund)}

    def change_address(self, order_id: str, street: str, city: str, zip_code: str) -> dict[str, Any]:
        """Change the shipping address of a pending order."""
        order = self._order(order_id, change=True)
        oid = order["order_id"]
        street, city, zip_code = _clean(street), _clean(city), _clean(zip_code)
        if not (street and city and zip_code):
            raise DomainError("invalid_request", "give the new street (with number), city and zip code, as the user wrote them")
        if order["status"] != "pending":
            raise self._policy(
                f"change the address of {oid} ({order['status']})",
                f"order {oid} is {order['status']}: only a pending order's shipping address can be changed; tell the user",
            )
        self.db.execute("UPDATE orders SET street = ?, city = ?, zip = ? WHERE order_id = ?", (street, city, zip_code, oid))
        self.db.commit()
        return {"order_id": oid, "shipping_address": f"{street}, {city}, {zip_code}"}

    def _returnable(self, order: dict[str, Any], item_ids: Sequence[str], action: str) -> list[dict[str, Any]]:
        """The order's lines for ``item_ids``, once the order, the window and each line allow ``action``."""
        oid = order["order_id"]
        if not item_ids:
            raise DomainError("invalid_request", f"name at least one item_id of {oid} to {action} (get_order lists them)")
        if order["status"] != "delivered":
            raise self._policy(
                f"{action} items of {oid} ({order['status']})",
                f"order {oid} is {order['status']}: only items of delivered orders can be {action}ed; tell the user"
                + (" (a pending order can be cancelled instead)" if order["status"] == "pending" else ""),
            )
        days = (self.today - _date(order["delivered_on"])).days
        if days > self.return_window_days:
            raise self._policy(
                f"{action} items of {oid} delivered {days} days ago",
                f"order {oid} was delivered {days} days ago: items can only be {action}ed within "
                f"{self.return_window_days} days of delivery; tell the user",
            )
        lines = {line["item_id"]: line for line in self._lines(oid)}
        chosen = []
        for item_id in item_ids:
            line = lines.get(_clean(item_id))
            if line is None:
                raise DomainError("invalid_request", f"item {item_id!r} is not in order {oid}; use the item_id values get_order shows")
            if line["status"] != "ordered":
                raise self._policy(
                    f"{action} item {item_id} of {oid} again",
                    f"item {item_id} of {oid} is already {line['status'].replace('_', ' ')}: each item can be returned or exchanged once",
                )
            if line in chosen:
                raise DomainError("invalid_request", f"item {item_id!r} is named twice; name each item once")
            chosen.append(line)
        return chosen

    def return_items(self, order_id: str, item_ids: Sequence[str]) -> dict[str, Any]:
        """Return items of a delivered order (within the window); each item's price is refunded."""
        order = self._order(order_id, change=True)
        lines = self._returnable(order, item_ids, "return")
        for line in lines:
            self.db.execute(
                "UPDATE order_items SET status = 'return_requested', refund_cents = ? WHERE order_id = ? AND item_id = ?",
                (line["price_cents"], order["order_id"], line["item_id"]),
            )
        self.db.commit()
        refund = sum(line["price_cents"] for line in lines)
        return {"order_id": order["order_id"], "returned_items": [line["item_id"] for line in lines], "refund": money(refund)}

    def exchange_items(self, order_id: str, item_ids: Sequence[str], new_item_ids: Sequence[str]) -> dict[str, Any]:
        """Exchange items of a delivered order (within the window) for other available variants of the same products."""
        order = self._order(order_id, change=True)
        if len(item_ids) != len(new_item_ids):
            raise DomainError("invalid_request", "give one new_item_id per item_id, in the same order")
        lines = self._returnable(order, item_ids, "exchange")
        news = []
        for line, new_id in zip(lines, new_item_ids):
            new = self._one("SELECT * FROM items WHERE item_id = ?", _clean(new_id))
            if new is None:
                raise DomainError("unknown_id", f"no item {new_id!r}; get_product lists a product's variants with their item ids")
            if new["product_id"] != line["product_id"]:
                raise DomainError(
                    "invalid_request",
                    f"item {new_id} is not a variant of {line['name']} ({line['product_id']}): an item can only be exchanged for the same product",
                )
            if new["item_id"] == line["item_id"]:
                raise DomainError("invalid_request", f"item {new_id} is the variant already ordered; pick another from get_product")
            if not new["available"]:
                raise DomainError("invalid_request", f"item {new_id} is not available; tell the user which variants are")
            news.append(new)
        for line, new in zip(lines, news):
            self.db.execute(
                "UPDATE order_items SET status = 'exchange_requested', exchange_item_id = ? WHERE order_id = ? AND item_id = ?",
                (new["item_id"], order["order_id"], line["item_id"]),
            )
        self.db.commit()
        difference = sum(n["price_cents"] for n in news) - sum(line["price_cents"] for line in lines)
        return {
            "order_id": order["order_id"],
            "exchanged": [{"item_id": line["item_id"], "new_item_id": n["item_id"]} for line, n in zip(lines, news)],
            "price_difference": ("-" if difference < 0 else "") + money(abs(difference)),
        }
