"""A scripted expert agent: the turns that solve a task against the scripted customer (reward 1.0).

It knows the task (privileged), so it is a demonstration and a test fixture, not a baseline policy: it
asks for identity, verifies the customer, and for each request looks the order up (and the product, for
an exchange), makes the change the policy allows (or refuses a trap), and tells the customer the
result with the information asked for, ending each report with "anything else?".

``expert_turns(task)`` gives the turns as data (``{"calls": [...]}`` or ``{"say": "..."}``);
``expert_texts(task, parser)`` writes them in a tool-call format, ready to encode as actions.
"""

from __future__ import annotations

from typing import Any

from agent_gym_customer_service.generate import CustomerServiceTask, Request, reference_actions

__all__ = ["ASK_IDENTITY", "expert_texts", "expert_turns"]

ASK_IDENTITY = (
    "I'd be happy to help. To verify your identity, could you please give me your email address, "
    "or your full name and zip code?"
)
_ELSE = "Is there anything else I can help you with?"


def _product_of(task: CustomerServiceTask, item_id: str) -> str:
    return next(i["product_id"] for i in task.db["items"] if i["item_id"] == item_id)


def _report(request: Request) -> str:
    if request.trap is not None:
        return f"I'm sorry, I can't do that for order {request.order_id}: {request.trap}. {_ELSE}"
    info = dict(request.info)
    if request.kind == "status":
        return f"Your order {request.order_id} is {info['word']}. {_ELSE}"
    if request.kind == "cancel":
        return f"Your order {request.order_id} is cancelled and ${info['amount']} will be refunded. {_ELSE}"
    if request.kind == "return":
        return f"The return for order {request.order_id} is set up; you will get ${info['amount']} back. {_ELSE}"
    if request.kind == "exchange":
        return f"The exchange for order {request.order_id} is set up. {_ELSE}"
    return f"The shipping address of order {request.order_id} is updated. {_ELSE}"


def expert_turns(task: CustomerServiceTask) -> list[dict[str, Any]]:
    """The expert's turns, in order: ``{"calls": [{"name", "arguments"}]}`` or ``{"say": text}``."""
    user = task.user
    if user.get("prefers", "email") == "email":
        identify = {"email": user["email"]}
    else:
        identify = {"name": f"{user['first_name']} {user['last_name']}", "zip_code": user["zip"]}
    turns: list[dict[str, Any]] = [{"say": ASK_IDENTITY}, {"calls": [{"name": "find_customer", "arguments": identify}]}]
    for request in task.requests:
        turns.append({"calls": [{"name": "get_order", "arguments": {"order_id": request.order_id}}]})
        if request.trap is None and request.kind == "exchange":
            product = _product_of(task, request.item_ids[0])
            turns.append({"calls": [{"name": "get_product", "arguments": {"product_id": product}}]})
        turns.extend({"calls": [call]} for call in reference_actions((request,)))
        turns.append({"say": _report(request)})
    return turns


def expert_texts(task: CustomerServiceTask, parser: Any) -> list[str]:
    """:func:`expert_turns` written with ``parser.format_calls`` (e.g. ``HermesParser()``)."""
    return [parser.format_calls(t["calls"]) if "calls" in t else t["say"] for t in expert_turns(task)]
