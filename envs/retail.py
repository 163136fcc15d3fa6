"""Customer service over SQLite (like tau2-Bench): a retail database per episode.

Business rules: only pending orders can be cancelled; only delivered orders can be refunded,
one refund per item; the address can change only while an order is pending or processing.
The verifier hashes the orders and refunds rows (as tau-bench does) and checks the answer.
"""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from rehearsal_gym.core.protocol import ToolCall, ToolSpec, format_answer, format_call

from .base import Family, Task, ToolEnv, ToolError
from .sqlite import SQLiteBackend

STATUSES = ("pending", "processing", "shipped", "delivered", "cancelled")
REASONS = ("no_longer_needed", "ordered_by_mistake")
FIRST = ("ana", "ben", "carla", "dev", "emma", "farid", "gita", "hugo", "iris", "jon", "kemal", "lena")
LAST = ("smith", "khan", "garcia", "chen", "novak", "okafor", "rossi", "berg", "silva", "tanaka")
PRODUCTS = {"lamp": 35, "kettle": 49, "backpack": 80, "headphones": 120, "mug": 12, "blender": 95}
STREETS = ("oak st", "pine ave", "lake rd", "hill way", "river ln", "park blvd")

_ID = {"type": "string", "maxLength": 40}
TOOLS = {
    s.name: s
    for s in [
        ToolSpec(
            "find_customer",
            "customer by email",
            {"type": "object", "properties": {"email": _ID}, "required": ["email"]},
        ),
        ToolSpec(
            "list_orders",
            "orders of a customer",
            {"type": "object", "properties": {"customer_id": _ID}, "required": ["customer_id"]},
        ),
        ToolSpec(
            "get_order",
            "order details",
            {"type": "object", "properties": {"order_id": _ID}, "required": ["order_id"]},
        ),
        ToolSpec(
            "cancel_order",
            "cancel a pending order",
            {
                "type": "object",
                "properties": {"order_id": _ID, "reason": {"enum": list(REASONS)}},
                "required": ["order_id", "reason"],
            },
        ),
        ToolSpec(
            "refund_item",
            "refund one item of a delivered order",
            {
                "type": "object",
                "properties": {"order_id": _ID, "item_id": _ID},
                "required": ["order_id", "item_id"],
            },
        ),
        ToolSpec(
            "update_address",
            "new shipping address",
            {
                "type": "object",
                "properties": {"order_id": _ID, "address": {"type": "string", "maxLength": 200}},
                "required": ["order_id", "address"],
            },
        ),
    ]
}

SCHEMA = """
CREATE TABLE customers (id TEXT PRIMARY KEY, name TEXT NOT NULL, email TEXT UNIQUE NOT NULL);
CREATE TABLE orders (id TEXT PRIMARY KEY, customer_id TEXT NOT NULL REFERENCES customers(id),
                     status TEXT NOT NULL, address TEXT NOT NULL, cancel_reason TEXT);
CREATE TABLE items (id TEXT PRIMARY KEY, order_id TEXT NOT NULL REFERENCES orders(id),
                    product TEXT NOT NULL, price INTEGER NOT NULL);
CREATE TABLE refunds (item_id TEXT PRIMARY KEY REFERENCES items(id), order_id TEXT NOT NULL,
                      amount INTEGER NOT NULL);
"""


class RetailDB(SQLiteBackend):
    """An in-memory SQLite database, generated from a seed (`SQLiteBackend`)."""

    tools = TOOLS
    schema = SCHEMA

    def __init__(self, world_seed: int, statuses: Mapping[str, str] | None = None) -> None:
        """`statuses`: order id -> status overriding the generated ones (ids not in the world and
        unknown statuses are ignored)."""
        super().__init__()
        rng = np.random.default_rng(world_seed)
        n_customers = int(rng.integers(3, 6))
        names = rng.choice(len(FIRST), size=n_customers, replace=False)
        item_no, order_no = 0, int(rng.integers(1000, 9000))
        for c in range(n_customers):
            first, last = FIRST[names[c]], LAST[int(rng.integers(len(LAST)))]
            cid = f"C{int(rng.integers(100, 999))}{c}"
            self.conn.execute(
                "INSERT INTO customers VALUES (?, ?, ?)", (cid, f"{first} {last}", f"{first}.{last}@mail.com")
            )
            for _ in range(int(rng.integers(1, 4))):
                order_no += int(rng.integers(1, 40))
                status = STATUSES[int(rng.integers(4))]
                address = f"{int(rng.integers(1, 99))} {STREETS[int(rng.integers(len(STREETS)))]}"
                self.conn.execute(
                    "INSERT INTO orders VALUES (?, ?, ?, ?, NULL)", (f"O{order_no}", cid, status, address)
                )
                products = rng.choice(list(PRODUCTS), size=int(rng.integers(1, 4)), replace=False)
                for product in products:
                    item_no += 1
                    self.conn.execute(
                        "INSERT INTO items VALUES (?, ?, ?, ?)",
                        (f"I{order_no}{item_no}", f"O{order_no}", str(product), PRODUCTS[str(product)]),
                    )
        for order_id, status in (statuses or {}).items():
            if isinstance(order_id, str) and status in STATUSES:
                self.conn.execute("UPDATE orders SET status = ? WHERE id = ?", (status, order_id))
        self.conn.commit()

    def _order(self, order_id: str) -> tuple[str, str, str]:
        row = self.conn.execute("SELECT id, status, address FROM orders WHERE id = ?", (order_id,)).fetchone()
        if row is None:
            raise ToolError(f"order {order_id[:40]!r} not found")
        return row

    def call(self, call: ToolCall) -> dict[str, Any]:
        a = call.arguments
        if call.name == "find_customer":
            row = self.conn.execute(
                "SELECT id, name FROM customers WHERE email = ?", (a["email"],)
            ).fetchone()
            if row is None:
                raise ToolError(f"no customer with email {a['email'][:40]!r}")
            return {"customer_id": row[0], "name": row[1]}
        if call.name == "list_orders":
            rows = self.conn.execute(
                "SELECT id, status FROM orders WHERE customer_id = ? ORDER BY id", (a["customer_id"],)
            ).fetchall()
            if not rows:
                raise ToolError(f"no orders for customer {a['customer_id'][:40]!r}")
            return {"orders": [{"order_id": r[0], "status": r[1]} for r in rows]}
        order_id, status, address = self._order(a["order_id"])
        if call.name == "get_order":
            items = self.conn.execute(
                "SELECT id, product, price FROM items WHERE order_id = ? ORDER BY id", (order_id,)
            ).fetchall()
            return {
                "order_id": order_id,
                "status": status,
                "address": address,
                "items": [{"item_id": i, "product": p, "price": c} for i, p, c in items],
            }
        if call.name == "cancel_order":
            if status != "pending":
                raise ToolError(f"order {order_id} is {status}; only pending orders can be cancelled")
            with self.conn:
                self.conn.execute(
                    "UPDATE orders SET status = 'cancelled', cancel_reason = ? WHERE id = ?",
                    (a["reason"], order_id),
                )
            return {"order_id": order_id, "status": "cancelled"}
        if call.name == "refund_item":
            if status != "delivered":
                raise ToolError(f"order {order_id} is {status}; only delivered orders can be refunded")
            row = self.conn.execute(
                "SELECT price FROM items WHERE id = ? AND order_id = ?", (a["item_id"], order_id)
            ).fetchone()
            if row is None:
                raise ToolError(f"item {a['item_id'][:40]!r} is not in order {order_id}")
            try:
                with self.conn:
                    self.conn.execute(
                        "INSERT INTO refunds VALUES (?, ?, ?)", (a["item_id"], order_id, row[0])
                    )
            except sqlite3.IntegrityError:
                raise ToolError(f"item {a['item_id']} was already refunded") from None
            return {"order_id": order_id, "item_id": a["item_id"], "refunded": row[0]}
        # update_address
        if status not in ("pending", "processing"):
            raise ToolError(f"order {order_id} is {status}; the address can change only before shipping")
        with self.conn:
            self.conn.execute("UPDATE orders SET address = ? WHERE id = ?", (a["address"], order_id))
        return {"order_id": order_id, "address": a["address"]}

    def state(self) -> dict[str, list]:
        orders = self.query("SELECT id, status, address, cancel_reason FROM orders ORDER BY id")
        refunds = self.query("SELECT item_id, order_id, amount FROM refunds ORDER BY item_id")
        return {"orders": [list(r) for r in orders], "refunds": [list(r) for r in refunds]}


ALLOWED = {"cancel": ("pending",), "refund": ("delivered",), "address": ("pending", "processing")}
"""The statuses in which each write template may write."""


def answer_spec(template: str, status: str) -> tuple[str, str]:
    """(answer_kind, answer_key) of a task on an order with `status`: a write that the status allows
    is checked by state alone, a refusal (or a status question) must name the status."""
    if template in ALLOWED and status in ALLOWED[template]:
        return "any", ""
    return ("keyword", status) if template in (*ALLOWED, "status") else ("any", "")


class RetailFamily(Family):
    name = "retail"
    tools = TOOLS
    templates = ("cancel", "refund", "address", "status", "cancel_by_email")

    def make_backend(self, task: Task) -> RetailDB:
        return RetailDB(task.world_seed, task.facts.get("status"))

    def shown_task(self, task: Task, seen: Sequence[tuple[ToolCall, Mapping[str, Any]]]) -> Task:
        """The order's status decides the oracle of the single-order templates: take the first status
        the agent was shown for it by get_order. (cancel_by_email keeps the real world: which order
        to cancel would follow from a whole imagined order list.)"""
        if task.template == "cancel_by_email":
            return task
        oid = task.params["order_id"]
        for call, shown in seen:
            if (
                call.name == "get_order"
                and call.arguments.get("order_id") == oid
                and shown.get("status") in STATUSES
            ):
                kind, key = answer_spec(task.template, shown["status"])
                return dataclasses.replace(
                    task, facts={"status": {oid: shown["status"]}}, answer_kind=kind, answer_key=key
                )
        return task

    def draw_task(self, rng: np.random.Generator, task_id: str) -> Task:
        world_seed = int(rng.integers(2**31))
        db = RetailDB(world_seed)
        try:
            template = self.templates[int(rng.integers(len(self.templates)))]
            orders = db.query(
                "SELECT o.id, o.status, c.name, c.email, c.id FROM orders o JOIN customers c "
                "ON c.id = o.customer_id ORDER BY o.id"
            )
            if template == "cancel_by_email":
                pending = [o for o in orders if o[1] == "pending"]
                per_customer = {o[4]: sum(p[4] == o[4] for p in pending) for o in pending}
                candidates = [o for o in pending if per_customer[o[4]] == 1]
                if not candidates:
                    template = "cancel"
                else:
                    orders = candidates
            oid, status, name, email, _ = orders[int(rng.integers(len(orders)))]
            reason = REASONS[int(rng.integers(len(REASONS)))]
            why = "I no longer need it" if reason == "no_longer_needed" else "I ordered it by mistake"
            p: dict[str, Any] = {"order_id": oid, "reason": reason}
            kind, key = answer_spec(template, status)
            if template == "cancel":
                text = f"Hi, I'm {name}. Please cancel order {oid}, {why}."
                rule = "get_order first; cancel only if the status is pending, else explain the status"
            elif template == "refund":
                items = db.query("SELECT id, product FROM items WHERE order_id = ? ORDER BY id", (oid,))
                item_id, product = items[int(rng.integers(len(items)))]
                p.update(item_id=item_id, product=product)
                text = f"Hello, this is {name}. I want a refund for the {product} in order {oid}."
                rule = "get_order, find the item_id of the product; refund only delivered orders"
            elif template == "address":
                p["address"] = f"{int(rng.integers(1, 99))} {STREETS[int(rng.integers(len(STREETS)))]}"
                text = f"I'm {name}. Please ship order {oid} to {p['address']} instead."
                rule = "get_order; update_address only while pending or processing"
            elif template == "status":
                text = f"Hi, {name} here. What is the status of order {oid}?"
                rule = "get_order and answer its status"
            else:
                p["email"] = email
                text = f"Hi, my email is {email}. Please cancel my pending order, {why}."
                rule = "find_customer, list_orders, then cancel the order whose status is pending"
            return Task(task_id, self.name, template, text, world_seed, p, kind, key, rule)
        finally:
            db.close()

    def oracle(self, task: Task) -> list[str]:
        p = task.params
        db = self.make_backend(task)
        try:
            if task.template == "cancel_by_email":
                cid = db.query("SELECT id FROM customers WHERE email = ?", (p["email"],))[0][0]
                return [
                    format_call("find_customer", {"email": p["email"]}),
                    format_call("list_orders", {"customer_id": cid}),
                    format_call("cancel_order", {"order_id": p["order_id"], "reason": p["reason"]}),
                    format_answer(f"Order {p['order_id']} is cancelled."),
                ]
            oid = p["order_id"]
            status = db.query("SELECT status FROM orders WHERE id = ?", (oid,))[0][0]
        finally:
            db.close()
        turns = [format_call("get_order", {"order_id": oid})]
        if task.template == "status":
            return turns + [format_answer(f"Order {oid} is {status}.")]
        if status not in ALLOWED[task.template]:
            return turns + [format_answer(f"Sorry, order {oid} is {status}, so I cannot do that.")]
        if task.template == "cancel":
            turns.append(format_call("cancel_order", {"order_id": oid, "reason": p["reason"]}))
            done = f"Order {oid} is cancelled."
        elif task.template == "refund":
            turns.append(format_call("refund_item", {"order_id": oid, "item_id": p["item_id"]}))
            done = f"The {p['product']} in order {oid} is refunded."
        else:
            turns.append(format_call("update_address", {"order_id": oid, "address": p["address"]}))
            done = f"Order {oid} will ship to {p['address']}."
        return turns + [format_answer(done)]


class RetailEnv(ToolEnv):
    __doc__ = ToolEnv.__doc__
    family = RetailFamily()
