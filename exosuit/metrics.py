"""Prometheus metrics that every process contributes to and the API exposes
(doc/metrics.md).

Counters are kept in the database (exosuit/db/metrics.py), incremented in the
transaction that records the work they count; gauges are read from the database when
scraped. Metrics are declared as values (``Counter``, ``Gauge``, ``Families``) in the
module that counts them (e.g. exosuit/placement/metrics.py), and the ``/metrics``
handler passes the declarations it exposes to ``stream``: nothing is registered by
importing a module.

One family is the process's own: ``RequestLatency``, the API's request latency
histogram, kept in memory by each process (prometheus-client), or, when several worker
processes serve one address, in prometheus-client's multiprocess files so that any
worker answers for all of them (``PROMETHEUS_MULTIPROC_DIR``: exosuit-api sets it).

The exposition is written here rather than by prometheus-client's encoders: a fleet's
per-device series run to hundreds of thousands, and the body is streamed in chunks
(gzip-compressed when the scraper accepts it) without a metric object per sample.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Histogram, values
from prometheus_client.exposition import choose_encoder
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.utils import floatToGoString

from exosuit.db import metrics as metrics_db
from exosuit.db.metrics import LabelPairs

__all__ = [
    "Counter",
    "Declaration",
    "Exposition",
    "Families",
    "Family",
    "Gauge",
    "RequestLatency",
    "render",
    "stream",
]

Series = Iterable[tuple[tuple[str, ...], float]]
GaugeReader = Callable[[Any], Series]


@dataclasses.dataclass(frozen=True)
class Counter:
    """A counter (exposed as ``<name>_total``) with its help text and label names."""

    name: str
    help: str
    labels: tuple[str, ...] = ()

    def key(self, **labels: str) -> tuple[str, LabelPairs]:
        """The key of ``labels``' series in a ``Counts`` mapping (db/metrics.py)."""
        return self.name, tuple(sorted(labels.items()))


@dataclasses.dataclass(frozen=True)
class Gauge:
    """A gauge whose series ``read(conn)`` returns from the database at each scrape:
    ``[(label values, value), ...]``."""

    name: str
    help: str
    labels: tuple[str, ...]
    read: GaugeReader


@dataclasses.dataclass(frozen=True)
class Family:
    """One metric family as written: ``kind`` is ``gauge`` or ``counter`` (``name``
    without ``_total``); ``samples`` are (label values in the order of ``labels``,
    value)."""

    name: str
    kind: str
    help: str
    labels: tuple[str, ...]
    samples: Series


@dataclasses.dataclass(frozen=True)
class Families:
    """Families read together (they share their statements' rows): ``read(conn)``
    returns them, names included (the device figures' names are known only then)."""

    read: Callable[[Any], Iterable[Family]]


Declaration = Counter | Gauge | Families


def _read(conn: Any, declared: Iterable[Declaration]) -> list[Family]:
    """Every declared family, read in one transaction. A counter found in the database
    but not declared (counted by a process with a newer module) is exposed with its name
    as its help."""
    declared = list(declared)
    counters: dict[str, tuple[Counter, list[tuple[tuple[str, ...], float]]]] = {
        c.name: (c, []) for c in declared if isinstance(c, Counter)
    }
    for (name, pairs), value in sorted(metrics_db.read_counters(conn).items()):
        labels = dict(pairs)
        if name not in counters:
            counters[name] = (Counter(name, name, tuple(sorted(labels))), [])
        counter, samples = counters[name]
        samples.append((tuple(labels.get(n, "") for n in counter.labels), float(value)))
    found = [Family(c.name, "counter", c.help, c.labels, s) for c, s in counters.values()]
    for item in declared:
        if isinstance(item, Gauge):
            found.append(Family(item.name, "gauge", item.help, item.labels, list(item.read(conn))))
        elif isinstance(item, Families):
            found.extend(item.read(conn))
    return found


# -- the exposition ---------------------------------------------------------------------------

_CHUNK = 64 * 1024


def _escape(value: str) -> str:
    if "\\" in value or '"' in value or "\n" in value:
        return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
    return value


def _help(text: str, openmetrics: bool) -> str:
    text = text.replace("\\", r"\\").replace("\n", r"\n")
    return text.replace('"', r"\"") if openmetrics else text


def _lines(family: Family, openmetrics: bool) -> Iterator[str]:
    """The family in Prometheus' text format (0.0.4) or OpenMetrics 1.0 (they differ in
    how a counter's family is named and in the help's escaping)."""
    sample = family.name + "_total" if family.kind == "counter" else family.name
    named = family.name if openmetrics else sample
    yield f"# HELP {named} {_help(family.help, openmetrics)}\n# TYPE {named} {family.kind}\n"
    # Labels in the order of their names, as prometheus-client writes them.
    order = sorted(range(len(family.labels)), key=family.labels.__getitem__)
    names = [(i, f'{family.labels[i]}="') for i in order]
    for label_values, value in family.samples:
        if names:
            pairs = ",".join([n + _escape(label_values[i]) + '"' for i, n in names])
            yield f"{sample}{{{pairs}}} {floatToGoString(value)}\n"
        else:
            yield f"{sample} {floatToGoString(value)}\n"


def _chunks(lines: Iterable[str]) -> Iterator[bytes]:
    """``lines`` gathered into chunks of about ``_CHUNK`` bytes."""
    batch: list[str] = []
    size = 0
    for line in lines:
        batch.append(line)
        size += len(line)
        if size >= _CHUNK:
            yield "".join(batch).encode()
            batch, size = [], 0
    if batch:
        yield "".join(batch).encode()


def _gzip(chunks: Iterable[bytes]) -> Iterator[bytes]:
    # Level 1: the text is repetitive (labels repeat per device), so it already shrinks
    # about twenty-fold; higher levels cost several times the CPU for a few per cent.
    compressor = zlib.compressobj(1, zlib.DEFLATED, 31)
    for chunk in chunks:
        compressed = compressor.compress(chunk)
        if compressed:
            yield compressed
    yield compressor.flush()


@dataclasses.dataclass(frozen=True)
class Exposition:
    """A scrape's answer: ``chunks`` to send (read from the database already),
    ``content_type``, and ``encoding`` (``gzip`` or ``""``)."""

    chunks: Iterator[bytes]
    content_type: str
    encoding: str


def stream(
    db: Any,
    declared: Iterable[Declaration],
    accept: str = "",
    *,
    accept_encoding: str = "",
    latency: RequestLatency | None = None,
) -> Exposition:
    """The declared metrics in ``db`` (read now, in one read transaction) and
    ``latency``'s, in the format ``accept`` asks for (Prometheus text by default,
    OpenMetrics on request), gzip-compressed if ``accept_encoding`` allows it."""
    families = db.read(_read, declared)
    encoder, content_type = choose_encoder(accept)
    openmetrics = content_type.startswith("application/openmetrics-text")
    process = latency.exposition(encoder) if latency is not None else b""
    if openmetrics and process.endswith(b"# EOF\n"):
        process = process[: -len(b"# EOF\n")]

    def lines() -> Iterator[str]:
        for family in families:
            yield from _lines(family, openmetrics)
        yield process.decode()
        if openmetrics:
            yield "# EOF\n"

    chunks = _chunks(lines())
    if _accepts_gzip(accept_encoding):
        return Exposition(_gzip(chunks), content_type, "gzip")
    return Exposition(chunks, content_type, "")


def _accepts_gzip(accept_encoding: str) -> bool:
    """Whether an Accept-Encoding header takes gzip (``gzip`` or ``x-gzip``, not at q=0)."""
    for coding in accept_encoding.split(","):
        name, *params = coding.split(";")
        if name.strip().lower() not in ("gzip", "x-gzip"):
            continue
        for param in params:
            key, _, value = param.partition("=")
            if key.strip().lower() == "q":
                try:
                    return float(value) > 0
                except ValueError:
                    return False
        return True
    return False


def render(db: Any, declared: Iterable[Declaration], accept: str = "") -> tuple[bytes, str]:
    """The declared metrics in ``db``: (body, content type), uncompressed (``stream``
    whole)."""
    found = stream(db, declared, accept)
    return b"".join(found.chunks), found.content_type


# -- the process's own: request latency ---------------------------------------------------------

# Seconds: from a cached list (a millisecond) to a slow bind or a large inventory.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
LATENCY_NAME = "exosuit_api_request_duration_seconds"
LATENCY_LABELS = ("route", "method", "status")


class RequestLatency:
    """The API's request latency histogram, by route template, method and status class
    (``2xx`` …): bounded labels, never a raw path. Kept per process; in prometheus-client's
    multiprocess mode (``PROMETHEUS_MULTIPROC_DIR`` set before prometheus-client was
    imported) each process writes its own file there and the exposition sums them all, so
    whichever worker a scrape reaches answers for every worker of the address."""

    def __init__(self, multiprocess_dir: str | None = None) -> None:
        if multiprocess_dir is None:
            multiprocess_dir = os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None
        if multiprocess_dir is not None and not values.ValueClass._multiprocess:
            raise RuntimeError(
                "PROMETHEUS_MULTIPROC_DIR was set after prometheus_client was imported: "
                "set it before the process starts (exosuit-api sets it for its workers)"
            )
        self.multiprocess_dir = multiprocess_dir
        self._registry = CollectorRegistry(auto_describe=False)
        self._histogram = Histogram(
            LATENCY_NAME,
            "Time the API took to answer a request (until its body was sent), by route "
            "template, method and status class.",
            LATENCY_LABELS,
            buckets=LATENCY_BUCKETS,
            registry=None if multiprocess_dir else self._registry,
        )
        if multiprocess_dir:
            # A worker booting while exosuit-api stops may find the folder gone (the
            # master removes it at exit; exosuit/cmd/api.py): made again rather than
            # failing the worker's boot.
            os.makedirs(multiprocess_dir, exist_ok=True)
            MultiProcessCollector(self._registry, path=multiprocess_dir)
        self._children: dict[tuple[str, str, str], Any] = {}
        self._lock = threading.Lock()

    def observe(self, route: str, method: str, status: str, seconds: float) -> None:
        key = (route, method, status)
        child = self._children.get(key)
        if child is None:
            with self._lock:
                child = self._children[key] = self._histogram.labels(*key)
        child.observe(seconds)

    def exposition(self, encoder: Callable[[CollectorRegistry], bytes]) -> bytes:
        """The histogram (every worker's, in multiprocess mode), by ``encoder``."""
        return encoder(self._registry)

    def counts(self) -> Mapping[tuple[str, str, str], float]:
        """Requests observed by this process, by (route, method, status): for tests."""
        found: dict[tuple[str, str, str], float] = {}
        for metric in self._histogram.collect():
            for sample in metric.samples:
                if sample.name == LATENCY_NAME + "_count":
                    labels = sample.labels
                    found[(labels["route"], labels["method"], labels["status"])] = sample.value
        return found
