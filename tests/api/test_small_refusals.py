"""Issue 24, item 6: a database outage logs one line per request (PostgreSQL's words span
four); a body in a transfer coding other than chunked gets the API's error format (501);
an unknown major microversion is named as such (406), not "mutually exclusive". Through
exosuit serve's own HTTP server: tests/cmd/test_slow_clients.py."""

from __future__ import annotations

import json
import logging

import pytest
import sqlalchemy as sa
import webob

from exosuit.api.deploy import loadapp
from exosuit.db import migration
from exosuit.db.api import Database
from tests.conftest import make_test_conf, require
from tests.helpers.tcp_proxy import TcpProxy


def fault(response: webob.Response) -> dict:
    return json.loads(response.json["error_message"])


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    db = Database(f"sqlite:///{tmp_path_factory.mktemp('db')}/exosuit.sqlite")
    migration.upgrade(db)
    yield loadapp(make_test_conf(), db)
    db.dispose()


@pytest.fixture
def outage(db_servers):
    """The API on a PostgreSQL database reached through a proxy that ``cut()`` stops."""
    server = db_servers["postgresql"]
    require(server.engine is not None, server.error or "")
    url = sa.make_url(server.create())
    proxy = TcpProxy((url.host or "127.0.0.1", url.port or 5432))
    db = Database(url.set(host="127.0.0.1", port=proxy.port).render_as_string(False))
    migration.upgrade(db)
    yield loadapp(make_test_conf(), db), proxy
    proxy.close()
    db.dispose()


def test_a_database_outage_logs_one_line_per_request(outage, caplog):
    app, proxy = outage
    paths = ["/healthz", "/v2/devices", "/v2/deployables", "/v2/device_profiles"]
    for path in paths:
        assert webob.Request.blank(path).get_response(app).status_int == 200
    proxy.cut()
    caplog.set_level(logging.INFO)
    for path in paths:
        response = webob.Request.blank(path).get_response(app)
        assert response.status_int == 503
        assert fault(response)["code"] == "exosuit.database.unavailable"
    records = [r for r in caplog.records if r.levelno >= logging.INFO]
    assert len(records) == len(paths), [r.getMessage() for r in records]
    for record, path in zip(records, paths, strict=True):
        line = record.getMessage()
        assert "\n" not in line, line  # PostgreSQL's message spans four lines
        assert record.exc_info is None, line  # no traceback
        assert line.startswith(f"GET {path}: The database is unavailable: ")


@pytest.mark.parametrize("coding", ["gzip", "gzip, chunked", "deflate"])
def test_a_body_in_another_transfer_coding_is_refused_in_the_apis_format(app, coding):
    req = webob.Request.blank("/v2/device_profiles", method="POST", body=b"\x1f\x8b")
    req.headers["Transfer-Encoding"] = coding
    response = req.get_response(app)
    assert response.status_int == 501
    error = fault(response)
    assert error["code"] == "exosuit.request.transfer_encoding"
    assert (
        error["faultstring"] == "The request's Transfer-Encoding is not supported: only chunked is."
    )


def test_an_unknown_major_microversion_is_named(app):
    req = webob.Request.blank("/v2/device_profiles")
    req.headers["OpenStack-API-Version"] = "accelerator 3.0"
    response = req.get_response(app)
    assert response.status_int == 406
    message = fault(response)["faultstring"]
    assert "Mutually exclusive" not in message
    assert message.startswith("Version 3.0 was requested but this service has no major version 3")
    assert "The supported version range is: [2.0, " in message
