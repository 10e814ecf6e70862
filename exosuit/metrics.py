"""Prometheus metrics that every process contributes to and the API exposes.

The conductor and the API are different processes, often on different
machines, so a counter kept in one process's memory would never reach the
API's ``/metrics``. Counters live in the database instead (table
``metric_counters``: name, labels, value), incremented by ``increment`` in
the transaction that records the work they count; gauges are read from the
database when scraped. ``DatabaseCollector`` (a prometheus-client custom
collector) turns both into metric families at each scrape.

Modules declare their metrics (``declare_counter``, ``declare_gauge``) at import;
the API imports those modules before it serves ``/metrics``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping

import sqlalchemy as sa
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import choose_encoder

from exosuit.db import models

__all__ = [
    "Counts",
    "DatabaseCollector",
    "declare_counter",
    "declare_gauge",
    "increment",
    "read_counters",
    "render",
]

t = models.metric_counters

# name (without _total) -> (help, label names)
COUNTERS: dict[str, tuple[str, tuple[str, ...]]] = {}
# name -> (help, label names, read(conn) -> [(label values, value)])
GaugeReader = Callable[[object], Iterable[tuple[tuple[str, ...], float]]]
GAUGES: dict[str, tuple[str, tuple[str, ...], GaugeReader]] = {}

# (name, ((label, value), ...)) -> amount
Counts = dict[tuple[str, tuple[tuple[str, str], ...]], int]


def declare_counter(name: str, help_text: str, labels: tuple[str, ...] = ()) -> str:
    COUNTERS[name] = (help_text, labels)
    return name


def declare_gauge(name: str, help_text: str, labels: tuple[str, ...],
                  read: GaugeReader) -> str:
    GAUGES[name] = (help_text, labels, read)
    return name


def key(name: str, **labels: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return name, tuple(sorted(labels.items()))


def _labels_json(labels: tuple[tuple[str, str], ...]) -> str:
    return json.dumps(dict(labels), sort_keys=True, separators=(",", ":"))


def increment(conn, counts: Mapping[tuple[str, tuple[tuple[str, str], ...]], int]) -> None:
    """Add ``counts`` to the counters, in the caller's transaction.

    One upsert per counter, in a fixed order (so that concurrent transactions
    lock the rows in the same order and cannot deadlock on them).
    """
    rows = sorted((name, _labels_json(labels), amount)
                  for (name, labels), amount in counts.items() if amount)
    for name, labels, amount in rows:
        conn.execute(_upsert(conn.dialect.name, name, labels, amount))


def _upsert(dialect: str, name: str, labels: str, amount: int):
    values = {"name": name, "labels": labels, "value": amount}
    if dialect in ("mysql", "mariadb"):
        from sqlalchemy.dialects.mysql import insert as mysql_insert

        stmt = mysql_insert(t).values(**values)
        return stmt.on_duplicate_key_update(value=t.c.value + stmt.inserted.value)
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        stmt = pg_insert(t).values(**values)
    else:
        from sqlalchemy.dialects.sqlite import insert as sqlite_insert

        stmt = sqlite_insert(t).values(**values)
    return stmt.on_conflict_do_update(index_elements=[t.c.name, t.c.labels],
                                      set_={"value": t.c.value + stmt.excluded.value})


def read_counters(conn) -> dict[tuple[str, tuple[tuple[str, str], ...]], int]:
    """Every counter: (name, sorted label pairs) -> value."""
    found = {}
    for row in conn.execute(sa.select(t.c.name, t.c.labels, t.c.value)):
        found[(row.name, tuple(sorted(json.loads(row.labels).items())))] = int(row.value)
    return found


class DatabaseCollector:
    """A prometheus-client collector reading the counters and gauges from the database."""

    def __init__(self, db) -> None:
        self.db = db

    def collect(self):
        counters, gauges = self.db.read(self._read)
        families: dict[str, tuple[CounterMetricFamily, tuple[str, ...]]] = {}
        for name, (help_text, labels) in COUNTERS.items():
            families[name] = (CounterMetricFamily(name, help_text, labels=labels), labels)
        for (name, pairs), value in sorted(counters.items()):
            labels = dict(pairs)
            if name not in families:  # counted by a process whose module this one lacks
                names = tuple(sorted(labels))
                families[name] = (CounterMetricFamily(name, name, labels=names), names)
            family, names = families[name]
            family.add_metric([labels.get(n, "") for n in names], value)
        for family, _ in families.values():
            yield family
        for name, (help_text, labels, _) in GAUGES.items():
            family = GaugeMetricFamily(name, help_text, labels=labels)
            for label_values, value in gauges[name]:
                family.add_metric(list(label_values), value)
            yield family

    @staticmethod
    def _read(conn):
        gauges = {name: list(read(conn)) for name, (_, _, read) in GAUGES.items()}
        return read_counters(conn), gauges


def render(db, accept: str = "") -> tuple[bytes, str]:
    """Every metric in ``db``: (body, content type), in the format ``accept`` asks for
    (Prometheus text by default, OpenMetrics on request)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DatabaseCollector(db))
    encoder, content_type = choose_encoder(accept)
    return encoder(registry), content_type
