"""Task generation (seeded, solvable, disjoint splits), the store's policy, grading and the scripted user's rules."""

from __future__ import annotations

from dataclasses import asdict

import pytest

from agent_gym_customer_service.domain import Store
from agent_gym_customer_service.generate import (
    DIFFICULTIES,
    apply_actions,
    generate_task,
    reference_actions,
    split_of,
    task_from_id,
)
from agent_gym_customer_service.grading import missing_info
from agent_gym_customer_service.user import classify


def _content(task):
    return {"today": task.today, "user": task.user, "requests": [asdict(r) for r in task.requests], "db": task.db}


def test_ids_regenerate_the_same_task():
    for difficulty in DIFFICULTIES:
        task = generate_task(7, difficulty, "test")
        assert task.id == f"test-{difficulty}-7" and task_from_id(task.id) == task


def test_splits_are_disjoint_by_content():
    train = [generate_task(n, d, "train") for n in range(40) for d in DIFFICULTIES]
    test = [generate_task(n, d, "test") for n in range(40) for d in DIFFICULTIES]
    assert all(split_of(t.today, t.user, t.db) == "train" for t in train)
    assert all(split_of(t.today, t.user, t.db) == "test" for t in test)
    keys = lambda tasks: {str(_content(t)) for t in tasks}  # noqa: E731
    assert not keys(train) & keys(test)


@pytest.mark.parametrize("difficulty", DIFFICULTIES)
def test_every_task_is_solvable_and_its_traps_are_refused(difficulty):
    for n in range(30):
        task = generate_task(n, difficulty, "train")
        calls = reference_actions(task.requests)
        expected, _ = apply_actions(task.db, task.today, task.user["customer_id"], calls)
        assert expected == task.expected_db
        changes = [r for r in task.requests if r.trap is None and r.kind != "status"]
        initial = Store(task.db, task.today).dump()
        assert len(calls) == len(changes) and (task.expected_db != initial) == bool(changes)
        for trap in (r for r in task.requests if r.trap is not None):
            store = Store(task.db, task.today)
            store.verified.add(task.user["customer_id"])
            name = {"cancel": "cancel_order", "return": "return_items", "address": "change_address"}[trap.kind]
            args = {"order_id": trap.order_id}
            if trap.kind == "return":
                args["item_ids"] = list(trap.item_ids)
            if trap.kind == "address":
                args.update(street="1 A St", city="B", zip_code="12345")
            with pytest.raises(Exception, match="only|within"):
                getattr(store, name)(**args)
            assert len(store.violations) == 1 and store.dump() == initial


def test_orders_of_requests_belong_to_the_customer_and_are_distinct():
    for n in range(30):
        task = generate_task(n, "hard", "train")
        owners = {o["order_id"]: o["customer_id"] for o in task.db["orders"]}
        ids = [r.order_id for r in task.requests]
        assert len(set(ids)) == len(ids) and all(owners[i] == task.user["customer_id"] for i in ids)


def test_amounts_and_words_are_read_loosely_but_exactly():
    assert missing_info([("amount", "1234.50")], ["You get $1,234.50 back."]) == []
    assert missing_info([("amount", "45.00")], ["That is $45."]) == []
    assert missing_info([("amount", "45.00")], ["That is $45.01 or 450."]) == ["45.00"]
    assert missing_info([("word", "shipped")], ["It has SHIPPED."]) == []
    assert missing_info([("word", "shipped")], ["It is unshipped."]) == ["shipped"]


@pytest.mark.parametrize(("text", "kind"), [
    ("Could you give me your email address, or your full name and zip code?", "identity"),
    ("Please provide your email.", "identity_email"),
    ("What is your zip code?", "identity_name_zip"),
    ("Shall I proceed with cancelling #W1?", "confirm"),
    ("Which order do you mean?", "restate"),
    ("Your order is cancelled. Is there anything else I can help you with?", "next"),
    ("Your order is cancelled.", "next"),
    ("", "next"),
])
def test_the_scripted_users_rules(text, kind):
    assert classify(text) == kind
