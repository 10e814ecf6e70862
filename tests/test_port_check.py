"""exosuit/port_check.py in-process: what `make run` asks before building anything."""

from __future__ import annotations

import socket

from exosuit import port_check


def test_a_free_port_passes_and_a_taken_one_is_named_with_the_way_out(capsys):
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        free = other.getsockname()[1]
    assert port_check.main(["--port", str(free), "--data-dir", "x"]) == 0
    with socket.socket() as other:
        other.bind(("127.0.0.1", free))
        other.listen()
        assert port_check.main(["--port", str(free), "--data-dir", "x"]) == 1
    message = capsys.readouterr().err
    assert f"cannot listen on 127.0.0.1:{free}: it is taken (another Exosuit?)" in message
    assert f'make run ARGS="--port {free + 1}"' in message


def test_an_address_that_is_not_this_hosts_says_the_kernels_reason():
    error = port_check.taken("192.0.2.1", 0)  # TEST-NET-1: never a local address
    assert error is not None
    assert "192.0.2.1:0" in port_check.hint("192.0.2.1", 0, error)
    assert "--port 6666" in port_check.hint("192.0.2.1", 0, error)
