"""A fuzzing campaign over the API's own OpenAPI document (GET /openapi.json).

schemathesis turns the document into Hypothesis strategies: for every operation, cases
that follow the document (positive) and cases that break it (negative: wrong types,
missing fields, out-of-range numbers, invalid enum values, strings past their limits).
Every answer is checked: no 5xx, a status the document lists for the operation, the
content type and body shape it says, and no 2xx for a JSON body the document refuses.

To reach past "not found", the campaign first seeds a world through the API (a host
with two FPGAs through the agent API, an attribute, a profile, ARQs (one bound), an
image with data, a program), and half the cases of an operation get that world's
identifiers in their path, and in the body fields that name something (a profile, a
deployable, an image, a host, a provider). Used by tests/api/test_fuzz.py (in-process,
bounded) and bench/fuzz.py (over HTTP, 10,000 requests by default).
"""

from __future__ import annotations

import collections
import dataclasses
import json
import re
import time
import uuid
from collections.abc import Callable, Iterable
from importlib import resources
from typing import Any

import hypothesis
import jsonschema
import schemathesis
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi import checks as openapi_checks

from exosuit import schemas
from tests.helpers.inventory import fpga, snapshot

__all__ = ["Campaign", "Known", "Report", "seed"]

IMAGE_DATA = b"fuzz image data \x00\x01\x02"
LATEST = {"OpenStack-API-Version": "accelerator latest"}
CHECKS = [
    not_a_server_error,
    openapi_checks.status_code_conformance,
    openapi_checks.content_type_conformance,
    openapi_checks.response_schema_conformance,
]
# Mutating operations run after the reads, deletions last: the world stays whole longest.
_ORDER = {"GET": 0, "POST": 1, "PATCH": 1, "PUT": 2, "DELETE": 3}

# send(method, path, body, headers) -> (status, JSON body or None)
Send = Callable[[str, str, Any, dict[str, str]], tuple[int, Any]]


@dataclasses.dataclass
class Known:
    """Identifiers of the seeded world, by path parameter and by body field."""

    paths: dict[tuple[str, str], list[Any]]  # (path prefix, parameter) -> values
    fields: dict[str, list[Any]]  # body field -> values
    wholes: dict[str, list[Any]]  # body field -> values replacing what it holds, whole
    arqs: list[str]
    images: list[str]

    def for_path(self, template: str, name: str) -> list[Any]:
        best: list[Any] = []
        length = -1
        for (prefix, param), values in self.paths.items():
            if param == name and template.startswith(prefix) and len(prefix) > length:
                best, length = values, len(prefix)
        return best


def _ok(result: tuple[int, Any], *expected: int) -> Any:
    status, body = result
    assert status in expected, (status, body)
    return body


def seed(send: Send, tag: str = "") -> Known:
    """Seed the world the campaign reaches into; return its identifiers. ``tag`` ends the
    names it creates (a host, a profile, a project): a second campaign against the same
    server seeds a world of its own."""
    host, profile_name, project = f"fuzz-host{tag}", f"fuzz-profile{tag}", f"fuzz-project{tag}"
    # A second host for the inventory cases to report over: the first one's devices stay.
    spare = f"fuzz-spare{tag}"
    _ok(
        send(
            "PUT", f"/agent/v1/hosts/{spare}/inventory", snapshot(spare, [fpga("0000:0c:00.0")]), {}
        ),
        200,
    )
    report = snapshot(host, [fpga("0000:0c:00.0", handles=4), fpga("0000:0d:00.0", handles=4)])
    # The new deployables' ids: those of the attributes their report adds.
    seen = {a["deployable_id"] for a in _attributes(send)}
    _ok(send("PUT", f"/agent/v1/hosts/{host}/inventory", report, {}), 200)
    attributes = [a for a in _attributes(send) if a["deployable_id"] not in seen]
    deployable_ids = sorted({a["deployable_id"] for a in attributes})
    query = f"?hostname={host}"
    devices = _ok(send("GET", "/v2/devices" + query, None, LATEST), 200)["devices"]
    device_ids = {d["uuid"] for d in devices}
    handles = _ok(send("GET", "/v2/attach_handles" + query, None, LATEST), 200)["attach_handles"]
    ours = {h["deployable_uuid"] for h in handles if h["device_uuid"] in device_ids}
    listed = _ok(send("GET", "/v2/deployables?limit=1000", None, LATEST), 200)["deployables"]
    deployables = sorted((d for d in listed if d["uuid"] in ours), key=lambda d: d["name"])
    # Both FPGAs load the simulated format (which one is which id, the API does not say).
    created = [
        _ok(send("POST", "/v2/attributes", body, {}), 201)
        for body in (
            {"deployable_id": i, "key": "program_formats", "value": "simulated"}
            for i in deployable_ids
        )
    ]
    group = {"resources:FPGA": "1", "trait:CUSTOM_FAKE_DEVICE": "required"}
    body = [{"name": profile_name, "groups": [group]}]
    profile = _ok(send("POST", "/v2/device_profiles", body, {}), 201)
    arqs = [
        _ok(
            send("POST", "/v2/accelerator_requests", {"device_profile_name": profile_name}, {}), 201
        )["arqs"][0]["uuid"]
        for _ in range(3)
    ]
    bind = [
        {"op": "add", "path": "/hostname", "value": host},
        {"op": "add", "path": "/device_rp_uuid", "value": deployables[0]["rp_uuid"]},
        {"op": "add", "path": "/instance_uuid", "value": str(uuid.uuid4())},
    ]
    # 409 when the server offers no new device until an operator marks it ready
    # ([inventory] new_device_activation, doc/devices.md): the world has no bound ARQ.
    _ok(send("PATCH", "/v2/accelerator_requests", {arqs[0]: bind}, {}), 202, 409)
    body = {"name": "fuzz-image", "format": "simulated", "visibility": "shared"}
    image = _ok(send("POST", "/v2/images", body, LATEST), 201)["uuid"]
    _ok(send("PUT", f"/v2/images/{image}/file", IMAGE_DATA, LATEST), 204)
    queued = _ok(send("POST", "/v2/images", {"name": "queued", "format": "x"}, LATEST), 201)
    _ok(send("PUT", f"/v2/images/{image}/members/{project}", None, LATEST), 200)
    program_body = [{"path": "/program", "op": "replace", "value": [{"image_uuid": image}]}]
    # The second FPGA: the first one's handle is held by the bound ARQ.
    target = deployables[-1]["uuid"]
    program = _ok(send("PATCH", f"/v2/deployables/{target}/program", program_body, LATEST), 202)
    jobs = _ok(send("GET", "/v2/jobs", None, LATEST), 200)["jobs"]
    images = [image, queued["uuid"]]
    static = sorted(
        f.name for f in resources.files("exosuit.api.dashboard").joinpath("static").iterdir()
    )
    return Known(
        paths={
            ("/v2/device_profiles", "ident"): [profile["uuid"], profile_name],
            ("/v2/accelerator_requests", "uuid"): arqs,
            ("/v2/deployables", "uuid"): [d["uuid"] for d in deployables],
            # …/program/{again}: the same UUID twice (the same pick of the same list).
            ("/v2/deployables", "again"): [d["uuid"] for d in deployables],
            ("/v2/devices", "uuid"): [d["uuid"] for d in devices],
            ("/v2/attributes", "uuid"): [a["uuid"] for a in created + attributes],
            ("/v2/hosts", "hostname"): [host],
            ("/v2/attach_handles", "uuid"): [h["uuid"] for h in handles],
            ("/v2/jobs", "id"): [j["id"] for j in jobs],
            ("/v2/images", "uuid"): images,
            ("/v2/images", "project_id"): [project, "admin"],
            ("/agent/v1/hosts", "hostname"): [host],
            ("/agent/v1/hosts/{hostname}/inventory", "hostname"): [spare],
            ("/agent/v1/hosts", "uuid"): [program["program"]["uuid"], arqs[0]],
            ("/agent/v1/images", "image_uuid"): images,
            ("/dashboard/static", "name"): static,
        },
        fields={
            "device_profile_name": [profile_name],
            "deployable_id": deployable_ids,
            "image_uuid": images,
            "hostname": [host],
            "device_rp_uuid": [d["rp_uuid"] for d in deployables],
            "instance_uuid": [str(uuid.uuid4())],
            "project_id": [project],
        },
        # Profile groups as the handler wants them (generated keys rarely name a class).
        wholes={"groups": [[group], [{"resources:FPGA": "1"}, {"accel:function_id": "f"}]]},
        arqs=arqs,
        images=images,
    )


def _attributes(send: Send) -> list[dict[str, Any]]:
    """Every attribute (the first page is enough for a campaign's server)."""
    return _ok(send("GET", "/v2/attributes?limit=1000", None, LATEST), 200)["attributes"]


@dataclasses.dataclass
class Failure:
    operation: str
    check: str
    message: str
    reproduce: str

    def __str__(self) -> str:
        return f"{self.operation}: {self.check}: {self.message}\n    {self.reproduce}"


@dataclasses.dataclass
class Report:
    """What a campaign sent and got back."""

    statuses: collections.Counter[tuple[str, int]] = dataclasses.field(
        default_factory=collections.Counter
    )
    failures: list[Failure] = dataclasses.field(default_factory=list)
    seconds: float = 0.0

    @property
    def requests(self) -> int:
        return sum(self.statuses.values())

    def by_status(self) -> dict[int, int]:
        counts: collections.Counter[int] = collections.Counter()
        for (_, status), n in self.statuses.items():
            counts[status] += n
        return dict(sorted(counts.items()))

    def server_errors(self) -> list[Failure]:
        return [f for f in self.failures if f.check == "not_a_server_error"]


class _OutOfTime(Exception):
    """An operation used up its time budget."""


class Campaign:
    """Fuzz every operation of ``schema`` (a loaded schemathesis schema).

    ``examples``: cases per operation and mode (positive, negative); ``budget``: seconds
    per operation and mode, after which it moves on; ``seed``: Hypothesis' seed (the
    same seed, the same cases); ``call``: sends a case (``case.call`` by default: the
    schema's WSGI app, or its URL).
    """

    def __init__(
        self,
        schema: Any,
        known: Known | None,
        *,
        examples: int,
        budget: float,
        seed: int = 0,
        call: Callable[[Any], Any] | None = None,
        max_requests: int | None = None,
        keep_failures: int = 200,
    ) -> None:
        self.schema = schema
        self.known = known
        self.examples = examples
        self.budget = budget
        self.seed = seed
        self.call = call or (lambda case: case.call())
        self.max_requests = max_requests
        self.keep_failures = keep_failures
        self.report = Report()
        self._bodies = _BodyValidators(schema.raw_schema)

    def operations(self) -> list[Any]:
        found = []
        for result in self.schema.get_all_operations():
            found.append(result.ok())
        return sorted(found, key=lambda op: (_ORDER.get(op.method.upper(), 1), _late(op.path)))

    def run(self, operations: Iterable[Any] | None = None) -> Report:
        start = time.monotonic()
        for operation in list(operations or self.operations()):
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
                if self._full():
                    break
                self._fuzz(operation, mode)
        self.report.seconds = time.monotonic() - start
        return self.report

    def _full(self) -> bool:
        return self.max_requests is not None and self.report.requests >= self.max_requests

    def _fuzz(self, operation: Any, mode: GenerationMode) -> None:
        deadline = time.monotonic() + self.budget

        @hypothesis.seed(self.seed)
        @hypothesis.settings(
            max_examples=self.examples,
            deadline=None,
            database=None,
            phases=[hypothesis.Phase.generate],
            suppress_health_check=list(hypothesis.HealthCheck),
            # Hypothesis prints each falsifying example; there is none: failures are collected.
            verbosity=hypothesis.Verbosity.quiet,
        )
        @hypothesis.given(
            case=operation.as_strategy(generation_mode=mode),
            use_known=st.booleans(),
            pick=st.integers(min_value=0, max_value=2**16),
        )
        def fuzz(case: Any, use_known: bool, pick: int) -> None:
            if time.monotonic() > deadline or self._full():
                raise _OutOfTime
            if use_known and self.known is not None:
                self._use_known(case, pick)
            self._send(case)

        try:
            fuzz()
        except _OutOfTime:
            pass
        except hypothesis.errors.Unsatisfiable:
            pass  # no case breaks the document here (a path segment only excludes "/")

    def _use_known(self, case: Any, pick: int) -> None:
        assert self.known is not None
        for name in list(case.path_parameters or {}):
            values = self.known.for_path(case.operation.path, name)
            if values:
                case.path_parameters[name] = values[pick % len(values)]
        version = (case.headers or {}).get("OpenStack-API-Version", "")
        if case.operation.path.endswith("/program") and not version.endswith(("2.6", "latest")):
            return  # below 2.6 a program that starts makes the request wait for its end
        if case.body is not None and not isinstance(case.body, bytes):
            case.body = _hint(case.body, self.known, pick)
        if case.operation.path.endswith("/inventory") and isinstance(case.body, dict):
            _rehash(case.body, case.path_parameters.get("hostname"))

    def _send(self, case: Any) -> None:
        label = case.operation.label
        try:
            response = self.call(case)
        except Exception as error:  # the connection broke: as bad as a 500
            self._fail(label, "connection", repr(error), case)
            return
        self.report.statuses[(label, response.status_code)] += 1
        try:
            case.validate_response(response, checks=CHECKS)
        except BaseExceptionGroup as group:  # schemathesis' FailureGroup: one per check
            for error in group.exceptions:
                check = "not_a_server_error" if response.status_code >= 500 else _check(error)
                self._fail(label, check, _first_line(error), case)
        except AssertionError as error:  # a single failed check
            check = "not_a_server_error" if response.status_code >= 500 else _check(error)
            self._fail(label, check, _first_line(error), case)
        if 200 <= response.status_code < 300 and not self._bodies.valid(case):
            self._fail(label, "accepted_invalid_body", f"{response.status_code}", case)

    def _fail(self, label: str, check: str, message: str, case: Any) -> None:
        if len(self.report.failures) < self.keep_failures:
            try:
                reproduce = case.as_curl_command()
            except Exception as error:  # a body curl cannot carry
                reproduce = f"(no curl: {error!r}) {case.method} {case.formatted_path}"
            self.report.failures.append(Failure(label, check, message, reproduce))


def _late(path: str) -> int:
    # Inventory cases report over the spare host (and may add hosts): after the other writes.
    return 1 if path.endswith("/inventory") else 0


def _check(error: BaseException) -> str:
    return type(error).__name__


def _first_line(error: Exception) -> str:
    text = str(error).strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return " / ".join(lines[:4])[:500]


_UUID = re.compile(r"^[0-9a-fA-F-]{36}$")


def _hint(body: Any, known: Known, pick: int) -> Any:
    """``body`` with the fields that name something replaced by seeded names (keys that
    are UUIDs too: Nova's bind map is keyed by ARQ uuid)."""
    if isinstance(body, list):
        return [_hint(item, known, pick + i) for i, item in enumerate(body)]
    if not isinstance(body, dict):
        return body
    result = {}
    for i, (key, value) in enumerate(body.items()):
        if isinstance(key, str) and _UUID.match(key) and known.arqs:
            key = known.arqs[(pick + i) % len(known.arqs)]
        field = key
        if key == "value" and isinstance(body.get("path"), str):
            field = body["path"].lstrip("/")  # a JSON-patch operation: its path names it
        values = known.fields.get(field) if isinstance(field, str) else None
        wholes = known.wholes.get(key) if isinstance(key, str) else None
        if wholes:
            result[key] = wholes[(pick + i) % len(wholes)]
        elif values and not isinstance(value, (dict, list)):
            result[key] = values[(pick + i) % len(values)]
        else:
            result[key] = _hint(value, known, pick + i)
    return result


def _rehash(body: dict[str, Any], hostname: str | None) -> None:
    """A snapshot whose hash matches its content (else it is refused at once)."""
    devices = body.get("devices")
    errors = body.get("driver_errors", [])
    drivers = body.get("drivers")
    if isinstance(devices, list) and isinstance(errors, list):
        try:
            body["hash"] = schemas.snapshot_hash(devices, errors, drivers)
        except (TypeError, ValueError):
            return
    if "hostname" in body and hostname is not None:
        body["hostname"] = hostname


class _BodyValidators:
    """Whether a case's JSON body is one the document accepts."""

    def __init__(self, document: dict[str, Any]) -> None:
        self.document = document
        self.validators: dict[str, Any] = {}

    def valid(self, case: Any) -> bool:
        body_schema = self._schema(case.operation)
        if body_schema is None or isinstance(case.body, bytes):
            return True
        key = case.operation.label
        validator = self.validators.get(key)
        if validator is None:
            root = {**body_schema, "components": self.document.get("components", {})}
            validator = self.validators[key] = jsonschema.Draft202012Validator(root)
        try:
            body = json.loads(json.dumps(case.body))  # as the server reads it
        except (TypeError, ValueError):
            return True
        return validator.is_valid(body)

    def _schema(self, operation: Any) -> dict[str, Any] | None:
        item = self.document["paths"][operation.path][operation.method.lower()]
        content = item.get("requestBody", {}).get("content", {})
        media = content.get("application/json")
        return None if media is None else media["schema"]


def load(app: Any = None, url: str | None = None) -> Any:
    """The API's document, from a WSGI app in this process or from a server's URL."""
    if app is not None:
        return schemathesis.openapi.from_wsgi("/openapi.json", app)
    assert url is not None
    return schemathesis.openapi.from_url(url.rstrip("/") + "/openapi.json")
