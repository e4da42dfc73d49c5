"""A tau-bench style retail customer-service env for agent-r1-gym (``agent_gym_customer_service``).

Registered on ``import agent_gym`` through the ``agent_gym.envs`` entry point :func:`register`:

- ``AgentR1/CustomerService-v0``: the policy is a support agent with eight tools over a per-episode
  SQLite shop (customers, orders, products); a simulated customer (scripted by default, or a model)
  reveals its requests turn by turn. Reward 1.0 iff the database ends in the goal's state, every
  piece of information the customer asked for was told, and no action the policy forbids was tried.
"""

from __future__ import annotations

__all__ = ["register"]


def register() -> None:
    """Register ``AgentR1/CustomerService-v0`` (an import string only: cheap)."""
    from agent_gym.registry import register_env

    register_env(
        "CustomerService-v0",
        "agent_gym_customer_service.env:CustomerServiceEnv",
        description="Retail customer service (tau-bench style): SQLite tools, a simulated user, "
        "reward 1 for the goal's database state and the information asked for",
        tools=(
            "find_customer", "list_orders", "get_order", "get_product",
            "cancel_order", "change_address", "return_items", "exchange_items",
        ),
        package="agent-r1-gym-customer-service",
    )
