# SPDX-License-Identifier: Apache-2.0
"""kiln.profiling against the real core (SPEC §3, checklist §3.10): metric values, Report and its
table / CSV / JSON / Chrome-trace forms (on reports built here and on the VM's), profile_function
with collectors written in Python and the plugins' perf and papi collectors (skipped, with the
plugin's own words, where this machine cannot count)."""

import csv
import io
import json

import numpy as np
import pytest

import kiln
from conftest import VM_EXAMPLES, example_kernel
from kiln.profiling import (
    Count,
    Duration,
    MetricCollector,
    PAPIMetricCollector,
    Percent,
    Ratio,
    Report,
    collector,
    profile_function,
)
from kiln.vm import VirtualMachine

# ---- metric values (§3.1) ----------------------------------------------------------------------


def test_metric_values():
    assert Count(3).value == 3 and int(Count(3)) == 3
    assert Duration(12.5).microseconds == 12.5 and float(Duration(12.5)) == 12.5
    assert Percent(10).percent == 10.0
    assert Ratio(0.25).ratio == 0.25
    assert Count(3) == Count(3) and Count(3) != Count(4)
    assert Duration(1.0) == Duration(1.0) and Duration(1.0) != Duration(2.0)
    assert [repr(v) for v in (Count(3), Duration(1.5), Percent(51.22), Ratio(0.5))] == [
        "Count(3)", "Duration(1.5)", "Percent(51.22)", "Ratio(0.5)"]
    c = Count()
    c.value = 7
    assert c == Count(7)


# ---- reports built here: table, aggregation, columns, CSV, JSON (§3.3-§3.5) -------------------


def handmade():
    return Report(
        calls=[
            {"Name": "conv", "Duration (us)": Duration(1000.0), "Count": Count(1),
             "Device": "cpu0", "Argument Shapes": "float32[4]", "Percent": Percent(40.0),
             "Ratio": Ratio(0.2), "Label": "first", "Hash": "h1"},
            {"Name": "relu", "Duration (us)": Duration(10.0), "Count": Count(1),
             "Device": "cpu0", "Percent": Percent(0.4), "Ratio": Ratio(0.9), "Label": "x"},
            {"Name": "conv", "Duration (us)": Duration(234.5), "Count": Count(1),
             "Device": "cpu0", "Argument Shapes": "float32[4]", "Percent": Percent(9.38),
             "Ratio": Ratio(0.6), "Label": "second", "Hash": "h1"},
        ],
        device_metrics={"cpu0": {"Name": "Total", "Duration (us)": Duration(2500.0),
                                 "Count": Count(1), "Device": "cpu0"}},
        configuration={"Executor": "VM", "Number of threads": Count(4)},
    )


def table_rows(table):
    """The table's lines split into cells (two spaces separate columns)."""
    lines = table.split("\n\nConfiguration")[0].splitlines()
    return [[cell.strip() for cell in line.split("  ") if cell.strip()] for line in lines]


def test_report_fields_read_back():
    r = handmade()
    assert len(r.calls) == 3 and r.calls[1]["Name"] == "relu"
    assert r.calls[0]["Duration (us)"] == Duration(1000.0)
    assert r.device_metrics["cpu0"]["Duration (us)"].microseconds == 2500.0
    assert r.configuration == {"Executor": "VM", "Number of threads": Count(4)}
    r.configuration = {"Executor": "Graph"}
    assert r.configuration["Executor"] == "Graph"
    assert repr(r) == "<kiln.profiling.Report: 3 calls on cpu0>"
    with pytest.raises(TypeError):
        Report(calls=[{"Name": 3}])


def test_table_aggregates_sorts_and_sums():  # checklist 5, 6
    table = handmade().table()
    assert str(handmade()) == table
    rows = table_rows(table)
    header = table.splitlines()[0].split()
    # Fixed columns first, then the others in byte order.
    fixed = "Name Duration (us) Percent Device Count Argument Shapes".split()
    assert header[:len(fixed)] == fixed
    assert header[len(fixed):] == ["Hash", "Label", "Ratio"]
    conv = next(r for r in rows if r[0] == "conv")
    # Durations, counts and percents summed; ratios averaged; differing strings blank.
    assert conv[1:5] == ["1,234.50", "49.38", "cpu0", "2"]
    assert "0.4" in conv and "first" not in conv and "second" not in conv
    assert "h1" in conv
    names = [r[0] for r in rows[1:]]
    assert names == ["conv", "relu", "----------", "Sum", "Total"]  # sorted by duration
    total = next(r for r in rows if r[0] == "Total")
    assert total[1] == "2,500.00"
    summed = next(r for r in rows if r[0] == "Sum")
    assert summed[1:3] == ["1,244.50", "49.78"]
    assert "\n\nConfiguration\n-------------\n" in table
    assert "Executor: VM" in table and "Number of threads: 4" in table


def test_table_options():
    r = handmade()
    plain = table_rows(r.table(sort=False, aggregate=False, col_sums=False))
    assert [row[0] for row in plain[1:]] == ["conv", "relu", "conv", "Total"]
    unsorted = table_rows(r.table(sort=False))
    assert [row[0] for row in unsorted[1:3]] == ["conv", "relu"]
    assert "Sum" not in [row[0] for row in table_rows(r.table(col_sums=False))]


def test_csv_lists_every_call_metric():  # checklist 3
    text = handmade().csv()
    rows = list(csv.reader(io.StringIO(text)))
    assert rows[0] == sorted(rows[0], key=lambda s: s.encode())
    assert set(rows[0]) == {"Argument Shapes", "Count", "Device", "Duration (us)", "Hash",
                            "Label", "Name", "Percent", "Ratio"}
    assert len(rows) == 4
    first = dict(zip(rows[0], rows[1]))
    assert first["Name"] == "conv" and float(first["Duration (us)"]) == 1000
    assert first["Count"] == "1" and first["Hash"] == "h1"
    relu = dict(zip(rows[0], rows[2]))
    assert relu["Hash"] == "" and relu["Argument Shapes"] == ""
    assert Report().csv() == "\n"


def test_json_schema_and_round_trip():  # checklists 1, 2
    r = handmade()
    doc = json.loads(r.json())
    assert set(doc) == {"calls", "device_metrics", "configuration"}
    first = doc["calls"][0]
    assert first["Name"] == {"string": "conv"}
    assert first["Count"] == {"count": 1}
    assert first["Duration (us)"] == {"microseconds": 1000.0}
    assert first["Percent"] == {"percent": 40.0} and first["Ratio"] == {"ratio": 0.2}
    assert doc["configuration"]["Number of threads"] == {"count": 4}
    assert '"microseconds":1000.00000000000000000' in r.json()  # 17 decimals, compact
    back = Report.from_json(r.json())
    assert back.calls == r.calls and back.device_metrics == r.device_metrics
    assert back.configuration == r.configuration
    assert back.table(aggregate=False, col_sums=False) == r.table(aggregate=False, col_sums=False)
    assert back.table() == r.table()
    # Names that need escaping survive (the reference wrote them raw).
    odd = Report(calls=[{"Name": 'say "hi"\\', "Duration (us)": Duration(1)}])
    assert Report.from_json(odd.json()).calls[0]["Name"] == 'say "hi"\\'
    # Missing keys are empty; unknown keys ignored.
    assert Report.from_json('{"calls": [], "other": 1}').device_metrics == {}


def test_from_json_errors_say_where():
    with pytest.raises(ValueError, match="Duration"):
        Report.from_json('{"calls": [{"Duration (us)": {"hours": 1}}]}')
    with pytest.raises(ValueError):
        Report.from_json("not json")
    with pytest.raises(ValueError):
        Report.from_json('{"calls": [{"Name": "raw"}]}')


def test_chrome_trace():
    trace = json.loads(handmade().chrome_trace())
    events = trace["traceEvents"]
    slices = [e for e in events if e.get("ph") == "X"]
    assert [e["name"] for e in slices] == ["conv", "relu", "conv"]
    assert [e["dur"] for e in slices] == [1000.0, 10.0, 234.5]
    assert slices[1]["ts"] >= slices[0]["ts"] + slices[0]["dur"]  # laid end to end
    names = [e for e in events if e.get("ph") == "M" and e.get("name") == "thread_name"]
    assert any(e["args"]["name"] == "cpu0" for e in names)


def test_device_report_names():  # §3.8
    assert kiln.profiling.device_report_name(kiln.cpu(0)) == "cpu0"
    assert kiln.profiling.device_report_name(kiln.cuda(1)) == "cuda1"
    assert kiln.profiling.device_report_name(kiln.opencl(2)) == "opencl2"


# ---- the VM's reports (§2.14 with §3.10's checks) ----------------------------------------------


@pytest.fixture(scope="module")
def vm_report():
    exe = kiln.load_module(str(VM_EXAMPLES / "mlp.kvmt"))
    vm = VirtualMachine(exe, kiln.cpu(), profile=True)
    rng = np.random.default_rng(3)
    args = [rng.standard_normal(s, dtype=np.float32)
            for s in [(64, 256), (256, 128), (128,), (128, 64), (64,)]]
    return vm.profile("main", *args)


def test_vm_report_json_schema(vm_report):  # checklist 1
    doc = json.loads(vm_report.json())
    assert set(doc) == {"calls", "device_metrics", "configuration"}
    assert doc["calls"]
    for call in doc["calls"]:
        assert isinstance(call["Name"]["string"], str)
        assert isinstance(call["Count"]["count"], int)
        assert isinstance(call["Duration (us)"]["microseconds"], float)
    assert doc["configuration"]["Executor"] == {"string": "VM"}


def test_vm_report_round_trip_and_csv(vm_report):  # checklists 2, 3
    back = Report.from_json(vm_report.json())
    assert back.table(aggregate=False, col_sums=False) == vm_report.table(aggregate=False,
                                                                          col_sums=False)
    rows = list(csv.DictReader(io.StringIO(vm_report.csv())))
    assert len(rows) == len(vm_report.calls)
    assert {"Name", "Duration (us)", "Count", "Device", "Argument Shapes",
            "Percent"} <= set(rows[0])
    assert all(float(r["Duration (us)"]) >= 0 for r in rows)


def test_vm_report_totals_percent_and_configuration(vm_report):  # checklists 4, 7
    assert vm_report.configuration["Executor"] == "VM"
    total = vm_report.device_metrics["cpu0"]
    assert total["Name"] == "Total" and "Percent" not in total
    longest = max(d["Duration (us)"].microseconds for d in vm_report.device_metrics.values())
    for call in vm_report.calls:
        assert call["Percent"].percent == pytest.approx(
            call["Duration (us)"].microseconds / longest * 100)
    table = vm_report.table()
    assert "Total" in table and "\nConfiguration\n" in table
    rows = table_rows(table)
    matmul = [r for r in rows if r[0] == "matmul"]
    assert len(matmul) == 2, "different argument shapes are different rows"


def test_vm_report_aggregation_sums_counts():  # checklist 5 on real rows
    exe = kiln.load_module(str(VM_EXAMPLES / "mlp.kvmt"))
    vm = VirtualMachine(exe, kiln.cpu(), profile=True)
    args = [np.ones(s, dtype=np.float32) for s in [(64, 256), (256, 128), (128,), (128, 64),
                                                   (64,)]]
    report = vm.profile("main", *args)
    # Two profiles merged into one report: every aggregated row counts 2.
    twice = Report(calls=report.calls + report.calls, device_metrics=report.device_metrics,
                   configuration=report.configuration)
    for row in table_rows(twice.table(col_sums=False)):
        if row[0] not in ("Name", "Total"):
            assert row[4] == "2", row


# ---- profile_function (§3.9) ------------------------------------------------------------------

COUNT = "test.py.profiling.count"
calls_seen = []


@pytest.fixture(scope="module", autouse=True)
def counting_function():
    kiln.register_func(COUNT, lambda x: calls_seen.append(x), override=True)


@pytest.fixture
def counting_module(tmp_path):
    path = tmp_path / "count.kvmt"
    path.write_text(f"""kiln_vm 1
packed_func @{COUNT}
func @main(x) regs=2 {{
  call  {COUNT} in: %0 dst: %1
  ret   %1
}}
""")
    calls_seen.clear()
    return kiln.load_module(str(path))


class Recorder(MetricCollector):
    """Counts what the profiler asks of it; handles the CPU only."""

    name = "recorder"

    def __init__(self, prefix="Rec"):
        self.prefix = prefix
        self.inits = []
        self.starts = 0
        self.stops = 0

    def init(self, devices):
        self.inits.append(devices)

    def start(self, device):
        if device.device_type != 1:
            return None
        self.starts += 1
        return {"started": self.starts, "calls": len(calls_seen)}

    def stop(self, state):
        self.stops += 1
        return {f"{self.prefix} Calls": Count(state["started"]),
                f"{self.prefix} Seen": Count(len(calls_seen) - state["calls"]),
                f"{self.prefix} Label": "from python",
                f"{self.prefix} Ratio": Ratio(0.5),
                f"{self.prefix} Time": Duration(2.5),
                f"{self.prefix} Share": Percent(12.5)}


def test_profile_function_returns_the_collectors_metrics(counting_module):  # checklist 8
    rec = Recorder()
    prof = profile_function(counting_module, kiln.cpu(), [rec], "main", warmup_iters=3)
    assert isinstance(prof, kiln.profiling.ProfileFunction)
    metrics = prof(41)
    assert calls_seen == [41] * 4, "three warm-up calls, then the measured one"
    assert metrics == {"Rec Calls": Count(1), "Rec Seen": Count(1), "Rec Label": "from python",
                       "Rec Ratio": Ratio(0.5), "Rec Time": Duration(2.5),
                       "Rec Share": Percent(12.5)}
    assert "Duration (us)" not in metrics, "profile_function adds no timing"
    assert rec.inits == [(kiln.cpu(0),)]
    prof(42)
    assert len(rec.inits) == 2, "init on every invocation"
    assert rec.starts == rec.stops == 2


def test_later_collectors_win_and_declined_devices(counting_module):
    a, b = Recorder("Same"), Recorder("Same")
    metrics = profile_function(counting_module, kiln.cpu(), [a, b], "main", warmup_iters=0)(1)
    assert metrics["Same Calls"] == Count(1) and a.stops == b.stops == 1

    class Declines(Recorder):
        def start(self, device):
            self.starts += 1
            return None

    d = Declines("Dec")
    metrics = profile_function(counting_module, kiln.cpu(), [d, Recorder()], "main",
                               warmup_iters=0)(1)
    assert d.starts == 1 and d.stops == 0, "a collector that declined is not stopped"
    assert "Rec Calls" in metrics and not any(k.startswith("Dec ") for k in metrics)


def test_collector_errors_propagate(counting_module):
    class Broken(Recorder):
        def stop(self, state):
            raise KeyError("lost the counters")

    with pytest.raises(KeyError, match="lost the counters"):
        profile_function(counting_module, kiln.cpu(), [Broken()], "main", warmup_iters=0)(1)

    class BadValue(Recorder):
        def stop(self, state):
            return {"x": 3}

    with pytest.raises(TypeError, match="Count, Duration, Percent, Ratio or a str"):
        profile_function(counting_module, kiln.cpu(), [BadValue()], "main", warmup_iters=0)(1)

    class Unfinished(MetricCollector):
        pass

    with pytest.raises(NotImplementedError):
        profile_function(counting_module, kiln.cpu(), [Unfinished()], "main", warmup_iters=0)(1)
    with pytest.raises(TypeError, match="a collector is a name"):
        profile_function(counting_module, kiln.cpu(), [3], "main")


def test_profile_function_errors():
    mod = kiln.load_module(example_kernel("calls"))
    with pytest.raises(kiln.NotFoundError, match='There is no function called "nope" in the mod'):
        profile_function(mod, kiln.cpu(), [], "nope")
    with pytest.raises(kiln.NotFoundError, match="zzz"):
        collector("zzz")
    # The function's errors come out as its own kind.
    with pytest.raises(ValueError, match="deliberate failure"):
        profile_function(mod, kiln.cpu(), [], "fail_value", warmup_iters=0)()
    # Its result is discarded: an empty dict without collectors.
    assert profile_function(mod, kiln.cpu(), [], "add3", warmup_iters=1)(1, 2, 3) == {}


def test_profile_function_refuses_remote_modules(rpc_server):  # checklist 9
    port = rpc_server(key="py-prof")
    with kiln.rpc.connect("127.0.0.1", port, key="py-prof") as session:
        session.upload(example_kernel("calls"))
        remote = session.load_module("libcalls.so")
        with pytest.raises(RuntimeError, match="Profiling a module over RPC is not yet supported"):
            profile_function(remote, kiln.cpu(), [], "add3")


# ---- the plugins' collectors --------------------------------------------------------------------


def skip_unless_loaded(plugin):
    """A skip with the runtime's reason when `plugin` is not loaded (not built here, or it
    failed); once loaded, every error of its collector is a failure."""
    status = next((p for p in kiln.plugins() if p["name"] == plugin), None)
    if status is None or status["state"] != "loaded":
        pytest.skip(f"plugin '{plugin}' is not loaded here: "
                    f"{status['reason'] if status else 'not built'}")


def plugin_metrics(name, capfd, func="spin", args=(20_000_000,), **options):
    """profile_function with the plugin collector `name` on the example `spin` kernel, or a
    skip with the plugin's own reason when it cannot count here."""
    skip_unless_loaded(name)
    mod = kiln.load_module(example_kernel("calls"))
    c = collector(name, options or None)
    metrics = profile_function(mod, kiln.cpu(), [c], func, warmup_iters=1)(*args)
    if not metrics:
        said = [line for line in capfd.readouterr().err.splitlines() if name in line]
        pytest.skip(f"collector '{name}' counts nothing here: "
                    f"{said[-1] if said else 'no reason logged'}")
    return metrics


def test_perf_collector(capfd):
    metrics = plugin_metrics("perf", capfd)
    assert all(k.startswith("perf::") for k in metrics)
    if "perf::task-clock" not in metrics:
        pytest.skip("perf::task-clock is not countable here")
    spin = metrics["perf::task-clock"]
    assert isinstance(spin, Duration)
    # 20 ms of busy waiting shows as CPU time (loosely: the spinning thread may be preempted).
    assert spin.microseconds > 1000
    idle = plugin_metrics("perf", capfd, func="noop", args=())["perf::task-clock"]
    assert idle.microseconds < spin.microseconds
    for key, value in metrics.items():
        if key != "perf::task-clock":
            assert isinstance(value, Count) and value.value >= -1


def test_perf_collector_options(capfd):
    metrics = plugin_metrics("perf", capfd, events=["task-clock"])
    assert set(metrics) == {"perf::task-clock"}
    with pytest.raises(ValueError, match="unknown event 'warp-drive'"):
        collector("perf", {"events": ["warp-drive"]})


def test_papi_collector(capfd):
    metrics = plugin_metrics("papi", capfd)
    assert all(isinstance(v, Count) for v in metrics.values())
    assert any(v.value > 0 for v in metrics.values())


def test_papi_metric_collector_names_the_events(capfd):
    skip_unless_loaded("papi")
    mod = kiln.load_module(example_kernel("calls"))
    c = PAPIMetricCollector({kiln.cpu(0): ["PAPI_TOT_INS"]})
    metrics = profile_function(mod, kiln.cpu(), [c], "spin", warmup_iters=0)(1_000_000)
    if not metrics:
        said = [line for line in capfd.readouterr().err.splitlines() if "papi" in line]
        pytest.skip(f"papi counts nothing here: {said[-1] if said else 'no reason logged'}")
    assert set(metrics) == {"PAPI_TOT_INS"} and metrics["PAPI_TOT_INS"].value > 0


def test_papi_metric_collector_needs_cpu_events():
    with pytest.raises(ValueError, match="no event names for a CPU device"):
        PAPIMetricCollector({kiln.cuda(0): ["PAPI_TOT_INS"]})
