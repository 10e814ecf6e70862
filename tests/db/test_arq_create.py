"""POST /v2/accelerator_requests answers without reading its ARQs back: what it answers
is what a read shows, on SQLite, PostgreSQL and MariaDB."""

from __future__ import annotations

GROUPS = [{"resources:FPGA": "2"}, {"resources:PGPU": "1", "trait:CUSTOM_X": "required"}]


def test_created_arqs_are_what_a_read_shows(api):
    assert api.post("/v2/device_profiles", [{"name": "two-groups", "groups": GROUPS}]).status_code
    created = api.post("/v2/accelerator_requests", {"device_profile_name": "two-groups"})
    assert created.status_code == 201, created.text
    arqs = created.json["arqs"]
    assert [a["device_profile_group_id"] for a in arqs] == [0, 0, 1]
    for arq in arqs:
        read = api.get(f"/v2/accelerator_requests/{arq['uuid']}")
        assert read.status_code == 200
        assert read.json == arq
    listed = {a["uuid"]: a for a in api.get("/v2/accelerator_requests").json["arqs"]}
    assert [listed[a["uuid"]] for a in arqs] == arqs


def test_a_profile_found_by_another_spelling_shows_its_stored_name(api, database):
    """MariaDB compares names case-insensitively: the ARQ shows the name as stored."""
    assert api.post("/v2/device_profiles", [{"name": "Mixed", "groups": GROUPS[:1]}]).status_code
    created = api.post("/v2/accelerator_requests", {"device_profile_name": "mixed"})
    if database.dialect != "mysql":
        assert created.status_code == 404, created.text
        return
    assert created.status_code == 201, created.text
    for arq in created.json["arqs"]:
        assert arq["device_profile_name"] == "Mixed"
        assert api.get(f"/v2/accelerator_requests/{arq['uuid']}").json == arq
