"""The Grafana dashboard (deploy/grafana/exosuit-fleet.json) reads only metrics the
service exports: every PromQL query of it (panels and variables) is parsed for the
metric names it selects, and each name must be in a real /metrics of the API with a
fleet (devices on two hosts, some held, usage reported, requests timed), a histogram's
and a counter's exposed suffixes included. tests/cli/test_walkthrough.py checks it
again against a running ``exosuit serve``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.metrics import Scrape, scrape, seed
from tests.helpers.promql import grafana_queries, metric_names

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "exosuit-fleet.json"
# What the dashboard is for (doc/metrics.md, "Dashboard"): each of these is read by a query.
SHOWN = {
    "exosuit_device_info",  # devices by state
    "exosuit_device_holder",  # held devices with their holder
    "exosuit_device_attach_handles",
    "exosuit_device_utilization_percent",  # the drivers' usage figures
    "exosuit_device_memory_used_bytes",
    "exosuit_api_request_duration_seconds_bucket",  # latency per route
    "exosuit_job_queue_depth",
    "exosuit_job_queue_oldest_age_seconds",
    "exosuit_placement_sync_lag_seconds",
    "exosuit_host_report_age_seconds",
}


def exported(found: Scrape) -> set[str]:
    """Every name a query may select in ``found``: its samples' names, and for a family
    with none yet, the names its samples take (a counter's ``_total``, a histogram's
    ``_bucket``, ``_sum``, ``_count``)."""
    names = found.names()
    for family, kind in found.types.items():
        if kind == "counter":
            names.add(family + "_total")
        elif kind == "histogram":
            names.update(family + suffix for suffix in ("_bucket", "_sum", "_count"))
        else:
            names.add(family)
    return names


def unknown_names(dashboard: dict, found: Scrape) -> list[tuple[str, set[str]]]:
    """The queries of ``dashboard`` naming a metric ``found`` lacks, with those names
    (and the queries that name none at all)."""
    known = exported(found)
    return [
        (where, names - known)
        for where, names in grafana_queries(dashboard)
        if not names <= known or not names
    ]


def load() -> dict:
    return json.loads(DASHBOARD.read_text())


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        (
            'exosuit_device_info{hostname=~"$hostname",status="maintaining"}',
            {"exosuit_device_info"},
        ),
        (
            "histogram_quantile(0.95, sum by (route, le) "
            "(rate(exosuit_api_request_duration_seconds_bucket[$__rate_interval])))",
            {"exosuit_api_request_duration_seconds_bucket"},
        ),
        ("count(a_seconds > 300) or vector(0)", {"a_seconds"}),
        ("x_used / on (device_uuid) group_left (model) x_total", {"x_used", "x_total"}),
        ("sum without (le) (rate(y[5m] offset 1h)) * 2e3", {"y"}),
        ('label_replace(z, "to", "$1", "from", "(.*)")', {"z"}),
    ],
    ids=["matchers", "histogram", "comparison", "vector-match", "without-offset", "strings"],
)
def test_metric_names_are_found_in_promql(expr, names):
    assert metric_names(expr) == names


def test_a_name_the_service_does_not_export_is_reported():
    found = Scrape("# HELP a A.\n# TYPE a gauge\na 1\n")
    dashboard = {
        "panels": [{"title": "p", "targets": [{"refId": "A", "expr": "a + b"}]}],
        "templating": {"list": [{"name": "v", "type": "query", "query": "label_values(c, h)"}]},
    }
    assert unknown_names(dashboard, found) == [
        ("panel 'p' target A", {"b"}),
        ("variable 'v'", {"c"}),
    ]


def test_every_dashboard_query_names_metrics_the_api_exports(sqlite_database, tmp_path):
    fleet = seed(sqlite_database, tmp_path)
    api = fleet.world.admin  # the dashboard needs the per-device series: an admin's scrape
    assert api.get("/v2/devices").status_code == 200  # a timed request, at least
    found = scrape(api)
    assert found.of("exosuit_device_holder")  # held devices are in it
    assert found.of("exosuit_device_utilization_percent")
    dashboard = load()
    assert unknown_names(dashboard, found) == []
    read = set().union(*(names for _, names in grafana_queries(dashboard)))
    assert SHOWN <= read


def test_the_dashboard_is_importable():
    """What Grafana needs to import it: a uid, a Prometheus data source variable every
    query uses, panels with unique ids inside a 24-column grid."""
    dashboard = load()
    assert dashboard["uid"] and dashboard["title"]
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["query"] == "prometheus"
    ids = []
    for panel in dashboard["panels"]:
        ids.append(panel["id"])
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        for target in panel.get("targets", ()):
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]
    assert len(ids) == len(set(ids))
