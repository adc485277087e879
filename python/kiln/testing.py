"""kiln.testing: run a module on a device, locally or on a remote board, and get its outputs and
its timing — TVM's ``tvm.testing.local_run`` / ``rpc_run`` (SPEC.md §1.6-§1.10) on Kiln's core.

A TVM user's test changes one import::

    # outputs, profile = tvm.testing.local_run(mod, "cpu", [a, b, c])
    outputs, profile = kiln.testing.local_run(mod, "cpu", [a, b, c])

`mod` is a kiln.Module or a TVM module (anything with ``export_library``): a TVM module is
exported by TVM's own exporters, as the reference does, and the file then runs in Kiln.
"""

from typing import NamedTuple

from . import _kiln
from ._kiln import Module, RPCConfig

__all__ = ["EvaluatorConfig", "RPCConfig", "local_run", "rpc_run"]


class EvaluatorConfig(NamedTuple):
    """How the runners time the entry function (SPEC §1.6): ``number`` calls per repeat,
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

    return [numpy.from_dlpack(o) if isinstance(o, _kiln.Tensor) else o for o in outputs]


def local_run(mod, device_type, args, evaluator_config=None, export_func="tar", output_format=None):
    """Exports `mod` into a temporary directory, loads it back, copies `args` to
    ``device_type:0``, times the entry function with `evaluator_config`, calls it once more and
    returns ``(args, BenchmarkResult)`` with tensors as numpy arrays (SPEC §1.9).

    export_func: "tar" (default), "ndk" (a shared library), or a callable ``f(mod, path)``
    (then `output_format`, the artifact's extension, is required). Inputs are never modified:
    they are copied to the device. Ctrl-C stops the measurement after the current repeat."""
    config, export_func, output_format = _prepare(mod, evaluator_config, export_func, output_format)
    _check_args(args)
    outputs, profile = _kiln._local_run(
        mod, device_type, list(args), config, export_func, output_format
    )
    return _to_numpy(outputs), profile


def rpc_run(
    mod,
    device_type,
    args,
    evaluator_config=None,
    rpc_config=None,
    export_func="tar",
    output_format=None,
):
    """local_run on a device of a remote server found through a tracker (SPEC §1.10): the
    artifact is uploaded as ``kiln_tmp_mod.<format>``, the measurement runs on the server, and
    the remote files are removed afterwards whatever happens. `rpc_config` is a kiln.RPCConfig
    (or TVM's); missing tracker settings fall back to KILN_TRACKER_* then TVM_TRACKER_* and are
    a ValueError before any network access."""
    config, export_func, output_format = _prepare(mod, evaluator_config, export_func, output_format)
    _check_args(args)
    outputs, profile, _server = _kiln._rpc_run(
        mod, device_type, list(args), config, rpc_config, export_func, output_format
    )
    return _to_numpy(outputs), profile


class Worker:
    """local_run in a worker process of its own (docs/isolation.md): a kernel or plugin that
    crashes, hangs past `timeout` seconds or is killed fails one run with kiln.WorkerError
    (``.kind``: "crashed", "hung", "killed" or "exited"; ``.signal``) instead of this process.
    The worker starts on the first run, is reused until it dies and restarts on the next run;
    runs are one at a time (use one Worker per thread). Close it, or use it as a context
    manager; it also ends with this process.

    timeout: seconds one run may take (upload to download); None: no deadline."""

    def __init__(self, timeout=None):
        self._worker = _kiln._Worker(timeout)

    def run(self, mod, device_type, args, evaluator_config=None, export_func="tar",
            output_format=None):
        """local_run's arguments and result; the module is exported here and measured in the
        worker."""
        config, export_func, output_format = _prepare(
            mod, evaluator_config, export_func, output_format)
        _check_args(args)
        outputs, profile = self._worker.run(
            mod, device_type, list(args), config, export_func, output_format)
        return _to_numpy(outputs), profile

    def run_file(self, path, device_type, args, evaluator_config=None, function=None):
        """Measures an already exported artifact (a .tar or .so, e.g. a tuner's build
        artifact): `function`, or the module's entry function when None."""
        _check_args(args)
        outputs, profile = self._worker.run_file(
            str(path), device_type, list(args), EvaluatorConfig._normalized(evaluator_config),
            function)
        return _to_numpy(outputs), profile

    @property
    def pid(self):
        """The worker's process id, or -1 while none runs."""
        return self._worker.pid

    @property
    def starts(self):
        """How many worker processes this Worker has started."""
        return self._worker.starts

    def close(self):
        """Ends the worker process (a later run starts a new one)."""
        self._worker.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
