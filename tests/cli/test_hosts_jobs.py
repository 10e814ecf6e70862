"""``exosuit host …`` and ``exosuit job …`` (API 2.5) against a real ``exosuit serve``.

The server keeps a Placement in sync, with one attempt per job. That Placement is a
stand-in that refuses every request (400), so the server's ``placement_sync`` job
fails: something for ``job retry`` to retry. While the stand-in holds its answers, a
retried job stays running (for Ctrl-C while waiting).
"""

from __future__ import annotations

import contextlib
import http.server
import json
import re
import subprocess
import threading
import time

import pytest

from exosuit.cli.client import CLIENT_MAX_VERSION
from exosuit.cli.hosts import HostList
from exosuit.cli.jobs import JobList
from tests.cli.conftest import HOST, cli_env, pick, run_on_terminal, write_conf
from tests.helpers.agent_processes import drain
from tests.helpers.serve_fixture import ExosuitServer

pytestmark = pytest.mark.slow

DEADLINE = 60.0


class RefusingPlacement:
    """Answers every request with a 400 (after ``release`` is set: ``hold`` keeps
    the requests waiting). Not Placement: only what makes a sync job fail."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.release.set()
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _refuse(self) -> None:
                owner.release.wait(DEADLINE)
                body = json.dumps({"errors": [{"status": 400, "detail": "refused"}]}).encode()
                self.send_response(400)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PUT = do_DELETE = _refuse

            def log_message(self, *args) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @contextlib.contextmanager
    def holding(self):
        self.release.clear()
        try:
            yield
        finally:
            self.release.set()

    def close(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


class WithPlacement(ExosuitServer):
    def __init__(self, data_dir, config_files, placement_url: str) -> None:
        super().__init__(data_dir, config_files)
        self.placement_url = placement_url

    def argv(self) -> list[str]:
        return [*super().argv(), "--placement-url", self.placement_url]


@pytest.fixture(scope="module")
def placement():
    stand_in = RefusingPlacement()
    try:
        yield stand_in
    finally:
        stand_in.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory, placement):
    base = tmp_path_factory.mktemp("exosuit-cli-jobs")
    conf = write_conf(base / "exosuit.conf", "[conductor]\nmax_attempts = 1\npoll_interval = 0.2\n")
    started = WithPlacement(base / "data", [conf], placement.url)
    try:
        yield started.start()
    finally:
        started.kill()


def _wait_for(condition, what: str):
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"no {what} after {DEADLINE} s")


@pytest.fixture(scope="module")
def failed_job(api) -> dict:
    major, minor = api.max_version().split(".")
    assert (int(major), int(minor)) >= (2, 5), "these tests need the API at 2.5"
    return _wait_for(
        lambda: next(iter(api.list("/v2/jobs", "jobs", "2.5", state="failed")), None),
        "failed placement_sync job",
    )


def _job(api, ident) -> dict:
    return api.get(f"/v2/jobs/{ident}", "2.5")


def _wait_failed(api, ident) -> dict:
    return _wait_for(lambda: (j := _job(api, ident))["state"] == "failed" and j, "failed job")


# -- hosts ------------------------------------------------------------------------------


# What changes between two requests: the report's age, the agent's next report, the
# conductor's attempts to sync Placement.
VOLATILE = {"report_age_seconds", "last_report_at", "updated_at", "placement", "observed_at"}


def _stable(item: dict) -> dict:
    return {k: v for k, v in item.items() if k not in VOLATILE and k != "links"}


def test_host_list_and_show_json(cli, api, failed_job):
    # What the command line shows: the hosts at the version it speaks (2.9 adds drain's
    # fields to both, and the holders to one host).
    hosts = api.list("/v2/hosts", "hosts", CLIENT_MAX_VERSION)

    shown = cli.json("host", "list")

    assert [_stable(h) for h in shown] == [_stable(h) for h in pick(hosts, HostList.columns)]
    assert list(shown[0]) == list(HostList.columns)
    assert [h["hostname"] for h in shown] == [HOST]
    assert shown[0]["attach_handles"] == {"total": 17, "in_use": 0}
    assert shown[0]["report_age_seconds"] >= 0
    long = cli.json("host", "list", "--long")
    assert set(long[0]) == set(hosts[0]) - {"links"}
    assert long[0]["placement"]["failures"] >= 1  # structured, as the API gives it

    one = cli.json("host", "show", HOST)
    assert _stable(one) == _stable(api.get(f"/v2/hosts/{HOST}", CLIENT_MAX_VERSION))
    assert set(one) == set(hosts[0]) - {"links"} | {"holders"}
    assert (one["maintenance"], one["holders"]) == (None, [])
    assert cli.run("host", "list", "-f", "value", "-c", "hostname").stdout == f"{HOST}\n"


def test_host_show_of_an_unknown_host(cli):
    result = cli.run("host", "show", "nowhere", check=False)
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1
    assert "(HTTP 404, exosuit.host.not_found)" in result.stderr


def test_host_list_sort_and_limit(cli):
    assert cli.json("host", "list", "--sort", "hostname:desc", "--limit", "1", "-c",
                    "hostname") == [{"hostname": HOST}]  # fmt: skip


# -- jobs -------------------------------------------------------------------------------


def test_job_list_and_show_json(cli, api, failed_job):
    # The failing host's syncs fail on: compare with a list that did not change around
    # the command's.
    for _ in range(10):
        failed = api.list("/v2/jobs", "jobs", "2.5", state="failed")
        shown_failed = cli.json("job", "list", "--state", "failed")
        if api.list("/v2/jobs", "jobs", "2.5", state="failed") == failed:
            break
    assert shown_failed == pick(failed, JobList.columns)
    listed = cli.json("job", "list", "--long")
    assert list(listed[0]) == list(JobList.columns + JobList.long_columns)
    assert failed_job["id"] in {j["id"] for j in listed}
    assert [j["id"] for j in listed] == sorted((j["id"] for j in listed), reverse=True)
    kinds = cli.json("job", "list", "--kind", "placement_sync", "-c", "kind")
    assert kinds and {j["kind"] for j in kinds} == {"placement_sync"}

    shown = cli.json("job", "show", str(failed_job["id"]))
    assert shown == {k: v for k, v in _job(api, failed_job["id"]).items() if k != "links"}
    assert shown["state"] == "failed" and shown["last_error"]
    assert isinstance(shown["payload"], dict)

    bad = cli.run("job", "list", "--state", "sleeping", check=False)
    assert bad.returncode == 1 and "(HTTP 400" in bad.stderr
    missing = cli.run("job", "show", "987654321", check=False)
    assert missing.returncode == 1
    assert "(HTTP 404, exosuit.job.not_found)" in missing.stderr


def test_job_retry_makes_a_failed_job_pending(cli, api, failed_job):
    retried = cli.json("job", "retry", str(failed_job["id"]))

    assert retried["id"] == failed_job["id"]
    assert retried["state"] == "pending"
    assert retried["attempts"] == 0
    _wait_failed(api, failed_job["id"])  # it ran again, and failed again


def test_job_retry_of_a_job_that_has_not_failed_is_refused(cli, api, failed_job):
    # A job that succeeded (a periodic one): a pending one may fail before the retry.
    done = _wait_for(
        lambda: next(
            (j for j in api.list("/v2/jobs", "jobs", "2.5") if j["state"] == "succeeded"), None
        ),
        "a succeeded job",
    )

    result = cli.run("job", "retry", str(done["id"]), check=False)

    assert result.returncode == 1
    assert result.stdout == ""
    assert "only a failed job can be retried" in result.stderr
    assert "(HTTP 409, exosuit.job.not_failed)" in result.stderr


def test_job_retry_wait_shows_plain_progress_and_fails_with_the_job(cli, api, failed_job):
    _wait_failed(api, failed_job["id"])

    result = cli.run("job", "retry", str(failed_job["id"]), "--wait", "-f", "json", check=False)

    assert result.returncode == 1, result.stderr
    job = json.loads(result.stdout)
    assert job["id"] == failed_job["id"] and job["state"] == "failed"
    lines = result.stderr.splitlines()
    assert lines[0] == f"job {job['id']} placement_sync: pending (attempt 0)"
    assert "\r" not in result.stderr and "\x1b[" not in result.stderr  # not a terminal
    assert lines[-1].startswith(f"error: job {job['id']} failed again: ")


def test_job_retry_wait_on_a_terminal_redraws_one_line(cli, api, failed_job):
    _wait_failed(api, failed_job["id"])

    code, out = run_on_terminal(
        [cli.script, "--os-endpoint", cli.url, "job", "retry", str(failed_job["id"]), "--wait"],
        120,
        cli_env(),
    )

    assert code == 1, out
    spinner = rf"\r\x1b\[K[|/\\-] job {failed_job['id']} placement_sync: \x1b\[33mpending\x1b\[0m"
    assert re.search(spinner, out), out
    assert "| state " in out and "failed" in out  # the job, as a table


def test_ctrl_c_while_waiting_stops_the_waiting_not_the_job(cli, api, failed_job, placement):
    _wait_failed(api, failed_job["id"])
    with placement.holding():
        process = subprocess.Popen(
            [cli.script, "--os-endpoint", cli.url, "job", "retry", str(failed_job["id"]),
             "--wait", "-f", "json"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=cli_env(),
        )  # fmt: skip
        progress: list[str] = []
        reader = threading.Thread(target=drain, args=(process.stderr, progress), daemon=True)
        reader.start()
        # Waiting: the job is pending, or running while its Placement holds the answer.
        _wait_for(lambda: progress, "progress line")

        process.send_signal(2)  # SIGINT, as Ctrl-C
        code = process.wait(timeout=DEADLINE)
        reader.join(timeout=10)

        assert code == 130
        with process.stdout as stdout:
            assert json.loads(stdout.read())["id"] == failed_job["id"]
        assert progress[-1] == (
            f"stopped waiting: job {failed_job['id']} goes on on the server "
            f"(`exosuit job show {failed_job['id']}`)\n"
        )
        assert "Traceback" not in "".join(progress)
        # Nothing was undone or left half-done: the retried job is still to finish.
        assert _job(api, failed_job["id"])["state"] in ("pending", "running")
    # And it goes on: once Placement answers (a refusal), it fails as any attempt would.
    assert _wait_failed(api, failed_job["id"])["last_error"]


def test_retry_wait_timeout(cli, api, failed_job, placement):
    _wait_failed(api, failed_job["id"])
    with placement.holding():
        result = cli.run(
            "job", "retry", str(failed_job["id"]), "--wait", "--timeout", "2", check=False
        )
        assert result.returncode == 1
        assert result.stderr.splitlines()[-1].startswith(
            f"error: gave up waiting after 2 s: job {failed_job['id']} is still "
        )
    _wait_failed(api, failed_job["id"])


def test_commands_refuse_a_server_below_2_5(cli):
    result = cli.run("--os-accelerator-api-version", "2.4", "host", "show", HOST, check=False)
    assert result.returncode == 1
    assert result.stderr == (
        "error: `exosuit host show` needs API 2.5; --os-accelerator-api-version asks for 2.4\n"
    )
