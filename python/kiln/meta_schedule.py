# SPDX-License-Identifier: Apache-2.0
"""kiln.meta_schedule: a runner for TVM's tuner (MetaSchedule) that measures its candidates with
Kiln — locally in a worker process, or on a farm of RPC servers (docs/tuning.md).

A TVM user's tuning script changes the runner::

    from kiln.meta_schedule import KilnRunner
    database = ms.tune_tir(mod, target, work_dir, max_trials_global=64, runner=KilnRunner())

Kiln runs the artifacts TVM's builder exports (``.tar``/``.so``) on Kiln's devices, so a TVM
from PyPI, which has no OpenCL runtime, can tune OpenCL kernels on any OpenCL device Kiln's
plugin finds (PoCL included). This module imports tvm: ``import kiln`` never loads it.
"""

import atexit
import weakref

import numpy
from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.runner import PyRunner, PyRunnerFuture, RunnerResult

import kiln

from . import testing

__all__ = ["KilnRunner", "KilnRunnerFuture"]

# Runners alive now: their workers end before the interpreter does, because TVM's objects can
# keep a runner alive past the extension's teardown.
_runners: "weakref.WeakSet[KilnRunner]" = weakref.WeakSet()


@atexit.register
def _close_runners():
    for runner in list(_runners):
        runner.close()


@derived_object
class KilnRunnerFuture(PyRunnerFuture):
    """A finished measurement: `run_secs` (seconds per repeat) or `error_msg`."""

    def __init__(self, run_secs=None, error_msg=None):
        super().__init__()
        self.run_secs = run_secs
        self.error_msg = error_msg

    def done(self):
        return True

    def result(self):
        return RunnerResult(self.run_secs, self.error_msg)


def _random_inputs(args_info, rng):
    """Arrays of the candidate's argument types filled as TVM's runners fill them
    (``random_fill_for_measure``: values in [1, 10), so int8/uint8 inputs are not all zero).
    ValueError for an argument that is not a tensor or a dtype numpy cannot hold."""
    args = []
    for info in args_info:
        kind, dtype, shape = info.as_json()
        if kind != "TENSOR":
            raise ValueError(f"cannot make a random input for argument {info} (not a tensor)")
        try:
            dtype = numpy.dtype(str(dtype))
        except TypeError:
            message = f"cannot make a random input of dtype {dtype} (numpy has no such type)"
            raise ValueError(message) from None
        shape = tuple(int(extent) for extent in shape)
        if dtype.kind == "f":
            args.append(rng.uniform(1.0, 10.0, shape).astype(dtype))
        elif dtype.kind == "b":
            args.append(rng.integers(0, 2, shape).astype(dtype))
        else:
            args.append(rng.integers(1, 10, shape).astype(dtype))
    return args


def _device_problem(device_type):
    """None when this process has device 0 of `device_type`, else a sentence saying why not."""
    try:
        device = kiln.device(device_type, 0)
    except ValueError as error:
        return str(error)
    if device in kiln.devices():
        return None
    for backend in kiln.backends():
        if backend["type_name"] == device.type_name:
            why = backend["why_none"] or "the plugin found none"
            return f"no {device.type_name} device here: {why}"
    served = ", ".join(sorted({backend["type_name"] for backend in kiln.backends()}))
    return (
        f"no Kiln plugin serves device type '{device_type}' here (the loaded plugins serve: "
        f"{served}; 'kiln plugins' lists them)"
    )


@derived_object
class KilnRunner(PyRunner):
    """MetaSchedule's runner on Kiln: each RunnerInput's artifact is loaded by Kiln, given fresh
    random inputs of its argument types and timed on device 0 of its ``device_type`` ("llvm"
    and "cpu": the CPU; "opencl", "cuda", "rocm": those plugins' devices) with
    `evaluator_config`; its RunnerResult holds the seconds of each repeat.

    Locally (no `rpc_config`) the candidates run one after another in one kiln.testing.Worker
    process, started on the first run and restarted after a candidate kills it: a candidate that
    crashes, or runs past `timeout_sec`, becomes a RunnerResult with `error_msg` and the tuning
    goes on. With `rpc_config`, the candidates of each batch are spread over the tracker's
    servers with kiln.testing.run_many, `jobs` at once; a candidate whose server is lost is
    retried on another, at most `max_retries` times.

    evaluator_config: kiln.testing.EvaluatorConfig or TVM's (number, repeat, min_repeat_ms,
        enable_cpu_cache_flush); None: number=3, repeat=1, min_repeat_ms=100, no flush (TVM's
        defaults).
    timeout_sec: seconds one local measurement may take (load to result); None: no limit. On a
        farm the session timeout of `rpc_config` bounds it instead.
    rpc_config: a kiln.testing.RPCConfig (or TVM's) naming the tracker and the servers' key;
        None: measure here. Checked at construction (ValueError for a missing setting).
    jobs: candidates in flight at once on a farm; None: the servers of the key at each batch.
    max_retries: further attempts of a candidate whose server was lost.
    seed: seeds the random inputs (None: fresh entropy).

    A device type that no plugin here serves is each candidate's `error_msg` (locally), or the
    server's error for it (on a farm), naming the device; so is a farm batch that could not
    start (a tracker that cannot be reached). Every `error_msg` starts with "KilnRunner: ".
    Raises ValueError for jobs < 1, max_retries < 0 or a missing tracker setting. ``close()``
    ends the local worker process; it also ends with this process.
    """

    def __init__(
        self,
        evaluator_config=None,
        timeout_sec=30.0,
        rpc_config=None,
        jobs=None,
        max_retries=2,
        seed=None,
    ):
        super().__init__()
        if jobs is not None and jobs < 1:
            raise ValueError(f"KilnRunner: jobs must be >= 1, got {jobs}")
        if max_retries < 0:
            raise ValueError(f"KilnRunner: max_retries must be >= 0, got {max_retries}")
        self.evaluator_config = testing.EvaluatorConfig._normalized(evaluator_config)
        self.timeout_sec = timeout_sec
        self.rpc_config = None if rpc_config is None else testing.RPCConfig._normalized(rpc_config)
        self.jobs = jobs
        self.max_retries = max_retries
        self._rng = numpy.random.default_rng(seed)
        self._worker = None  # started on the first local run
        self._device_problems = {}  # device type -> None or why it cannot run here
        # The "host:port" that measured each candidate of the last run() on a farm (None for a
        # failed one); empty locally.
        self.measured_on = []
        _runners.add(self)

    def run(self, runner_inputs):
        """One finished KilnRunnerFuture per input, in their order."""
        # (artifact path, device type, arguments) or an error message
        inputs: "list[tuple[str, str, list] | str]" = []
        for runner_input in runner_inputs:
            try:
                args = _random_inputs(runner_input.args_info, self._rng)
            except ValueError as error:
                inputs.append(f"KilnRunner: {error}")
                continue
            inputs.append(
                (str(runner_input.artifact_path), str(runner_input.device_type), args)
            )
        if self.rpc_config is None:
            results = [self._run_here(item) if isinstance(item, tuple) else item for item in inputs]
        else:
            results = self._run_on_farm(inputs)
        return [
            KilnRunnerFuture(error_msg=result)
            if isinstance(result, str)
            else KilnRunnerFuture(run_secs=[float(seconds) for seconds in result])
            for result in results
        ]

    def _run_here(self, item):
        """The seconds per repeat of one candidate, measured in the worker, or an error message."""
        path, device_type, args = item
        if device_type not in self._device_problems:
            self._device_problems[device_type] = _device_problem(device_type)
        problem = self._device_problems[device_type]
        if problem is not None:
            return f"KilnRunner: cannot measure on '{device_type}': {problem}"
        if self._worker is None:
            self._worker = testing.Worker(timeout=self.timeout_sec)
        try:
            _, profile = self._worker.run_file(path, device_type, args, self.evaluator_config)
        except kiln.WorkerError as error:  # the worker died with the candidate: say how
            happened = "was killed" if error.kind == "killed" else error.kind
            return f"KilnRunner: the candidate {happened} ({path}): {error}"
        except Exception as error:  # noqa: BLE001  (any failure is this candidate's result)
            return f"KilnRunner: {type(error).__name__}: {error} ({path})"
        return profile.results

    def _run_on_farm(self, inputs):
        """Every candidate of `inputs` through run_many; results (or messages) in their order."""
        tasks = [
            testing.RunTask(path, device_type, args, self.evaluator_config)
            for path, device_type, args in (item for item in inputs if isinstance(item, tuple))
        ]
        self.measured_on = []
        try:
            outcomes = iter(
                testing.run_many(
                    tasks, rpc_config=self.rpc_config, jobs=self.jobs, max_retries=self.max_retries
                )
            )
        except Exception as error:  # noqa: BLE001  (a tracker that is down may be back later)
            message = f"KilnRunner: the batch was not measured: {type(error).__name__}: {error}"
            self.measured_on = [None] * len(inputs)
            return [item if isinstance(item, str) else message for item in inputs]
        results = []
        for item in inputs:
            if not isinstance(item, tuple):
                results.append(item)
                self.measured_on.append(None)
                continue
            outcome = next(outcomes)
            self.measured_on.append(outcome.server)
            if outcome.ok and outcome.profile is not None:  # measured (ok: it has a profile)
                results.append(outcome.profile.results)
                continue
            message = f"KilnRunner: {type(outcome.error).__name__}: {outcome.error} ({item[0]})"
            if outcome.lost and not str(outcome.error).startswith("run_many:"):
                lost = " | ".join(outcome.lost)
                message += f"; after {len(outcome.lost)} lost server(s): {lost}"
            results.append(message)
        return results

    def close(self):
        """Ends the local worker process (a later run starts a new one)."""
        if self._worker is not None:
            self._worker.close()
            self._worker = None
