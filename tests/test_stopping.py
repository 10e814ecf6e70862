"""exosuit/stopping.py in this process: a stop signal during a start raises
StoppedWhileStarting (exit status 0), and one that comes inside ``signals_held()`` waits
for the block's end."""

from __future__ import annotations

import os
import signal

import pytest

from exosuit.stopping import StoppedWhileStarting, signals_held, stop_while_starting


def test_a_signal_while_starting_raises_a_clean_exit():
    with pytest.raises(StoppedWhileStarting) as stopped:
        with stop_while_starting():
            os.kill(os.getpid(), signal.SIGTERM)  # the handler runs before the next line
            raise AssertionError("the signal should have stopped the start")
    assert stopped.value.code == 0 and stopped.value.signum == signal.SIGTERM


def test_a_signal_inside_signals_held_waits_for_the_end_of_the_block():
    before = signal.getsignal(signal.SIGTERM)
    done = []
    with pytest.raises(StoppedWhileStarting):
        with stop_while_starting():
            with signals_held():
                os.kill(os.getpid(), signal.SIGTERM)
                for _ in range(1000):  # bytecode enough for the handler to have run
                    pass
                done.append("the block finished")
            raise AssertionError("the held signal should stop the start at the block's end")
    assert done == ["the block finished"]
    assert signal.getsignal(signal.SIGTERM) is before  # the handlers from before are back


def test_without_a_signal_signals_held_changes_nothing():
    before = signal.getsignal(signal.SIGTERM)
    with signals_held():
        pass
    assert signal.getsignal(signal.SIGTERM) is before
