// SPDX-License-Identifier: Apache-2.0
// kiln.profiling's core (TVM's tvm.runtime.profiling): the metric value classes Count, Duration,
// Percent and Ratio, Report with its table/CSV/JSON/Chrome-trace forms, metric collectors (a
// plugin's, or one written in Python) and profile_function. The Python layer (kiln/profiling.py)
// names collectors and normalises arguments.
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/variant.h>
#include <nanobind/stl/vector.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bindings.h"
#include "kiln/error.h"
#include "kiln/profiling/collector.h"
#include "kiln/profiling/metrics.h"
#include "kiln/profiling/profiler.h"
#include "kiln/profiling/report.h"
#include "kiln/runtime.h"
#include "kiln/vm/virtual_machine.h"

namespace kiln::python {
namespace {

namespace prof = kiln::profiling;

// A number as Python's repr() writes it (shortest round-trip form).
std::string py_number(double v) { return nb::cast<std::string>(nb::repr(nb::float_(v))); }

// A collector held by Python: a plugin's, or one written in Python (PythonCollector).
struct PyCollector {
  std::shared_ptr<prof::MetricCollector> collector;
};

// A MetricCollector whose init/start/stop are Python callables, wrapped as Functions so that
// they run under the GIL and a Python exception they raise comes back out unchanged.
// init(devices: tuple of Device); start(device) -> state or None (None: this collector does not
// handle the device); stop(state) -> the metrics in the Report JSON encoding of one row
// ({"name": {"count": 3}, ...}, made by kiln/profiling.py).
class PythonCollector : public prof::MetricCollector {
 public:
  PythonCollector(std::string name, Function init, Function start, Function stop)
      : name_(std::move(name)),
        init_(std::move(init)),
        start_(std::move(start)),
        stop_(std::move(stop)) {}

  std::string name() const override { return name_; }

  void init(const std::vector<Device>& devices) override {
    std::vector<Any> items(devices.begin(), devices.end());
    init_.call_packed({vm::make_array(std::move(items))});
  }

  std::shared_ptr<void> start(Device device) override {
    Any state = start_.call_packed({Any(device)});
    if (state.is_none()) return nullptr;
    return std::make_shared<Any>(std::move(state));
  }

  prof::MetricMap stop(std::shared_ptr<void> state) override {
    Any row = stop_.call_packed({*static_cast<Any*>(state.get())});
    if (row.type_code() != KILN_TYPE_STRING) {
      throw TypeError("collector '" + name_ + "': stop() must give the metrics' JSON");
    }
    prof::Report parsed = prof::Report::from_json("{\"calls\":[" + row.cast<std::string>() + "]}");
    return parsed.calls.empty() ? prof::MetricMap() : std::move(parsed.calls.front());
  }

 private:
  std::string name_;
  Function init_, start_, stop_;
};

// The collector `name` of a plugin the runtime loaded, or, with `options_json`, of that plugin
// loaded afresh with those options (as `kiln profile` does for collector options).
std::shared_ptr<prof::MetricCollector> plugin_collector_with(
    const std::string& name, const std::optional<std::string>& options_json) {
  if (!options_json) return prof::plugin_collector(name, runtime());
  return prof::plugin_collector(name, *options_json, runtime());
}

// What profile_function returns: call it with the function's arguments.
struct PyProfileFunction {
  std::function<prof::MetricMap(const std::vector<Any>&)> run;
  std::string function_name;

  prof::MetricMap call(const nb::args& args) const {
    std::vector<Any> values = to_anys(args);
    return without_gil([&] { return run(values); });
  }
};

// A metric value's __eq__: equal to a value of the same class with the same number, unequal to
// anything else (object's signature, so a type checker accepts `count == 3`).
template <typename Metric>
bool metric_equals(const Metric& self, nb::handle other) {
  return nb::isinstance<Metric>(other) && self == nb::cast<const Metric&>(other);
}

std::string report_repr(const prof::Report& r) {
  std::string devices;
  for (const auto& [name, metrics] : r.device_metrics)
    devices += (devices.empty() ? "" : ", ") + name;
  return "<kiln.profiling.Report: " + std::to_string(r.calls.size()) + " calls" +
         (devices.empty() ? std::string() : " on " + devices) + ">";
}

}  // namespace

void bind_profiling(nb::module_& m) {
  nb::class_<prof::Count>(m, "Count",
                          "A metric that counts, as TVM's profiling.Count: `value` is an int.")
      .def(
          "__init__", [](prof::Count* self, int64_t value) { new (self) prof::Count{value}; },
          nb::arg("value") = 0)
      .def_rw("value", &prof::Count::value, "The count (int).")
      .def("__int__", [](const prof::Count& c) { return c.value; })
      .def("__eq__", &metric_equals<prof::Count>, nb::arg("other"))
      .def("__repr__",
           [](const prof::Count& c) { return "Count(" + std::to_string(c.value) + ")"; });

  nb::class_<prof::Duration>(
      m, "Duration",
      "A time metric, as TVM's profiling.Duration: `microseconds` is a float in microseconds.")
      .def(
          "__init__",
          [](prof::Duration* self, double microseconds) {
            new (self) prof::Duration{microseconds};
          },
          nb::arg("microseconds") = 0.0)
      .def_rw("microseconds", &prof::Duration::microseconds,
              "The duration in microseconds (float).")
      .def("__float__", [](const prof::Duration& d) { return d.microseconds; })
      .def("__eq__", &metric_equals<prof::Duration>, nb::arg("other"))
      .def("__repr__",
           [](const prof::Duration& d) { return "Duration(" + py_number(d.microseconds) + ")"; });

  nb::class_<prof::Percent>(
      m, "Percent",
      "A share, as TVM's profiling.Percent: `percent` is a float on the 0-100 scale (10 = 10 %).")
      .def(
          "__init__",
          [](prof::Percent* self, double percent) { new (self) prof::Percent{percent}; },
          nb::arg("percent") = 0.0)
      .def_rw("percent", &prof::Percent::percent, "The share on the 0-100 scale (float).")
      .def("__float__", [](const prof::Percent& p) { return p.percent; })
      .def("__eq__", &metric_equals<prof::Percent>, nb::arg("other"))
      .def("__repr__",
           [](const prof::Percent& p) { return "Percent(" + py_number(p.percent) + ")"; });

  nb::class_<prof::Ratio>(
      m, "Ratio",
      "A ratio metric, as TVM's profiling.Ratio: `ratio` is a float; table() averages it.")
      .def(
          "__init__", [](prof::Ratio* self, double ratio) { new (self) prof::Ratio{ratio}; },
          nb::arg("ratio") = 0.0)
      .def_rw("ratio", &prof::Ratio::ratio, "The ratio (float).")
      .def("__float__", [](const prof::Ratio& r) { return r.ratio; })
      .def("__eq__", &metric_equals<prof::Ratio>, nb::arg("other"))
      .def("__repr__", [](const prof::Ratio& r) { return "Ratio(" + py_number(r.ratio) + ")"; });

  nb::class_<prof::Report>(
      m, "Report",
      "The result of a profiled run, as TVM's profiling.Report: one row of metrics per call, "
      "each device's totals and the run's configuration. Metric values are kiln.profiling.Count, "
      "Duration, Percent, Ratio or str. `calls`, `device_metrics` and `configuration` read as "
      "new Python containers each time (assign a whole new value to change one). "
      "str(report) is report.table().")
      .def(
          "__init__",
          [](prof::Report* self, std::vector<prof::MetricMap> calls,
             std::map<std::string, prof::MetricMap> device_metrics, prof::MetricMap configuration) {
            new (self)
                prof::Report{std::move(calls), std::move(device_metrics), std::move(configuration)};
          },
          nb::arg("calls") = std::vector<prof::MetricMap>(),
          nb::arg("device_metrics") = std::map<std::string, prof::MetricMap>(),
          nb::arg("configuration") = prof::MetricMap(),
          "A report from its rows: a list of dicts (one per call), a dict device name -> that "
          "device's totals, and a dict of run-wide settings.")
      .def_rw("calls", &prof::Report::calls,
              "One dict of metric name -> value per call, in call order.")
      .def_rw("device_metrics", &prof::Report::device_metrics,
              "Device name ('cpu0', ...) -> that device's 'Total' row.")
      .def_rw("configuration", &prof::Report::configuration,
              "Run-wide settings, e.g. 'Executor': 'VM', 'Number of threads': Count(n).")
      .def("table", &prof::Report::table, nb::arg("sort") = true, nb::arg("aggregate") = true,
           nb::arg("col_sums") = true,
           "The human-readable table, laid out as TVM's Report.table: calls grouped when "
           "`aggregate`, sorted by duration when `sort`, a Sum row when `col_sums`, the device "
           "totals and the configuration. Numbers group thousands with ',' whatever the locale.")
      .def("csv", &prof::Report::csv,
           "The calls as CSV, as TVM's Report.csv: a header of every metric name, then one line "
           "per call.")
      .def("json", &prof::Report::json,
           "The report as JSON in TVM's layout (Report.json; its AsJSON); Report.from_json reads "
           "it back.")
      .def("chrome_trace", &prof::Report::chrome_trace,
           "Chrome trace-event JSON for Perfetto or chrome://tracing: one track per device.")
      .def_static("from_json", &prof::Report::from_json, nb::arg("text"),
                  "Parses what json() writes (and the reference's AsJSON); ValueError saying "
                  "where for anything malformed.")
      .def("__str__", [](const prof::Report& r) { return r.table(); })
      .def("__repr__", &report_repr);

  nb::class_<PyCollector>(m, "_MetricCollector",
                          "Internal: a metric collector of the core (see "
                          "kiln.profiling.collector).")
      .def_prop_ro("name", [](const PyCollector& c) { return c.collector->name(); })
      .def("__repr__", [](const PyCollector& c) {
        return "<kiln.profiling collector '" + c.collector->name() + "'>";
      });

  m.def(
      "_plugin_collector",
      [](const std::string& name, std::optional<std::string> options_json) {
        return PyCollector{without_gil([&] { return plugin_collector_with(name, options_json); })};
      },
      nb::arg("name"), nb::arg("options_json").none() = nb::none(),
      "Internal: the collector `name` of a loaded plugin (kiln.NotFoundError listing those "
      "there are), or with `options_json`, of its plugin loaded afresh with those options.");

  m.def(
      "_python_collector",
      [](const std::string& name, nb::handle init, nb::handle start, nb::handle stop) {
        return PyCollector{
            std::make_shared<PythonCollector>(name, function_from_callable(init, name + ".init"),
                                              function_from_callable(start, name + ".start"),
                                              function_from_callable(stop, name + ".stop"))};
      },
      nb::arg("name"), nb::arg("init"), nb::arg("start"), nb::arg("stop"),
      "Internal: a collector calling back into Python (kiln.profiling.MetricCollector).");

  nb::class_<PyProfileFunction>(m, "_ProfileFunction",
                                "Internal: the core of kiln.profiling.ProfileFunction; call it "
                                "with the function's arguments to get a dict of the collectors' "
                                "metrics.")
      .def("__call__", &PyProfileFunction::call,
           "Runs the warm-up calls, then one call between the collectors' start and stop (the GIL "
           "released); returns their metrics merged (later collectors win on equal names).")
      .def("__repr__", [](const PyProfileFunction& p) {
        return "<kiln.profiling.ProfileFunction of '" + p.function_name + "'>";
      });

  m.def(
      "_profile_function",
      [](const Module& mod, Device dev, nb::handle collectors, const std::string& func_name,
         int32_t warmup_iters) {
        std::vector<std::shared_ptr<prof::MetricCollector>> list;
        for (nb::handle c : collectors) list.push_back(nb::cast<const PyCollector&>(c).collector);
        auto run = without_gil([&] {
          return prof::profile_function(mod, dev, std::move(list), func_name, warmup_iters);
        });
        return PyProfileFunction{std::move(run), func_name.empty() ? mod.entry_name() : func_name};
      },
      nb::arg("mod"), nb::arg("dev"), nb::arg("collectors"), nb::arg("func_name") = "",
      nb::arg("warmup_iters") = 10, "Internal: the core of kiln.profiling.profile_function.");

  m.def(
      "device_report_name",
      [](Device dev) { return prof::device_report_name(dev, runtime().device_types()); },
      nb::arg("dev"),
      "The name of `dev` in reports, as TVM names devices there: 'cpu0', 'cuda1', ...");
}

}  // namespace kiln::python
