"""Prometheus counters kept in the database (table ``metric_counters``).

The conductor and the API are different processes, often on different
machines, so a counter kept in one process's memory would never reach the
API's ``/metrics``. Counters live here instead: ``increment`` adds to them in
the transaction that records the work they count, and the API reads them at
each scrape (exosuit/metrics.py turns them into metric families).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from exosuit.db import models

__all__ = ["Counts", "LabelPairs", "increment", "read_counters"]

t = models.metric_counters

# A counter's labels: sorted (name, value) pairs.
LabelPairs = tuple[tuple[str, str], ...]
# (name, labels) -> amount
Counts = Mapping[tuple[str, LabelPairs], int]


def _labels_json(labels: LabelPairs) -> str:
    return json.dumps(dict(labels), sort_keys=True, separators=(",", ":"))


def increment(conn: Connection, counts: Counts) -> None:
    """Add ``counts`` to the counters, in the caller's transaction.

    Upserts in a fixed order (so that concurrent transactions
    lock the rows in the same order and cannot deadlock on them).
    """
    rows = sorted(
        (name, _labels_json(labels), amount) for (name, labels), amount in counts.items() if amount
    )
    upsert = _upsert(conn.dialect.name)
    params = [{"name": name, "labels": labels, "value": amount} for name, labels, amount in rows]
    if len(params) == 1:
        conn.execute(upsert, params[0])
    elif params:
        # One statement for all (a multi-row upsert where the driver has it); its rows
        # in the same fixed order.
        conn.execute(upsert, params)


@functools.cache  # built once per dialect
def _upsert(dialect: str) -> sa.Insert:
    values: dict[str, sa.BindParameter[object]] = {
        "name": sa.bindparam("name"),
        "labels": sa.bindparam("labels"),
        "value": sa.bindparam("value"),
    }
    if dialect in ("mysql", "mariadb"):
        from sqlalchemy.dialects.mysql import insert as mysql_insert

        mysql_stmt = mysql_insert(t).values(values)
        return mysql_stmt.on_duplicate_key_update(value=t.c.value + mysql_stmt.inserted.value)
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        pg_stmt = pg_insert(t).values(values)
        return pg_stmt.on_conflict_do_update(
            index_elements=[t.c.name, t.c.labels],
            set_={"value": t.c.value + pg_stmt.excluded.value},
        )
    from sqlalchemy.dialects.sqlite import insert as sqlite_insert

    sqlite_stmt = sqlite_insert(t).values(values)
    return sqlite_stmt.on_conflict_do_update(
        index_elements=[t.c.name, t.c.labels],
        set_={"value": t.c.value + sqlite_stmt.excluded.value},
    )


def read_counters(conn: Connection) -> dict[tuple[str, LabelPairs], int]:
    """Every counter: (name, sorted label pairs) -> value."""
    found = {}
    for row in conn.execute(sa.select(t.c.name, t.c.labels, t.c.value)):
        found[(row.name, tuple(sorted(json.loads(row.labels).items())))] = int(row.value)
    return found
