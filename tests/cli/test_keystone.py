"""``exosuit`` with Keystone, as ``openstack`` is used: OS_* variables, ``clouds.yaml``
with ``--os-cloud``, ``--os-*`` options; the endpoint from the catalog.

A real Keystone runs on loopback (tests/helpers/keystone_fixture.py); Exosuit's
API runs with ``[api] auth_strategy = keystone`` and is registered in the catalog as
service type ``accelerator``.
"""

from __future__ import annotations

import uuid

import pytest

from exosuit.api.deploy import loadapp
from exosuit.conf import make_conf
from exosuit.db.api import Database
from tests.cli.conftest import CLI, cli_env
from tests.conftest import new_database_url
from tests.helpers.keystone_fixture import REGION, authtoken_section
from tests.helpers.live import serve_wsgi

pytestmark = pytest.mark.slow


def _conf(path, keystone, db_url: str):
    path.write_text(f"""\
[api]
auth_strategy = keystone
[database]
connection = {db_url}
{authtoken_section(keystone, cache_time=None, service_tokens=False)}""")
    return make_conf([str(path)])


@pytest.fixture(scope="module")
def api_url(keystone, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("exosuit-cli-keystone")
    db = Database(new_database_url("sqlite", None, tmp_path_factory))
    conf = _conf(workdir / "exosuit.conf", keystone, db.engine.url.render_as_string())
    with serve_wsgi(loadapp(conf, db)) as url:
        keystone.register_service("accelerator", "exosuit", f"{url}/v2")
        yield url
    db.dispose()


def _os_env(keystone, user: str, **changes: str) -> dict[str, str]:
    """The OS_* variables of an openrc file for ``user``, with ``changes``."""
    account = keystone.users[user]
    variables = {
        "OS_AUTH_URL": keystone.auth_url,
        "OS_USERNAME": user,
        "OS_PASSWORD": account.password,
        "OS_PROJECT_NAME": account.project,
        "OS_USER_DOMAIN_ID": "default",
        "OS_PROJECT_DOMAIN_ID": "default",
        "OS_REGION_NAME": REGION,
        "OS_IDENTITY_API_VERSION": "3",
    }
    return cli_env(**{**variables, **changes})


@pytest.fixture(scope="module")
def cli(api_url) -> CLI:
    return CLI(api_url)


def test_os_variables_and_the_catalog(cli, keystone, api_url):
    name = f"ks-{uuid.uuid4().hex[:8]}"
    admin = _os_env(keystone, "p1-admin")

    created = cli.json(
        "profile", "create", name, "--group", "resources:FPGA=1", endpoint=False, env=admin
    )
    listed = cli.json("profile", "list", "--name", name, endpoint=False, env=admin)

    assert [p["uuid"] for p in listed] == [created["uuid"]]
    debug = cli.run("--debug", "profile", "list", endpoint=False, env=admin)
    assert f"GET {api_url}/v2/device_profiles" in debug.stderr  # the catalog's endpoint
    assert '-H "X-Auth-Token: {SHA256}' in debug.stderr  # a token, its hash shown
    assert keystone.users["p1-admin"].password not in debug.stderr


def test_clouds_yaml_and_os_cloud(cli, keystone, tmp_path):
    account = keystone.users["p1-manager"]
    clouds = tmp_path / "clouds.yaml"
    clouds.write_text(f"""\
clouds:
  exo:
    auth:
      auth_url: {keystone.auth_url}
      username: p1-manager
      password: {account.password}
      project_name: p1
      user_domain_id: default
      project_domain_id: default
    region_name: {REGION}
    identity_api_version: 3
""")
    env = cli_env(OS_CLIENT_CONFIG_FILE=str(clouds))

    devices = cli.json("--os-cloud", "exo", "device", "list", endpoint=False, env=env)
    assert devices == []  # a manager may read; no host has reported here
    from_variable = cli.json("device", "list", endpoint=False, env={**env, "OS_CLOUD": "exo"})
    assert from_variable == []


def test_os_options_on_the_command_line(cli, keystone):
    account = keystone.users["p1-manager"]
    options = [
        "--os-auth-url", keystone.auth_url,
        "--os-username", "p1-manager",
        "--os-password", account.password,
        "--os-project-name", "p1",
        "--os-user-domain-id", "default",
        "--os-project-domain-id", "default",
        "--os-region-name", REGION,
    ]  # fmt: skip
    assert cli.json(*options, "deployable", "list", endpoint=False, env=cli_env()) == []


def test_keystone_refusals_are_one_line(cli, keystone):
    wrong = _os_env(keystone, "p1-admin", OS_PASSWORD="not-the-password")
    result = cli.run("device", "list", endpoint=False, env=wrong, check=False)
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith("error: Keystone: The request you have made requires ")
    assert "(HTTP 401)" in result.stderr

    reader = _os_env(keystone, "p1-reader")
    forbidden = cli.run("device", "list", endpoint=False, env=reader, check=False)
    assert forbidden.returncode == 1
    assert forbidden.stderr.count("\n") == 1
    assert "(HTTP 403, exosuit.policy.forbidden)" in forbidden.stderr

    no_catalog = cli.run(
        "device", "list", endpoint=False, env=_os_env(keystone, "p1-admin", OS_REGION_NAME="X"),
        check=False,
    )  # fmt: skip
    assert no_catalog.returncode == 1
    assert "no accelerator endpoint in the Keystone catalog" in no_catalog.stderr


def test_permission_list_is_the_callers_own(cli, keystone):
    """A reader of p1 reads its project's requests and claims and changes nothing of the
    fleet; an admin passes the admin rules (API 2.11, doc/dashboard.md "Roles")."""
    reader = {
        row["rule"]: row["allowed"]
        for row in cli.json(
            "permission", "list", endpoint=False, env=_os_env(keystone, "p1-reader")
        )
    }
    assert reader["cyborg:arq:get_all"] is True and reader["exosuit:claim:get_all"] is True
    assert reader["exosuit:claim:create"] is False
    assert reader["cyborg:device:disable"] is False and reader["exosuit:host:drain"] is False
    admin = cli.json(
        "permission", "list", "--rule", ":drain", endpoint=False, env=_os_env(keystone, "p1-admin")
    )
    assert admin == [
        {"rule": "exosuit:device:drain", "allowed": True},
        {"rule": "exosuit:host:drain", "allowed": True},
    ]
