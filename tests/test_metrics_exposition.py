"""The exposition of /metrics (in-process, SQLite): Prometheus text by default,
OpenMetrics when asked, gzip when accepted, streamed; both formats parse with
prometheus-client's own parsers and carry the same samples."""

from __future__ import annotations

import gzip

import pytest

from exosuit import metrics
from tests.helpers.metrics import Scrape, scrape, seed

OPENMETRICS = "application/openmetrics-text; version=1.0.0"


@pytest.fixture
def fleet(sqlite_database, tmp_path):
    return seed(sqlite_database, tmp_path)


def _samples(found: Scrape) -> set[tuple]:
    """(name, labels, value) of every sample; ages and latencies move between two scrapes:
    their values are left out."""
    return {
        (
            s.name,
            tuple(sorted(s.labels.items())),
            None if "seconds" in s.name else s.value,
        )
        for s in found.samples
        if not s.name.startswith("exosuit_api_request_duration")
    }


def test_text_openmetrics_and_gzip_carry_the_same_samples(fleet):
    api = fleet.world.api
    text = api.get("/metrics")
    assert text.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    assert "Content-Encoding" not in text.headers
    assert "Content-Length" not in text.headers  # streamed
    plain = Scrape(text.body.decode())
    assert len(plain.samples) > 20
    zipped = api.get("/metrics", headers={"Accept-Encoding": "gzip, deflate"})
    assert zipped.headers["Content-Encoding"] == "gzip"
    assert "Accept-Encoding" in zipped.headers["Vary"]
    assert len(zipped.body) < len(text.body)
    assert _samples(Scrape(gzip.decompress(zipped.body).decode())) == _samples(plain)
    refused = api.get("/metrics", headers={"Accept-Encoding": "gzip;q=0, identity"})
    assert "Content-Encoding" not in refused.headers
    om = scrape(api, Accept=OPENMETRICS, **{"Accept-Encoding": "gzip"})
    assert om.text.endswith("# EOF\n")
    assert _samples(om) == _samples(plain)
    # A counter is named without _total in OpenMetrics' TYPE line, with it in the text's.
    assert "# TYPE exosuit_placement_requests counter" in om.text
    assert "# TYPE exosuit_placement_requests_total counter" in plain.text


def test_help_and_label_values_are_escaped(sqlite_database):
    odd = 'a "quoted" back\\slash and a\nnewline'
    family = metrics.Family(
        "exosuit_test_odd", "gauge", "Help with a \\ and a\nnewline.", ("label",), [((odd,), 2.0)]
    )
    declared = [metrics.Families(lambda conn: [family])]
    for accept, openmetrics in (("", False), (OPENMETRICS, True)):
        body, content_type = metrics.render(sqlite_database, declared, accept)
        found = Scrape(body.decode(), openmetrics)
        assert found.value("exosuit_test_odd", label=odd) == 2.0
        assert content_type.startswith("application/openmetrics" if openmetrics else "text/")
