"""Fuzz the whole API from its OpenAPI document, in-process, on SQLite and PostgreSQL.

A bounded campaign (tests/api/fuzz_campaign.py): every operation gets EXAMPLES cases that
follow the document and EXAMPLES that break it (at most BUDGET seconds each), with a
fixed seed, so a run sends the same requests every time. The longer campaign over HTTP
is ``bench/fuzz.py`` (doc/reliability.md, "Fuzzing").
"""

from __future__ import annotations

import pytest

from exosuit.api.deploy import loadapp
from exosuit.db.api import Database
from tests.api import fuzz_campaign as campaign
from tests.conftest import ApiClient, make_test_conf, new_database_url

EXAMPLES = 15
BUDGET = 3.0  # seconds per operation and mode: a bound, not a target
SEED = 14


def _send(api: ApiClient) -> campaign.Send:
    def send(method, path, body, headers):
        r = api.request(method, path, body, headers=headers)
        return r.status_code, (r.json if r.content_type == "application/json" else None)

    return send


@pytest.fixture(params=["sqlite", "postgresql"])
def fuzzed_app(request, db_servers, tmp_path_factory):
    """The API on a new database of its own (the campaign writes whatever it likes)."""
    db = Database(new_database_url(request.param, db_servers, tmp_path_factory))
    # Below 2.6 a program waits for its end; no agent runs here to end it.
    state = tmp_path_factory.mktemp("state")
    # New devices ready at once (no operator here to mark them): the world's ARQ binds.
    conf = make_test_conf(
        **{
            "api.program_wait": 0.2,
            "state_path": str(state),
            "inventory.new_device_activation": "ready",
        }
    )
    yield loadapp(conf, db)
    db.dispose()


def test_no_request_gets_a_5xx_or_an_answer_the_document_does_not_describe(fuzzed_app):
    known = campaign.seed(_send(ApiClient(fuzzed_app)))
    schema = campaign.load(app=fuzzed_app)
    run = campaign.Campaign(
        schema,
        known,
        examples=EXAMPLES,
        budget=BUDGET,
        seed=SEED,
        # buffered: the test client reads and closes each answer, as a server would (a
        # streamed image's file is closed when its iterator is).
        call=lambda case: case.call(buffered=True),
    )
    report = run.run()

    assert report.failures == [], "\n".join(str(f) for f in report.failures)
    operations = {op.label for op in run.operations()}
    reached = {label for label, _ in report.statuses}
    assert reached == operations  # each operation was sent at least one case
    statuses = report.by_status()
    # The seeded world is reached: successes and refusals alike, not only 404s.
    assert statuses.get(200, 0) > 0 and statuses.get(201, 0) > 0, statuses
    assert statuses.get(400, 0) > 0 and statuses.get(404, 0) > 0, statuses
    assert all(status < 500 for status in statuses), statuses
