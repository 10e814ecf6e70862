"""The metric names a PromQL expression reads, for the dashboard's check
(tests/deploy/test_grafana_dashboard.py): enough of PromQL's grammar for that, no more.

A metric name is an identifier that is not a function (followed by ``(``), a keyword,
an aggregation's or a vector match's label list (``by (...)``, ``on (...)`` …), a
label matcher (inside ``{...}``) or a range (``[...]``). Strings and Grafana's
variables are removed first.
"""

from __future__ import annotations

import re

__all__ = ["grafana_queries", "metric_names"]

_KEYWORDS = {
    "and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right",
    "bool", "offset", "atan2", "inf", "nan",
}  # fmt: skip
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_LABEL_LIST = re.compile(
    r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)", re.IGNORECASE
)
_IDENTIFIER = re.compile(r"(?<![\w$.])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?")


def metric_names(expr: str) -> set[str]:
    """The metric names ``expr`` selects."""
    text = _STRING.sub('""', expr)
    text = re.sub(r"\{[^{}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\[\]]*\]", "", text)  # ranges and subqueries
    text = _LABEL_LIST.sub(" ", text)
    text = re.sub(r"\$\{?\w+\}?", " ", text)  # Grafana variables left outside matchers
    text = re.sub(r"\b\d+(?:\.\d+)?(?:e[+-]?\d+)?\b", " ", text)  # numbers
    names = set()
    for match in _IDENTIFIER.finditer(text):
        name, call = match.groups()
        if not call and name.lower() not in _KEYWORDS:
            names.add(name)
    return names


def _label_values(query: str) -> set[str]:
    """The metrics of a Grafana template query (``label_values(metric, label)``,
    ``query_result(expr)``, or a plain expression)."""
    found = re.fullmatch(r"\s*label_values\((.*),\s*\w+\s*\)\s*", query, re.DOTALL)
    if found:
        return metric_names(found.group(1))
    found = re.fullmatch(r"\s*query_result\((.*)\)\s*", query, re.DOTALL)
    return metric_names(found.group(1) if found else query)


def grafana_queries(dashboard: dict) -> list[tuple[str, set[str]]]:
    """(where, metric names) of every Prometheus query of a dashboard: each panel's
    targets (nested rows included) and each query variable."""
    found = []

    def panels(items: list[dict]) -> None:
        for panel in items:
            for target in panel.get("targets", ()):
                if "expr" in target:
                    where = f"panel {panel.get('title')!r} target {target.get('refId')}"
                    found.append((where, metric_names(target["expr"])))
            panels(panel.get("panels", ()))

    panels(dashboard.get("panels", ()))
    for variable in dashboard.get("templating", {}).get("list", ()):
        if variable.get("type") == "query":
            query = variable["query"]
            text = query["query"] if isinstance(query, dict) else query
            found.append((f"variable {variable['name']!r}", _label_values(text)))
    return found
