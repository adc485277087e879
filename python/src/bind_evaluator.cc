// SPDX-License-Identifier: Apache-2.0
// kiln.BenchmarkResult and kiln.TimeEvaluator (what Module.time_evaluator returns).
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <memory>

#include "bindings.h"

namespace kiln::python {

BenchmarkResult PyTimeEvaluator::call(const nb::args& args) const {
  std::vector<Any> values = to_anys(args);
  return without_gil([&] { return (*evaluator)(values); });
}

TimeEvaluatorOptions evaluator_options(int32_t number, int32_t repeat, int32_t min_repeat_ms,
                                       int32_t limit_zero_time_iterations,
                                       int32_t cooldown_interval_ms, int32_t repeats_to_cooldown,
                                       int64_t cache_flush_bytes, const std::string& f_preproc) {
  TimeEvaluatorOptions options;
  options.number = number;
  options.repeat = repeat;
  options.min_repeat_ms = min_repeat_ms;
  options.limit_zero_time_iterations = limit_zero_time_iterations;
  options.cooldown_interval_ms = cooldown_interval_ms;
  options.repeats_to_cooldown = repeats_to_cooldown;
  options.cache_flush_bytes = cache_flush_bytes;
  options.f_preproc = f_preproc;
  options.validate();
  return options;
}

PyTimeEvaluator make_time_evaluator(Function f, Device device, TimeEvaluatorOptions options) {
  // Ctrl-C is noticed between repeats (the loop runs without the GIL).
  options.on_repeat = [](int32_t, int32_t) { check_interrupt(); };
  PyTimeEvaluator py;
  py.function_name = f.name();
  py.evaluator =
      std::make_unique<TimeEvaluator>(std::move(f), device, std::move(options), runtime());
  return py;
}

void bind_evaluator(nb::module_& m) {
  nb::class_<BenchmarkResult>(m, "BenchmarkResult",
                              "Per-repeat times in seconds per call and their statistics "
                              "(mean, median, min, max, std); str() and repr() print as TVM's "
                              "BenchmarkResult does.")
      .def(nb::init<std::vector<double>>(), nb::arg("results"))
      .def_prop_ro(
          "results", [](const BenchmarkResult& r) { return nb::tuple(nb::cast(r.results())); },
          "Seconds per call, one per repeat.")
      .def_prop_ro("mean", &BenchmarkResult::mean)
      .def_prop_ro("median", &BenchmarkResult::median)
      .def_prop_ro("min",
                   [](const BenchmarkResult& r) {
                     if (r.results().empty()) throw nb::value_error("min of no results");
                     return r.min();
                   })
      .def_prop_ro("max",
                   [](const BenchmarkResult& r) {
                     if (r.results().empty()) throw nb::value_error("max of no results");
                     return r.max();
                   })
      .def_prop_ro("std", &BenchmarkResult::std, "Population standard deviation (ddof 0).")
      .def_ro("timer", &BenchmarkResult::timer,
              "'device' (the backend's timer) or 'wall' (synchronise + host clock).")
      .def_ro("numbers", &BenchmarkResult::numbers, "Calls per repeat in each final batch.")
      .def_ro("name", &BenchmarkResult::name, "The function measured.")
      .def_ro("device", &BenchmarkResult::device)
      .def("to_json", &BenchmarkResult::to_json,
           "Google Benchmark's JSON (readable by its compare.py).")
      .def_static("from_json", &BenchmarkResult::from_json, nb::arg("text"))
      .def("__str__", &BenchmarkResult::to_string)
      .def("__repr__", &BenchmarkResult::repr);

  m.def(
      "time_evaluator",
      [](nb::handle func, Device dev, int32_t number, int32_t repeat, int32_t min_repeat_ms,
         int32_t limit_zero_time_iterations, int32_t cooldown_interval_ms,
         int32_t repeats_to_cooldown, int64_t cache_flush_bytes, const std::string& f_preproc) {
        // A name is a global function (the reference's evaluator with no module).
        Function f = nb::isinstance<nb::str>(func) ? registry::require(nb::cast<std::string>(func))
                                                   : to_any(func, "func").cast<Function>();
        return make_time_evaluator(
            std::move(f), dev,
            evaluator_options(number, repeat, min_repeat_ms, limit_zero_time_iterations,
                              cooldown_interval_ms, repeats_to_cooldown, cache_flush_bytes,
                              f_preproc));
      },
      nb::arg("func"), nb::arg("dev"), nb::arg("number") = 10, nb::arg("repeat") = 1,
      nb::arg("min_repeat_ms") = 0, nb::arg("limit_zero_time_iterations") = 100,
      nb::arg("cooldown_interval_ms") = 0, nb::arg("repeats_to_cooldown") = 1,
      nb::arg("cache_flush_bytes") = 0, nb::arg("f_preproc") = "",
      "Module.time_evaluator for one function: a kiln.Function, any Python callable, or the "
      "name of a global function (a registered one, as TVM's time_evaluator takes with no "
      "module). Returns a kiln.TimeEvaluator.");

  nb::class_<PyTimeEvaluator>(m, "TimeEvaluator",
                              "Times one function: call it with the function's arguments "
                              "(already on the device) to get a BenchmarkResult.")
      .def("__call__", &PyTimeEvaluator::call)
      .def_prop_ro(
          "number", [](const PyTimeEvaluator& e) { return e.evaluator->number(); },
          "Calls per batch now (grown by earlier calls when min_repeat_ms is set).")
      .def("__repr__", [](const PyTimeEvaluator& e) {
        return "<kiln.TimeEvaluator of '" + e.function_name + "'>";
      });
}

}  // namespace kiln::python
