"""The CLI's errors as the API gave them: whole, on one line (exosuit/cli/client.py)."""

from __future__ import annotations

import json

import requests

from exosuit.cli.client import _error_from


def _response(status: int, body: str, content_type: str = "application/json") -> requests.Response:
    response = requests.Response()
    response.status_code = status
    response.reason = "Conflict" if status == 409 else "Bad Gateway"
    response.headers["Content-Type"] = content_type
    response._content = body.encode()
    return response


def test_a_long_api_message_is_kept_whole_on_one_line():
    held = ", ".join(f"ARQ {n:08x}-0000-4000-8000-000000000000 (instance i-{n})" for n in range(6))
    message = f"The layout would remove slices that are held\n  (held: {held}). Release them first."
    body = json.dumps(
        {"error_message": json.dumps({"faultstring": message, "code": "exosuit.partition.held"})}
    )
    error = _error_from(_response(409, body))
    assert len(message) > 300
    assert error.message == " ".join(message.split())
    assert str(error).endswith("Release them first. (HTTP 409, exosuit.partition.held)")


def test_a_foreign_body_is_cut_and_says_how_much_is_left_out():
    error = _error_from(_response(502, "upstream " * 300, "text/plain"))
    assert error.message.startswith("Bad Gateway: upstream upstream")
    assert error.message.endswith("more characters)")
    assert len(error.message) < 1100
