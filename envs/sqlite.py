"""The shell of a SQLite-backed tool backend: a private in-memory database per episode."""

from __future__ import annotations

import sqlite3

from .base import Backend


class SQLiteBackend(Backend):
    """A private in-memory SQLite database created from `schema` (a class attribute, DDL).

    Tools and generators use bound parameters only (``query(sql, params)``, ``conn.execute``):
    agent-written strings never become SQL. One instance per episode: episodes share nothing.
    """

    schema: str = ""

    def __init__(self) -> None:
        self.conn = sqlite3.connect(":memory:")
        self.conn.executescript(self.schema)

    def query(self, sql: str, params: tuple = ()) -> list[tuple]:
        """Rows of a read query (bound parameters)."""
        return self.conn.execute(sql, params).fetchall()

    def close(self) -> None:
        self.conn.close()
