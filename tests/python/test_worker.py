# SPDX-License-Identifier: Apache-2.0
"""kiln.testing.Worker (issue 28 item 1): local_run in a worker process; a crashing, aborting
or hanging kernel is a kiln.WorkerError and the next run gets a fresh worker. The kernels are
tests/cli's libfaulty.so (copy, segfault, abort, hang)."""

import os
import signal

import numpy as np
import pytest

import kiln
import kiln.testing
from conftest import BUILD, example_kernel

FAULTY = BUILD / "tests" / "cli" / "libfaulty.so"


@pytest.fixture
def faulty():
    if not FAULTY.exists():
        pytest.fail(f"{FAULTY} is missing: build the 'faulty' target (ninja -C build)")
    return str(FAULTY)


def pair(n=16):
    return [np.arange(n, dtype="float32") - 4, np.full(n, -1, dtype="float32")]


QUICK = kiln.testing.EvaluatorConfig(number=2, repeat=3)


def test_runs_a_module_and_keeps_the_worker(faulty):
    relu = kiln.load_module(example_kernel("relu"))
    with kiln.testing.Worker() as worker:
        assert worker.pid == -1
        outputs, profile = worker.run(relu, "cpu", pair(), QUICK)
        np.testing.assert_array_equal(outputs[1], np.maximum(pair()[0], 0))
        assert len(profile.results) == 3
        pid = worker.pid
        outputs, _ = worker.run_file(faulty, "cpu", pair(), QUICK, function="copy")
        np.testing.assert_array_equal(outputs[1], pair()[0])
        assert worker.pid == pid and worker.starts == 1
    assert worker.pid == -1


@pytest.mark.parametrize("function,signal_number,name",
                         [("segfault", signal.SIGSEGV, "SIGSEGV"),
                          ("abort", signal.SIGABRT, "SIGABRT")])
def test_a_crash_is_a_worker_error_and_the_next_run_works(faulty, function, signal_number, name):
    with kiln.testing.Worker() as worker:
        worker.run_file(faulty, "cpu", pair(), QUICK, function="copy")
        with pytest.raises(kiln.WorkerError) as caught:
            worker.run_file(faulty, "cpu", pair(), QUICK, function=function)
        assert caught.value.kind == "crashed"
        assert caught.value.signal == signal_number
        message = str(caught.value)
        assert name in message and f"'{function}'" in message and "cpu:0" in message
        assert isinstance(caught.value, kiln.KilnError)
        outputs, _ = worker.run_file(faulty, "cpu", pair(), QUICK, function="copy")
        np.testing.assert_array_equal(outputs[1], pair()[0])
        assert worker.starts == 2


def test_a_hang_past_the_timeout_is_a_worker_error(faulty):
    # The deadline covers every run of the worker, the fresh worker's start and the copy after
    # the hang too: 1 s was too short for those on a loaded 2-CPU machine (CI's).
    with kiln.testing.Worker(timeout=8) as worker:
        with pytest.raises(kiln.WorkerError, match="did not finish within 8") as caught:
            worker.run_file(faulty, "cpu", pair(), QUICK, function="hang")
        assert caught.value.kind == "hung"
        worker.run_file(faulty, "cpu", pair(), QUICK, function="copy")


def test_an_ordinary_error_keeps_the_worker(faulty):
    with kiln.testing.Worker() as worker:
        worker.run_file(faulty, "cpu", pair(), QUICK, function="copy")
        pid = worker.pid
        with pytest.raises(kiln.KilnError) as caught:
            worker.run_file(faulty, "cpu", pair(), QUICK, function="no_such_kernel")
        assert not isinstance(caught.value, kiln.WorkerError)
        assert worker.pid == pid
        assert os.path.exists(f"/proc/{pid}")
