"""The agent without Keystone (issue 16): its own plain HTTP session against a real API
over HTTP, and what ``exosuit-agent run`` imports (no keystoneauth, requests, ssl,
cryptography or server-side module when it talks to a plain ``http://`` API).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest

from exosuit.agent.http import PlainSession
from exosuit.agent.main import make_session
from exosuit.agent.reporter import Reporter
from exosuit.api.deploy import loadapp
from exosuit.conf import make_agent_conf
from tests.helpers.inventory import fpga, snapshot
from tests.helpers.live import serve_wsgi

HOST = "lean-host"


def _conf(tmp_path, agent: str):
    path = tmp_path / "agent.conf"
    path.write_text(f"[DEFAULT]\nhost = {HOST}\n[agent]\n{agent}")
    return make_agent_conf([str(path)])


def test_plain_session_reports_through_a_real_api(conf, sqlite_database, tmp_path):
    body = snapshot(HOST, [fpga("0000:0c:00.0")])
    with serve_wsgi(loadapp(conf, sqlite_database)) as url:
        session = make_session(_conf(tmp_path, f"api_url = {url}\ntimeout = 7\n"))
        assert isinstance(session, PlainSession) and session.timeout == 7
        reporter = Reporter(session, url, HOST)
        first = reporter.report(body)
        again = reporter.report({"schema_version": 1, "hash": body["hash"]}, holds=0)
        unknown = reporter.report({"schema_version": 1, "hash": "sha256:" + "0" * 64})
        desired = session.get(f"{url}/agent/v1/hosts/{HOST}/desired_state")
        session.close()
    assert (first.kind, first.changed, first.desired_state["generation"]) == ("ok", True, 0)
    assert (again.kind, again.changed, again.desired_state) == ("ok", False, None)
    assert unknown.kind == "resend"
    assert desired.status_code == 200 and desired.headers["etag"] == '"0"'
    assert desired.json()["generation"] == 0


def test_a_closed_connection_is_opened_again(conf, sqlite_database):
    body = snapshot(HOST, [fpga("0000:0c:00.0")])
    session = PlainSession(timeout=10)
    app = loadapp(conf, sqlite_database)
    with serve_wsgi(app) as url:
        assert Reporter(session, url, HOST).report(body).kind == "ok"
    # The server went away with the kept-alive connection; another took its place.
    with serve_wsgi(app) as url:
        outcome = Reporter(session, url, HOST).report(body)
        session.close()
    assert outcome.kind == "ok" and outcome.changed is False


def test_an_api_that_is_not_there_is_unreachable_not_an_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    outcome = Reporter(PlainSession(timeout=5), f"http://127.0.0.1:{port}", HOST).report(
        {"schema_version": 1, "hash": "sha256:" + "0" * 64}
    )
    assert outcome.kind == "retry" and outcome.detail.startswith("API unreachable")


@pytest.mark.parametrize(
    "agent",
    [
        "api_url = https://api.example:6666\n",
        "api_url =\n",
        "api_url = http://api.example:6666\nauth_type = password\n",
        "api_url = http://api.example:6666\ncafile = /etc/ssl/ca.pem\n",
    ],
)
def test_keystone_or_tls_keeps_keystoneauth(tmp_path, agent):
    conf = _conf(tmp_path, agent)
    assert "auth_type" in conf.agent and "cafile" in conf.agent
    assert conf.agent.timeout == 30


@pytest.mark.slow
def test_exosuit_agent_run_imports_nothing_it_does_not_use(tmp_path):
    config = tmp_path / "agent.conf"
    config.write_text(
        f"[DEFAULT]\nhost = {HOST}\nstate_path = {tmp_path}\n[agent]\n"
        "api_url = http://127.0.0.1:9\nenabled_drivers = simulated,pci\nuevents = false\n"
    )
    probe = (
        "import json, sys\n"
        "from exosuit.conf import make_agent_conf\n"
        "from exosuit.agent.main import build_agent\n"
        f"agent = build_agent(make_agent_conf([{str(config)!r}]))\n"
        "agent.snapshot()\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    modules = set(json.loads(done.stdout))
    roots = {m.split(".")[0] for m in modules}
    unwanted = {"keystoneauth1", "requests", "urllib3", "ssl", "cryptography", "jsonschema"}
    unwanted |= {"sqlalchemy", "webob", "oslo_policy", "keystonemiddleware", "granian"}
    assert not roots & unwanted, sorted(roots & unwanted)
    assert not {m for m in modules if m.startswith(("exosuit.api", "exosuit.db"))}
    drivers = {m for m in modules if m.startswith("exosuit.drivers.")}
    assert "exosuit.drivers.simulated" in drivers and "exosuit.drivers.pci" in drivers
    assert not drivers & {"exosuit.drivers.nvidia_gpu", "exosuit.drivers.intel_fpga"}
