# SPDX-License-Identifier: Apache-2.0
"""kiln.testing: run a module on a device, locally or on a remote board, and get its outputs and
its timing — TVM's ``tvm.testing.local_run`` / ``rpc_run`` on Kiln's core: the same steps,
messages and results, with Kiln's measurement loop.

A TVM user's test changes one import::

    # outputs, profile = tvm.testing.local_run(mod, "cpu", [a, b, c])
    outputs, profile = kiln.testing.local_run(mod, "cpu", [a, b, c])

`mod` is a kiln.Module or a TVM module (anything with ``export_library``): a TVM module is
exported by TVM's own exporters, as the reference does, and the file then runs in Kiln.

run_many measures many modules or exported artifacts over a farm of RPC servers, several at
once (docs/tuning.md); Worker measures in a worker process of its own (docs/isolation.md).
"""

from __future__ import annotations

import os
import shutil
from typing import Any, Callable, Iterable, NamedTuple, Optional, Sequence, Tuple, Union

from . import _kiln
from ._kiln import AbResult, BenchmarkResult, Module, RPCConfig

# What the runners take as the module to run: a kiln.Module or a TVM module (anything with
# export_library); run_many and ab_run also take an exported artifact's path.
ModuleLike = Any
# How a runner exports a module: an exporter's name ("tar", "so", "ndk") or f(mod, path).
ExportFunc = Union[str, Callable[[Any, str], Any]]
# The outputs and timing a runner returns: the arguments after the final call (tensors as numpy
# arrays, scalars unchanged) and the BenchmarkResult.
RunResult = Tuple[list, BenchmarkResult]

__all__ = [
    "EvaluatorConfig",
    "RPCConfig",
    "RunOutcome",
    "RunTask",
    "AbResult",
    "Worker",
    "ab_run",
    "local_run",
    "rpc_run",
    "run_many",
]


class EvaluatorConfig(NamedTuple):
    """How the runners time the entry function, as TVM's EvaluatorConfig: ``number`` calls per
    repeat,
    ``repeat`` measurements, batches grown to at least ``min_repeat_ms``, and, with
    ``enable_cpu_cache_flush``, every argument but the first flushed from the CPU caches before
    each repeat. Immutable."""

    number: int = 3
    repeat: int = 1
    min_repeat_ms: int = 100
    enable_cpu_cache_flush: bool = False

    @staticmethod
    def _normalized(config):
        """The defaults for None, else a field-by-field copy (no validation, as the reference)."""
        if config is None:
            return EvaluatorConfig()
        return EvaluatorConfig(
            number=config.number,
            repeat=config.repeat,
            min_repeat_ms=config.min_repeat_ms,
            enable_cpu_cache_flush=config.enable_cpu_cache_flush,
        )


def _tvm_exporter(export_func, output_format):
    """For a module that is not Kiln's (a TVM module): the reference's exporters by name, done
    by TVM itself. Callables pass through unchanged."""
    if not isinstance(export_func, str):
        return export_func, output_format

    def export_with(func):
        return lambda mod, path: mod.export_library(path, fcompile=func)

    if export_func == "tar":
        from tvm.support import tar

        return export_with(tar.tar), "tar"
    if export_func == "ndk":
        from tvm.support import ndk

        return export_with(ndk.create_shared), "so"
    if export_func == "so":
        return (lambda mod, path: mod.export_library(path)), "so"
    raise ValueError(f"Unsupported export_func: {export_func}")


def _prepare(mod, evaluator_config, export_func, output_format):
    if not isinstance(mod, Module):
        if not hasattr(mod, "export_library"):
            raise TypeError(
                f"mod must be a kiln.Module or a module with export_library (a TVM module), "
                f"got {type(mod).__name__}"
            )
        export_func, output_format = _tvm_exporter(export_func, output_format)
    if callable(export_func):  # the core calls exporters with the artifact's path only

        def export(path, export_func=export_func):
            return export_func(mod, path)

    else:
        export = export_func
    return EvaluatorConfig._normalized(evaluator_config), export, output_format


def _check_args(args):
    """The reference's _args_to_device check: arrays, tensors, int and float only."""
    import numpy

    for arg in args:
        if isinstance(arg, (numpy.ndarray, _kiln.Tensor, int, float)):
            continue
        if hasattr(arg, "__dlpack__"):  # PyTorch, TVM tensors
            continue
        raise ValueError(f"Unsupported input type: {type(arg)}")


def _to_numpy(outputs):
    import numpy

    # asarray, not from_dlpack: numpy has no DLPack for bfloat16 (Tensor.__array__ gives
    # ml_dtypes.bfloat16); host tensors are shared either way.
    return [numpy.asarray(o) if isinstance(o, _kiln.Tensor) else o for o in outputs]


_stale_directories_removed = False


def _remove_stale_directories():
    """Removes, once per process, the temporary directories that runners of processes now gone
    left behind (killed before they could clean up), as the kiln tool does at start."""
    global _stale_directories_removed
    if not _stale_directories_removed:
        _stale_directories_removed = True
        _kiln._remove_stale_temporary_directories()


def local_run(
    mod: ModuleLike,
    device_type: str,
    args: Sequence[Any],
    evaluator_config: Optional[Any] = None,
    export_func: ExportFunc = "tar",
    output_format: Optional[str] = None,
) -> RunResult:
    """Exports `mod` into a temporary directory, loads it back, copies `args` to
    ``device_type:0``, times the entry function with `evaluator_config`, calls it once more and
    returns ``(args, BenchmarkResult)`` with tensors as numpy arrays, as TVM's local_run does.

    export_func: "tar" (default), "ndk" (a shared library), or a callable ``f(mod, path)``
    (then `output_format`, the artifact's extension, is required). Inputs are never modified:
    they are copied to the device. Ctrl-C stops the measurement within a fraction of a second
    (KeyboardInterrupt; the temporary files are removed)."""
    config, export_func, output_format = _prepare(mod, evaluator_config, export_func, output_format)
    _check_args(args)
    _remove_stale_directories()
    outputs, profile = _kiln._local_run(
        mod, device_type, list(args), config, export_func, output_format
    )
    return _to_numpy(outputs), profile


def rpc_run(
    mod: ModuleLike,
    device_type: str,
    args: Sequence[Any],
    evaluator_config: Optional[Any] = None,
    rpc_config: Optional[Any] = None,
    export_func: ExportFunc = "tar",
    output_format: Optional[str] = None,
) -> RunResult:
    """local_run on a device of a remote server found through a tracker, as TVM's rpc_run: the
    artifact is uploaded as ``kiln_tmp_mod.<format>``, the measurement runs on the server, and
    the remote files are removed afterwards whatever happens. `rpc_config` is a kiln.RPCConfig
    (or TVM's); missing tracker settings fall back to KILN_TRACKER_* then TVM_TRACKER_* and are
    a ValueError before any network access. Ctrl-C ends it within a fraction of a second, also
    while it waits for a server (KeyboardInterrupt; the session is closed and the temporary
    files are removed)."""
    config, export_func, output_format = _prepare(mod, evaluator_config, export_func, output_format)
    _check_args(args)
    _remove_stale_directories()
    outputs, profile, _server = _kiln._rpc_run(
        mod, device_type, list(args), config, rpc_config, export_func, output_format
    )
    return _to_numpy(outputs), profile


class RunTask(NamedTuple):
    """One measurement for run_many, with rpc_run's arguments.

    mod: a kiln.Module, a TVM module (anything with ``export_library``), or the path (str or
        os.PathLike) of an already exported ``.tar`` or ``.so`` artifact, uploaded as it is (a
        tuner's build artifact; export_func and output_format are then unused).
    device_type, args, evaluator_config, export_func, output_format: as rpc_run."""

    mod: Any
    device_type: str
    args: Sequence[Any]
    evaluator_config: Optional[Any] = None
    export_func: ExportFunc = "tar"
    output_format: Optional[str] = None


class RunOutcome(NamedTuple):
    """What run_many got for one RunTask; `error` is None when it was measured.

    outputs: the arguments after the final call (numpy arrays and scalars), or None.
    profile: the BenchmarkResult, or None.
    server: ``"host:port"`` of the RPC server that measured it, or None.
    error: the exception that ended the task, or None. Either the task's own (a compile error,
        a crash in its session, a session timeout: never retried), or, once `max_retries`
        retries have all lost their server too, a kiln.RPCServerLostError (a kiln.RPCError)
        that says so and lists them, with the last attempt's error as its ``__cause__``.
    lost: the messages of the attempts whose server was lost (each retried on another server);
        a lost attempt's timing is never part of `profile`."""

    outputs: Optional[list]
    profile: Optional[BenchmarkResult]
    server: Optional[str]
    error: Optional[BaseException]
    lost: Tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """True when the task was measured."""
        return self.error is None


def _artifact_format(path):
    """'tar' or 'so' for an artifact path; ValueError for anything else."""
    extension = os.path.splitext(path)[1]
    if extension not in (".tar", ".so"):
        raise ValueError(f"run_many: artifact '{path}' must be a .tar or .so file")
    if not os.path.isfile(path):
        raise ValueError(f"run_many: artifact '{path}' does not exist")
    return extension[1:]


def _task_call(task):
    """The arguments of one _kiln._rpc_run call for `task`, checked (ValueError, TypeError)."""
    if isinstance(task.mod, (str, os.PathLike)):
        path = os.fspath(task.mod)
        output_format = _artifact_format(path)
        # The core asks the exporter for the file it uploads; an artifact is copied there as it is.
        export = lambda target, source=path: shutil.copyfile(source, target)  # noqa: E731
        config = EvaluatorConfig._normalized(task.evaluator_config)
        mod = path  # not a kiln.Module: the core takes the file from the exporter
    else:
        mod = task.mod
        config, export, output_format = _prepare(
            mod, task.evaluator_config, task.export_func, task.output_format
        )
    _check_args(task.args)
    return mod, task.device_type, list(task.args), config, export, output_format


def _outcome(outputs, profile, server, error, lost, gave_up, max_retries):
    """The RunOutcome of one task as the fan-out (_kiln._rpc_run_many) left it."""
    lost = tuple(lost)
    if error is None:
        return RunOutcome(_to_numpy(outputs), profile, server or None, None, lost)
    if gave_up:
        gave_up_error = _kiln.RPCServerLostError(
            f"run_many: the server was lost in each of {len(lost)} attempts "
            f"(max_retries={max_retries}): " + " | ".join(lost)
        )
        gave_up_error.__cause__ = error
        error = gave_up_error
    return RunOutcome(None, None, None, error, lost)


def run_many(
    tasks: Iterable[Union[RunTask, tuple]],
    rpc_config: Optional[Any] = None,
    jobs: Optional[int] = None,
    max_retries: int = 2,
) -> list[RunOutcome]:
    """Measures every RunTask of `tasks` with rpc_run on servers found through a tracker, up to
    `jobs` at once, each on one server, and returns one RunOutcome per task, in their order.

    A task whose server goes away during its attempt (kiln.RPCServerLostError: the connection is
    lost, or no server can be reached) is tried again, on whichever server the tracker hands out next, at most
    `max_retries` times; its outcome lists the lost attempts. Any other failure is the task's
    own: its outcome's `error`, never retried. Nothing is measured twice.

    tasks: RunTask values, or tuples of their fields.
    rpc_config: a kiln.RPCConfig (or TVM's); missing settings fall back to KILN_TRACKER_*, then
        TVM_TRACKER_*. ``request_wait_sec`` bounds each wait for a free server.
    jobs: tasks in flight at once; None: the number of servers of the key the tracker has now
        (at least 1). More jobs than servers queue at the tracker.
    max_retries: further attempts after a lost server, per task.

    Raises, before any measurement: ValueError for a missing tracker setting, a tracker that
    cannot be reached (when `jobs` is None), jobs < 1, max_retries < 0, an artifact that is not
    a .tar or .so file, and the argument errors of rpc_run. Ctrl-C cancels the tasks not yet
    started and raises KeyboardInterrupt once the running ones end. The fan-out and its retries
    are the core's (kiln/rpc/fan_out.h, shared with `kiln run --jobs`): the calls run on its
    threads without the GIL, which they take only to call a Python exporter."""
    tasks = [task if isinstance(task, RunTask) else RunTask(*task) for task in tasks]
    config = RPCConfig._normalized(rpc_config)
    if max_retries < 0:
        raise ValueError(f"run_many: max_retries must be >= 0, got {max_retries}")
    if jobs is None:
        jobs = max(1, config.count_num_servers())
    elif jobs < 1:
        raise ValueError(f"run_many: jobs must be >= 1, got {jobs}")
    calls = [_task_call(task) for task in tasks]
    if not calls:
        return []
    _remove_stale_directories()
    # The one fan-out with retry (kiln/rpc/fan_out.h, shared with `kiln run --jobs`): a task is
    # tried again only when its server is lost (kiln.RPCServerLostError). After Ctrl-C the tasks
    # not yet started never start; KeyboardInterrupt comes once the running ones end.
    return [
        _outcome(outputs, profile, server, error, lost, gave_up, max_retries)
        for outputs, profile, server, error, lost, gave_up in _kiln._rpc_run_many(
            calls, config, jobs, max_retries
        )
    ]


class Worker:
    """local_run in a worker process of its own (docs/isolation.md): a kernel or plugin that
    crashes, hangs past `timeout` seconds or is killed fails one run with kiln.WorkerError
    (``.kind``: "crashed", "hung", "killed" or "exited"; ``.signal``) instead of this process.
    The worker starts on the first run, is reused until it dies and restarts on the next run;
    runs are one at a time (use one Worker per thread). Close it, or use it as a context
    manager; it also ends with this process.

    timeout: seconds one run may take (upload to download); None: no deadline."""

    def __init__(self, timeout: Optional[float] = None) -> None:
        self._worker = _kiln._Worker(timeout)

    def run(self, mod: ModuleLike, device_type: str, args: Sequence[Any],
            evaluator_config: Optional[Any] = None, export_func: ExportFunc = "tar",
            output_format: Optional[str] = None) -> RunResult:
        """local_run's arguments and result; the module is exported here and measured in the
        worker."""
        config, export_func, output_format = _prepare(
            mod, evaluator_config, export_func, output_format)
        _check_args(args)
        _remove_stale_directories()
        outputs, profile = self._worker.run(
            mod, device_type, list(args), config, export_func, output_format)
        return _to_numpy(outputs), profile

    def run_file(self, path: Union[str, os.PathLike], device_type: str, args: Sequence[Any],
                 evaluator_config: Optional[Any] = None,
                 function: Optional[str] = None) -> RunResult:
        """Measures an already exported artifact (a .tar or .so, e.g. a tuner's build
        artifact): `function`, or the module's entry function when None."""
        _check_args(args)
        outputs, profile = self._worker.run_file(
            str(path), device_type, list(args), EvaluatorConfig._normalized(evaluator_config),
            function)
        return _to_numpy(outputs), profile

    @property
    def pid(self) -> int:
        """The worker's process id, or -1 while none runs."""
        return self._worker.pid

    @property
    def starts(self) -> int:
        """How many worker processes this Worker has started."""
        return self._worker.starts

    def close(self) -> None:
        """Ends the worker process (a later run starts a new one)."""
        self._worker.close()

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _loaded(mod, folder, name):
    """A kiln.Module for `mod`: itself, the file at a path, or a TVM module exported (as TVM's
    export_library writes a shared library) and loaded."""
    if isinstance(mod, Module):
        return mod
    if isinstance(mod, (str, os.PathLike)):
        return _kiln.load_module(os.fspath(mod))
    if hasattr(mod, "export_library"):
        path = os.path.join(folder, f"{name}.so")
        mod.export_library(path)
        return _kiln.load_module(path)
    raise TypeError(
        f"mod_{name} must be a kiln.Module, a module file's path or a TVM module, "
        f"got {type(mod).__name__}"
    )


def ab_run(mod_a: ModuleLike, mod_b: ModuleLike, device_type: str, args: Sequence[Any],
           args_b: Optional[Sequence[Any]] = None, evaluator_config: Optional[Any] = None,
           rounds: int = 20, threshold: float = 0.05, confidence: float = 0.95,
           seed: Optional[int] = None, function: Optional[str] = None,
           function_b: Optional[str] = None, max_rounds: int = 160) -> AbResult:
    """Times A and B in one run, alternating them in a random order per round, and returns an
    ``AbResult``: per-round seconds per call, each side's module file and SHA-256
    (``a_module``, ``b_module``), the ratio B/A with its interval, and the verdict "slower",
    "faster", "no change" (the whole interval within the threshold), "could not tell" or "same
    module" (A and B are the same module with the same function and inputs: the run timed A
    against itself) (docs/evaluator.md "Comparing two timings"). A load or a neighbour's job
    that comes and goes hits both sides alike instead of reading as a change, as it does between
    two runs made at different times.

    mod_a, mod_b: kiln.Modules, module file paths or TVM modules. args: A's arguments (numpy
    arrays, tensors, scalars), copied to ``device_type`` once; ``args_b`` B's (default: the
    same). function / function_b: the functions timed (default: the entry; B: A's name).
    evaluator_config: how each round times a side (number, min_repeat_ms, cache flush; repeat
    is ignored). rounds: at least 6; while the verdict is "could not tell", more rounds are taken
    (the count doubles) up to max_rounds, each look judged so that all together keep
    ``confidence``. threshold: a change within it is "no change" (0.05: 5%). seed: the order's
    seed (default: random; AbResult.seed says which). The results are not checked: run each
    side through local_run first to check its outputs. Ctrl-C stops between rounds with
    KeyboardInterrupt."""
    _check_args(args)
    if args_b is not None:
        _check_args(args_b)
    import tempfile

    with tempfile.TemporaryDirectory(prefix="kiln-ab-") as folder:
        a = _loaded(mod_a, folder, "a")
        b = _loaded(mod_b, folder, "b")
        return _kiln._ab_run(
            a, b, device_type, list(args), list(args if args_b is None else args_b),
            EvaluatorConfig._normalized(evaluator_config), function, function_b, rounds,
            max_rounds, threshold, confidence, seed,
        )
