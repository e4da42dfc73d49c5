"""The agent's eight tools over the episode's :class:`~agent_gym_customer_service.domain.Store`, and the
executor that reports refused operations with their own error kinds.

The tools are typed functions (their signatures and docstrings give the schemas the policy sees) bound
to a :class:`RetailTools`, whose ``store`` the env replaces at every reset: the tool objects (and the
executor) are built once per env, the database once per episode. They run inline (in the stepping
thread, no thread hop): each is one or two indexed SQLite statements on a few dozen rows.

A refused operation is a tool error whose kind is the :class:`~agent_gym_customer_service.domain.DomainError`'s
(``no_match``, ``unknown_id``, ``not_verified``, ``policy``, ``invalid_request``) instead of the
generic ``exception``, so ``info["tool_error_kinds"]`` tells a policy refusal from a typo.
"""

from __future__ import annotations

from typing import Any


from agent_gym.tools import Tool, tool

from agent_gym_customer_service.domain import DomainError, Store

__all__ = ["EXAMPLE_CALL", "RetailTools"]

#: The call the system prompt shows, written in the env's tool-call format.
EXAMPLE_CALL: dict[str, Any] = {"name": "find_customer", "arguments": {"email": "jane.doe12@example.com"}}


class RetailTools:
    """The tools, bound to whichever store is current (``store`` is set by the env at reset)."""

    def __init__(self) -> None:
        self.store: Store | None = None

    def _store(self) -> Store:
        if self.store is None:
            raise DomainError("invalid_request", "no episode is running: the env must be reset first")
        return self.store

    def tools(self) -> list[Tool]:
        """The eight tools, in the order the prompt lists them (``find_customer`` first)."""
        return [
            tool(f, name=f.__name__, inline=True)
            for f in (self.find_customer, self.list_orders, self.get_order, self.get_product,
                      self.cancel_order, self.change_address, self.return_items, self.exchange_items)
        ]

    def find_customer(self, email: str = "", name: str = "", zip_code: str = "") -> dict[str, Any]:
        """Find a customer by email, or by full name and zip code; this verifies the customer's identity.

        Args:
            email: The customer's email address (alone is enough).
            name: The customer's full name, first and last (with zip_code, when there is no email).
            zip_code: The customer's zip code (with name).
        """
        return self._store().find_customer(email, name, zip_code)

    def list_orders(self, customer_id: str) -> list[dict[str, Any]]:
        """List a verified customer's orders: id, status, date placed and total.

        Args:
            customer_id: The id find_customer returned.
        """
        return self._store().list_orders(customer_id)

    def get_order(self, order_id: str) -> dict[str, Any]:
        """Show an order of a verified customer: status, dates, shipping address, items (item_id, product_id, options, price, status) and total.

        Args:
            order_id: The order id, like #W1234567.
        """
        return self._store().get_order(order_id)

    def get_product(self, product_id: str) -> dict[str, Any]:
        """Show a product and all its variants: item_id, options, price and availability.

        Args:
            product_id: The product id, like P104 (get_order shows each item's product_id).
        """
        return self._store().get_product(product_id)

    def cancel_order(self, order_id: str) -> dict[str, Any]:
        """Cancel a pending order; the full total is refunded. Only pending orders can be cancelled.

        Args:
            order_id: The order id, like #W1234567.
        """
        return self._store().cancel_order(order_id)

    def change_address(self, order_id: str, street: str, city: str, zip_code: str) -> dict[str, Any]:
        """Change the shipping address of a pending order.

        Args:
            order_id: The order id, like #W1234567.
            street: The new street with the house number, e.g. 12 Oak St.
            city: The new city.
            zip_code: The new zip code.
        """
        return self._store().change_address(order_id, street, city, zip_code)

    def return_items(self, order_id: str, item_ids: list[str]) -> dict[str, Any]:
        """Return items of a delivered order, within 30 days of delivery; each item's price is refunded.

        Args:
            order_id: The order id, like #W1234567.
            item_ids: The item_id of each item to return (from get_order).
        """
        return self._store().return_items(order_id, item_ids)

    def exchange_items(self, order_id: str, item_ids: list[str], new_item_ids: list[str]) -> dict[str, Any]:
        """Exchange items of a delivered order, within 30 days of delivery, for other available variants of the same products.

        Args:
            order_id: The order id, like #W1234567.
            item_ids: The item_id of each item to exchange (from get_order).
            new_item_ids: For each item, the item_id of the new variant (from get_product), in the same order.
        """
        return self._store().exchange_items(order_id, item_ids, new_item_ids)
