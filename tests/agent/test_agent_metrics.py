"""The agent's own /metrics (exosuit/agent/metrics.py, doc/metrics.md): a real
``exosuit-agent run`` with ``[agent] metrics_port`` set, reporting the simulated driver's
devices to a real ``exosuit-api``, scraped over HTTP and read with prometheus-client's
own parser. Its figures are the ones the API received from it; its names never clash
with the API's; anything but GET or HEAD /metrics is refused."""

from __future__ import annotations

import http.client
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import new_database_url
from tests.helpers.agent_processes import AgentProcess, ApiProcess, call, free_port, wait_for

pytestmark = pytest.mark.slow

HOST = "agent-metrics"
DEADLINE = 60.0


@pytest.fixture(scope="module")
def api(db_servers, tmp_path_factory):
    url = new_database_url("sqlite", db_servers, tmp_path_factory)
    process = ApiProcess(url, tmp_path_factory.mktemp("api"))
    process.start()
    yield process
    process.stop()


@pytest.fixture
def agent(api, tmp_path):
    port = free_port()
    process = AgentProcess(
        tmp_path,
        HOST,
        api.url,
        tmp_path,  # the simulated driver reads no sysfs
        drivers="simulated",
        metrics_host="127.0.0.1",
        metrics_port=port,
    )
    process.start()
    process.metrics_url = f"http://127.0.0.1:{port}/metrics"
    yield process
    assert process.stop() == 0, process.log()


def _scrape(url: str) -> tuple[str, dict[str, str], list]:
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
        content_type = response.headers["Content-Type"]
    families = list(text_string_to_metric_families(text))
    types = {f.name: f.type for f in families}
    samples = [s for f in families for s in f.samples]
    return content_type, types, samples


def _scraped_after_a_report(agent) -> tuple[str, dict[str, str], list]:
    def ready():
        if not agent.running:
            raise AssertionError("the agent stopped:\n" + agent.log())
        try:
            found = _scrape(agent.metrics_url)
        except OSError:
            return None
        reports = [s for s in found[2] if s.name == "exosuit_agent_reports_total"]
        return found if reports and reports[0].value >= 1 else None

    return wait_for(ready, DEADLINE, "the agent's /metrics after an acknowledged report")


def test_the_agent_exposes_its_devices_and_figures_as_the_api_received_them(api, agent):
    content_type, types, samples = _scraped_after_a_report(agent)
    assert content_type.startswith("text/plain; version=0.0.4")
    assert types["exosuit_agent_device_info"] == "gauge"
    assert types["exosuit_agent_reports"] == "counter"  # the family of _total
    assert all(name.startswith("exosuit_agent_") for name in types)

    status, body = call(api.url, "GET", f"/v2/devices?hostname={HOST}", version="2.7")
    assert status == 200
    devices = {d["pci_address"]: d for d in body["devices"]}
    assert len(devices) >= 2  # the simulated FPGA and GPU
    info = {s.labels["pci_address"]: s for s in samples if s.name == "exosuit_agent_device_info"}
    assert set(info) == set(devices)
    for address, sample in info.items():
        device = devices[address]
        assert sample.value == 1.0
        assert sample.labels == {
            "hostname": HOST,
            "type": device["type"],
            "vendor": device["vendor"],
            "model": device["model"],
            "pci_address": address,
            "driver": "simulated",  # the driver that found it (the device's own may differ)
        }
    # Every figure the API holds for a device is the agent's, under the agent's name.
    compared = 0
    for address, device in devices.items():
        for figure, value in (device["usage"] or {}).items():
            (sample,) = [
                s
                for s in samples
                if s.name == f"exosuit_agent_device_{figure}" and s.labels["pci_address"] == address
            ]
            assert sample.value == value
            compared += 1
    assert compared >= 3  # the simulated GPU's three figures at least

    (age,) = [s for s in samples if s.name == "exosuit_agent_report_age_seconds"]
    assert age.labels == {"hostname": HOST} and 0 <= age.value < DEADLINE


def test_only_get_and_head_of_metrics_are_answered(agent):
    _scraped_after_a_report(agent)
    host, port = agent.metrics_url.split("/")[2].split(":")

    def ask(method: str, path: str) -> tuple[int, bytes]:
        connection = http.client.HTTPConnection(host, int(port), timeout=10)
        try:
            connection.request(method, path)
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()

    status, body = ask("HEAD", "/metrics")
    assert (status, body) == (200, b"")
    status, body = ask("GET", "/metrics?name=x")  # a query is ignored
    assert status == 200 and body.startswith(b"# HELP exosuit_agent_device_info")
    assert ask("POST", "/metrics")[0] == 405
    assert ask("GET", "/")[0] == 404
    assert ask("GET", "/metrics/more")[0] == 404
