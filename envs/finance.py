"""Finance tools (like FinMCP-Bench): quotes, accounts, holdings and transactions in SQLite.

Orders fill at the latest close. Constraints: a buy needs enough cash, a sell enough shares,
1 <= qty <= 1000, known symbols only. The verifier checks the book (cash, holdings,
transactions) and numeric answers within tolerance.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from rehearsal_gym.core.protocol import ToolCall, ToolSpec, format_answer, format_call

from .base import Family, Task, ToolEnv, ToolError
from .sqlite import SQLiteBackend

SYMBOLS = ("ACME", "BOLT", "CRUX", "DYNA", "EPIC", "FLUX")
N_DAYS = 10
MAX_ORDER_QTY = 1000  # place_order's qty maximum: a shown holding above it could never be sold in one order
_STR = {"type": "string", "maxLength": 40}


def _spec(name: str, description: str, props: dict[str, Any]) -> ToolSpec:
    return ToolSpec(name, description, {"type": "object", "properties": props, "required": list(props)})


TOOLS = {
    s.name: s
    for s in [
        _spec("get_price", "closing price on a date", {"symbol": _STR, "date": _STR}),
        _spec(
            "compute_return", "percent return between two dates", {"symbol": _STR, "start": _STR, "end": _STR}
        ),
        _spec("get_account", "cash and holdings", {"account_id": _STR}),
        _spec(
            "place_order",
            "buy or sell at the latest close",
            {
                "account_id": _STR,
                "symbol": _STR,
                "side": {"enum": ["buy", "sell"]},
                "qty": {"type": "integer", "minimum": 1, "maximum": MAX_ORDER_QTY},
            },
        ),
        _spec("portfolio_value", "cash plus holdings at the latest close", {"account_id": _STR}),
    ]
}

SCHEMA = """
CREATE TABLE quotes (symbol TEXT NOT NULL, date TEXT NOT NULL, close REAL NOT NULL, PRIMARY KEY (symbol, date));
CREATE TABLE accounts (id TEXT PRIMARY KEY, cash REAL NOT NULL CHECK (cash >= 0));
CREATE TABLE holdings (account_id TEXT NOT NULL REFERENCES accounts(id), symbol TEXT NOT NULL,
                       qty INTEGER NOT NULL CHECK (qty >= 0), PRIMARY KEY (account_id, symbol));
CREATE TABLE transactions (id INTEGER PRIMARY KEY, account_id TEXT NOT NULL, symbol TEXT NOT NULL,
                           side TEXT NOT NULL, qty INTEGER NOT NULL, price REAL NOT NULL);
"""


def trading_days(world_seed: int) -> list[str]:
    start = dt.date(2024, 1, 1) + dt.timedelta(days=7 * (world_seed % 50))
    days, d = [], start
    while len(days) < N_DAYS:
        if d.weekday() < 5:
            days.append(d.isoformat())
        d += dt.timedelta(days=1)
    return days


class Book(SQLiteBackend):
    """An in-memory SQLite book generated from a seed (`SQLiteBackend`)."""

    tools = TOOLS
    schema = SCHEMA

    def __init__(self, world_seed: int, holdings: Mapping[str, Mapping[str, int]] | None = None) -> None:
        """`holdings` ({account: {symbol: qty}}) overrides generated quantities of existing accounts
        (the facts a rehearsed agent was shown, see `FinanceFamily.shown_task`)."""
        super().__init__()
        rng = np.random.default_rng(world_seed)
        self.days = trading_days(world_seed)
        for symbol in SYMBOLS:
            price = float(rng.uniform(20, 300))
            for day in self.days:
                self.conn.execute("INSERT INTO quotes VALUES (?, ?, ?)", (symbol, day, round(price, 2)))
                price *= float(np.exp(rng.normal(0, 0.03)))
        for a in range(int(rng.integers(2, 5))):
            account = f"A{int(rng.integers(10, 99))}{a}"
            self.conn.execute(
                "INSERT INTO accounts VALUES (?, ?)", (account, round(float(rng.uniform(500, 20000)), 2))
            )
            for symbol in rng.choice(SYMBOLS, size=int(rng.integers(1, 4)), replace=False):
                qty = int(rng.integers(1, 60))
                self.conn.execute("INSERT INTO holdings VALUES (?, ?, ?)", (account, str(symbol), qty))
        for account, held in (holdings or {}).items():
            if self.query("SELECT 1 FROM accounts WHERE id = ?", (account,)):
                for symbol, qty in held.items():
                    self.conn.execute(
                        "DELETE FROM holdings WHERE account_id = ? AND symbol = ?", (account, symbol)
                    )
                    self.conn.execute("INSERT INTO holdings VALUES (?, ?, ?)", (account, symbol, int(qty)))
        self.conn.commit()

    def _close(self, symbol: str, date: str) -> float:
        if symbol not in SYMBOLS:
            raise ToolError(f"unknown symbol {symbol[:20]!r}; symbols are {', '.join(SYMBOLS)}")
        row = self.conn.execute(
            "SELECT close FROM quotes WHERE symbol = ? AND date = ?", (symbol, date)
        ).fetchone()
        if row is None:
            raise ToolError(
                f"no quote for {symbol} on {date[:20]!r}; trading days are {self.days[0]}..{self.days[-1]}"
            )
        return row[0]

    def _account(self, account_id: str) -> tuple[float, dict[str, int]]:
        row = self.conn.execute("SELECT cash FROM accounts WHERE id = ?", (account_id,)).fetchone()
        if row is None:
            raise ToolError(f"account {account_id[:40]!r} not found")
        held = self.query(
            "SELECT symbol, qty FROM holdings WHERE account_id = ? AND qty > 0 ORDER BY symbol", (account_id,)
        )
        return row[0], dict(held)

    def call(self, call: ToolCall) -> dict[str, Any]:
        a = call.arguments
        if call.name == "get_price":
            return {"symbol": a["symbol"], "date": a["date"], "close": self._close(a["symbol"], a["date"])}
        if call.name == "compute_return":
            p0, p1 = self._close(a["symbol"], a["start"]), self._close(a["symbol"], a["end"])
            return {"symbol": a["symbol"], "return_pct": round((p1 / p0 - 1) * 100, 2)}
        cash, held = self._account(a["account_id"])
        if call.name == "get_account":
            holdings = [{"symbol": s, "qty": q} for s, q in held.items()]
            return {"account_id": a["account_id"], "cash": cash, "holdings": holdings}
        if call.name == "portfolio_value":
            value = cash + sum(q * self._close(s, self.days[-1]) for s, q in held.items())
            return {"account_id": a["account_id"], "value": round(value, 2)}
        # place_order
        symbol, qty, side = a["symbol"], a["qty"], a["side"]
        price = self._close(symbol, self.days[-1])
        cost = round(price * qty, 2)
        if side == "buy" and cost > cash:
            raise ToolError(f"insufficient cash: {qty} {symbol} cost {cost}, cash is {cash}")
        if side == "sell" and qty > held.get(symbol, 0):
            raise ToolError(f"insufficient shares: selling {qty} {symbol}, holding {held.get(symbol, 0)}")
        sign = 1 if side == "buy" else -1
        with self.conn:
            self.conn.execute(
                "UPDATE accounts SET cash = round(cash - ?, 2) WHERE id = ?", (sign * cost, a["account_id"])
            )
            self.conn.execute(
                "INSERT INTO holdings VALUES (?, ?, ?) ON CONFLICT(account_id, symbol) DO UPDATE SET qty = qty + ?",
                (a["account_id"], symbol, qty, sign * qty),
            )
            self.conn.execute(
                "INSERT INTO transactions (account_id, symbol, side, qty, price) VALUES (?, ?, ?, ?, ?)",
                (a["account_id"], symbol, side, qty, price),
            )
        new_cash = self.query("SELECT cash FROM accounts WHERE id = ?", (a["account_id"],))[0][0]
        return {
            "status": "filled",
            "side": side,
            "symbol": symbol,
            "qty": qty,
            "price": price,
            "cash": new_cash,
        }

    def state(self) -> dict[str, list]:
        return {
            "accounts": [list(r) for r in self.query("SELECT id, cash FROM accounts ORDER BY id")],
            "holdings": [list(r) for r in self.query("SELECT * FROM holdings WHERE qty > 0 ORDER BY 1, 2")],
            "transactions": [list(r) for r in self.query("SELECT * FROM transactions ORDER BY id")],
        }


class FinanceFamily(Family):
    name = "finance"
    tools = TOOLS
    templates = ("price", "return", "buy", "sell_all", "value")

    def make_backend(self, task: Task) -> Book:
        return Book(task.world_seed, task.facts.get("holdings"))

    def shown_task(self, task: Task, seen: Sequence[tuple[ToolCall, Mapping[str, Any]]]) -> Task:
        """A buy's answer follows the shown outcome of its order: a rejection for insufficient cash
        must be reported, a fill need not. (The fill itself is replayed on the real book for both
        the agent and the oracle, so the state check is unchanged.)

        A sell_all's book holds the quantity of the symbol that the first get_account of the account
        showed (a positive int up to the order maximum), so the goal state is the shown sale carried
        out and the oracle's answer names the shown quantity. (On the real book a shown quantity
        above the real one was rejected, and the goal was the unchanged book.) A shown account
        without the symbol keeps the real task."""
        if task.template == "sell_all":
            return _shown_holding(task, seen)
        if task.template != "buy":
            return task
        p = task.params
        order = {"account_id": p["account_id"], "symbol": p["symbol"], "side": "buy", "qty": p["qty"]}
        for call, shown in seen:
            if call.name == "place_order" and dict(call.arguments) == order:
                if "insufficient" in str(shown.get("error", "")).lower():
                    return dataclasses.replace(task, answer_kind="keyword", answer_key="insufficient")
                if shown.get("status") == "filled":
                    return dataclasses.replace(task, answer_kind="any", answer_key="")
                return task
        return task

    def draw_task(self, rng: np.random.Generator, task_id: str) -> Task:
        world_seed = int(rng.integers(2**31))
        book = Book(world_seed)
        try:
            template = self.templates[int(rng.integers(len(self.templates)))]
            symbol = SYMBOLS[int(rng.integers(len(SYMBOLS)))]
            accounts = [r[0] for r in book.query("SELECT id FROM accounts ORDER BY id")]
            account = accounts[int(rng.integers(len(accounts)))]
            p: dict[str, Any] = {"symbol": symbol, "account_id": account}
            kind, key = "number", ""
            if template == "price":
                p["date"] = book.days[int(rng.integers(N_DAYS))]
                text = f"What was the closing price of {symbol} on {p['date']}?"
                rule = "get_price with the symbol and date, answer the close"
            elif template == "return":
                i, j = sorted(rng.choice(N_DAYS, size=2, replace=False).tolist())
                p.update(start=book.days[i], end=book.days[j])
                text = f"What was the percent return of {symbol} from {p['start']} to {p['end']}?"
                rule = "compute_return with start before end, answer return_pct"
            elif template == "buy":
                p["qty"] = int(rng.integers(1, 80))
                text = f"Buy {p['qty']} shares of {symbol} for account {account}."
                rule = "place_order buy; if it is rejected for insufficient cash, say so"
                cash = book.query("SELECT cash FROM accounts WHERE id = ?", (account,))[0][0]
                affordable = round(p["qty"] * book._close(symbol, book.days[-1]), 2) <= cash
                kind, key = ("any", "") if affordable else ("keyword", "insufficient")
            elif template == "sell_all":
                held = book.query(
                    "SELECT symbol FROM holdings WHERE account_id = ? ORDER BY symbol", (account,)
                )
                p["symbol"] = symbol = held[int(rng.integers(len(held)))][0]
                text = f"Sell all shares of {symbol} in account {account}."
                rule = "get_account to read the quantity held, then place_order sell that qty"
                kind = "any"
            else:
                text = f"What is the total value of account {account}?"
                rule = "portfolio_value of the account, answer value"
            return Task(task_id, self.name, template, text, world_seed, p, kind, key, rule)
        finally:
            book.close()

    def oracle(self, task: Task) -> list[str]:
        p = task.params
        book = self.make_backend(task)
        try:
            acct = {"account_id": p["account_id"]}
            if task.template == "price":
                args = {"symbol": p["symbol"], "date": p["date"]}
                return [format_call("get_price", args), format_answer(str(book._close(**args)))]
            if task.template == "return":
                args = {"symbol": p["symbol"], "start": p["start"], "end": p["end"]}
                result = book.call(ToolCall("compute_return", args))
                return [format_call("compute_return", args), format_answer(f"{result['return_pct']}%")]
            if task.template == "value":
                value = book.call(ToolCall("portfolio_value", acct))["value"]
                return [format_call("portfolio_value", acct), format_answer(str(value))]
            if task.template == "buy":
                order = {**acct, "symbol": p["symbol"], "side": "buy", "qty": p["qty"]}
                if task.answer_kind == "keyword":
                    done = f"The order was rejected: insufficient cash in {p['account_id']}."
                else:
                    done = f"Bought {p['qty']} {p['symbol']} for {p['account_id']}."
                return [format_call("place_order", order), format_answer(done)]
            qty = book._account(p["account_id"])[1][p["symbol"]]
            order = {**acct, "symbol": p["symbol"], "side": "sell", "qty": qty}
            done = f"Sold {qty} {p['symbol']} from {p['account_id']}."
            return [format_call("get_account", acct), format_call("place_order", order), format_answer(done)]
        finally:
            book.close()


def _shown_holding(task: Task, seen: Sequence[tuple[ToolCall, Mapping[str, Any]]]) -> Task:
    account, symbol = task.params["account_id"], task.params["symbol"]
    for call, shown in seen:
        if call.name != "get_account" or call.arguments.get("account_id") != account:
            continue
        holdings = shown.get("holdings")
        records = [h for h in holdings if isinstance(h, Mapping)] if isinstance(holdings, list) else []
        qty = next((h.get("qty") for h in records if h.get("symbol") == symbol), None)
        if isinstance(qty, int) and not isinstance(qty, bool) and 0 < qty <= MAX_ORDER_QTY:
            return dataclasses.replace(task, facts={"holdings": {account: {symbol: qty}}})
        return task
    return task


class FinanceEnv(ToolEnv):
    __doc__ = ToolEnv.__doc__
    family = FinanceFamily()
