# SPDX-License-Identifier: Apache-2.0
"""kiln.profiling: TVM's ``tvm.runtime.profiling`` API on Kiln's core.

Reports come from ``kiln.vm.VirtualMachine(..., profile=True).profile(...)`` or from
``Report.from_json``::

    report = vm.profile("main", x, w1, b1, w2, b2)
    print(report)                                  # report.table()
    open("trace.json", "w").write(report.chrome_trace())

Metric values are objects of four small classes, as in the reference, or plain str:

* ``Count(value: int)``            — ``.value``
* ``Duration(microseconds: float)`` — ``.microseconds``
* ``Percent(percent: float)``       — ``.percent`` (0-100: 10 means 10 %)
* ``Ratio(ratio: float)``           — ``.ratio``

``int(count)`` and ``float(duration)`` (``float(percent)``, ``float(ratio)``) give the plain
numbers; values compare equal when their type and number are.

Hardware counters come from metric collectors: the plugins' (``collector("perf")``,
``collector("papi")``) or one written in Python (subclass MetricCollector), used by
``profile_function``::

    prof = kiln.profiling.profile_function(mod, kiln.cpu(), [collector("perf")], "matmul")
    metrics = prof(a, b, c)                        # {"perf::task-clock": Duration(...), ...}
"""

from __future__ import annotations

import itertools
import json as _json
import math
import weakref
from typing import Any, Iterable, Optional, Union

from . import _kiln

from ._kiln import Count, Duration, Percent, Ratio, Report
from ._signatures import python_function

device_report_name = python_function(_kiln.device_report_name, __name__)

__all__ = [
    "Count",
    "Duration",
    "MetricCollector",
    "PAPIMetricCollector",
    "Percent",
    "PluginCollector",
    "ProfileFunction",
    "Ratio",
    "Report",
    "collector",
    "device_report_name",
    "profile_function",
]


class MetricCollector:
    """A source of per-call metrics, as TVM's MetricCollector. Kiln's plugins provide some
    (see collector()); write one in Python by subclassing this class and overriding:

    * ``init(devices)``: called once per profiled run (profile_function: once per call) with the
      tuple of devices to be profiled; do expensive setup here.
    * ``start(device)``: called when a call on `device` starts; returns a state object, or None
      when this collector does not handle `device` (it is then not stopped for that call).
    * ``stop(state)``: called when that call ends with what start returned; returns a dict of
      metric name -> Count / Duration / Percent / Ratio / str.

    Exceptions raised in these methods stop the run and come out unchanged. The methods run
    with the GIL held, so a Python collector adds Python overhead to each measured call.
    """

    #: The collector's name in messages.
    name = "python"

    def init(self, devices):
        """Called before measuring with the tuple of devices to be profiled."""

    def start(self, device):
        """Starts counting one call on `device`; returns a state, or None to skip the device."""
        raise NotImplementedError(f"{type(self).__name__}.start")

    def stop(self, state):
        """Stops what start() began and returns the call's metrics as a dict."""
        raise NotImplementedError(f"{type(self).__name__}.stop")

    def _native(self):
        """The core's collector calling back into this object. The callbacks hold it weakly (a
        reference held by C++ is invisible to Python's garbage collector, so a strong one could
        make a cycle that is never collected); ProfileFunction keeps it alive instead."""
        me = weakref.ref(self)
        who = type(self).__name__
        # start()'s states stay on this side (any Python object); the core holds a token.
        states = {}
        tokens = itertools.count(1)

        def alive():
            collector = me()
            if collector is None:
                raise RuntimeError(f"the Python collector {who} was garbage-collected")
            return collector

        def start(device):
            state = alive().start(device)
            if state is None:
                return None
            token = next(tokens)
            states[token] = state
            return token

        def stop(token):
            return _metrics_json(alive().stop(states.pop(token)), who)

        return _kiln._python_collector(
            str(getattr(self, "name", who)), lambda devices: alive().init(devices), start, stop
        )


class PluginCollector(MetricCollector):
    """A metric collector a Kiln plugin provides (``collector(name)``): its init/start/stop run
    inside Kiln's profiler, not from Python."""

    def __init__(self, name: str, options: Optional[dict] = None) -> None:
        """The collector `name` of a loaded plugin ("perf", "papi", or a plugin's own);
        kiln.NotFoundError lists the available ones. `options` (a dict, e.g.
        ``{"events": ["task-clock"]}``) loads the plugin afresh with those options, as the
        ``collectors:`` entries of a run config do; a ValueError says why it cannot load."""
        options_json = None if options is None else _json.dumps(options)
        self._collector = _kiln._plugin_collector(name, options_json)
        self.name = self._collector.name
        self.options = options

    def init(self, devices):
        """Not callable from Python: Kiln's profiler calls the plugin's init."""
        raise TypeError(f"collector '{self.name}' runs inside Kiln's profiler")

    start = stop = init

    def _native(self):
        return self._collector

    def __repr__(self):
        return f"<kiln.profiling.PluginCollector '{self.name}'>"


def collector(name: str, options: Optional[dict] = None) -> PluginCollector:
    """The metric collector `name` of a loaded Kiln plugin: "perf" (Linux perf_event counters;
    metrics "perf::<event>"), "papi" (PAPI events, named as PAPI names them), or any plugin's
    collector. See PluginCollector for `options`. A collector whose counters this machine
    cannot read reports no metrics (the plugin logs why)."""
    return PluginCollector(name, options)


class PAPIMetricCollector(PluginCollector):
    """TVM's PAPIMetricCollector, through Kiln's "papi" plugin.

    metric_names: None for the plugin's defaults (the reference's CPU events), or a dict Device
    -> list of PAPI event names; Kiln's PAPI plugin counts CPU events, so the names given for
    CPU devices are used (their union, in order)."""

    def __init__(self, metric_names=None):
        options = None
        if metric_names is not None:
            events = []
            for dev, names in dict(metric_names).items():
                if getattr(dev, "device_type", None) != 1:  # kDLCPU (kiln's or TVM's Device)
                    continue
                for n in names:
                    if n not in events:
                        events.append(str(n))
            if not events:
                raise ValueError("PAPIMetricCollector: no event names for a CPU device")
            options = {"events": events}
        super().__init__("papi", options)


def _native_collector(c):
    if isinstance(c, str):
        return collector(c)._native()
    if isinstance(c, MetricCollector):
        return c._native()
    if isinstance(c, _kiln._MetricCollector):
        return c
    raise TypeError(
        f"a collector is a name, a kiln.profiling.MetricCollector or one of its subclasses, got "
        f"{type(c).__name__}"
    )


def _metric_json(value, where):
    """One metric value as Report.json encodes it (TVM's encoding)."""
    if isinstance(value, Count):
        return {"count": int(value.value)}
    if isinstance(value, Duration):
        return {"microseconds": _finite(value.microseconds)}
    if isinstance(value, Percent):
        return {"percent": _finite(value.percent)}
    if isinstance(value, Ratio):
        return {"ratio": _finite(value.ratio)}
    if isinstance(value, str):
        return {"string": value}
    raise TypeError(
        f"{where}: a metric value is a kiln.profiling Count, Duration, Percent, Ratio or a str, "
        f"got {type(value).__name__}"
    )


def _finite(x):
    x = float(x)
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return x


def _metrics_json(metrics, who):
    if metrics is None:
        metrics = {}
    if not isinstance(metrics, dict):
        raise TypeError(f"{who}.stop must return a dict of metrics, got {type(metrics).__name__}")
    out = {}
    for key, value in metrics.items():
        if not isinstance(key, str):
            raise TypeError(f"{who}.stop: metric names are str, got {key!r}")
        out[key] = _metric_json(value, f"{who}.stop: metric {key!r}")
    return _json.dumps(out)


class ProfileFunction:
    """What profile_function returns: call it with the function's arguments to get a dict of
    the collectors' metrics (name -> Count / Duration / Percent / Ratio / str). The GIL is
    released while the function runs (a Python collector takes it for its callbacks)."""

    def __init__(self, native, collectors):
        self._native = native
        # The Python collectors, kept alive here (their callbacks hold them weakly).
        self._collectors = list(collectors)

    def __call__(self, *args: Any) -> dict[str, Any]:
        """Runs the warm-up calls, then one call between the collectors' start and stop."""
        return self._native(*args)

    def __repr__(self):
        return repr(self._native)


def profile_function(mod: _kiln.Module, dev: _kiln.Device,
                     collectors: Iterable[Union[str, MetricCollector]],
                     func_name: Optional[str] = None, warmup_iters: int = 10) -> ProfileFunction:
    """As TVM's profile_function: a callable ``prof(*args)`` that, per call, runs
    ``mod[func_name]`` (default: the module's entry function) `warmup_iters` times, initialises
    every collector for `dev`, starts them, calls the function once, stops them and returns
    their metrics merged into one dict (later collectors win on equal names). No timing is
    added. The function's own result is discarded.

    collectors: a list of names ("perf", "papi", ...), PluginCollector objects (collector()) or
    Python MetricCollector subclasses. kiln.NotFoundError for a function the module lacks;
    RuntimeError for a module over RPC."""
    if not isinstance(mod, _kiln.Module):
        if type(mod).__name__ == "RemoteModule":  # kiln.rpc's: the reference's error
            raise RuntimeError("Profiling a module over RPC is not yet supported")
        raise TypeError(f"mod must be a kiln.Module, got {type(mod).__name__}")
    collectors = list(collectors)
    native = [_native_collector(c) for c in collectors]
    core = _kiln._profile_function(
        mod, dev, native, "" if func_name is None else func_name, int(warmup_iters)
    )
    return ProfileFunction(core, collectors)
