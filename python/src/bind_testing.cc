// SPDX-License-Identifier: Apache-2.0
// kiln.testing's core: local_run and rpc_run (TVM's tvm.testing ones) and RPCConfig. The
// Python layer (kiln/testing.py) normalises TVM modules and configs and converts outputs to
// numpy; everything the reference specifies (order, messages, cleanup) happens in the core.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/variant.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "kiln/ab_run.h"
#include "kiln/measurement_worker.h"
#include "kiln/rpc/fan_out.h"
#include "kiln/rpc/rpc_config.h"
#include "kiln/temp_dir.h"
#include "kiln/testing.h"

namespace kiln::python {
namespace {

// A Python attribute of `config`, or nullopt when missing or None.
template <typename T>
std::optional<T> optional_attr(nb::handle config, const char* name) {
  if (config.is_none() || !nb::hasattr(config, name)) return std::nullopt;
  nb::object value = config.attr(name);
  if (value.is_none()) return std::nullopt;
  return nb::cast<T>(value);
}

// An EvaluatorConfig from any object with its fields (kiln's or TVM's), or nullopt for None.
std::optional<EvaluatorConfig> evaluator_config_from(nb::handle config) {
  if (config.is_none()) return std::nullopt;
  EvaluatorConfig out;
  out.number = optional_attr<int32_t>(config, "number").value_or(out.number);
  out.repeat = optional_attr<int32_t>(config, "repeat").value_or(out.repeat);
  out.min_repeat_ms = optional_attr<int32_t>(config, "min_repeat_ms").value_or(out.min_repeat_ms);
  out.enable_cpu_cache_flush =
      optional_attr<bool>(config, "enable_cpu_cache_flush").value_or(out.enable_cpu_cache_flush);
  return out;
}

// The port as given: an int, or text the reference converts with int().
std::optional<int> port_from(nb::handle port) {
  if (port.is_none()) return std::nullopt;
  if (nb::isinstance<nb::str>(port)) {
    return rpc::RPCConfig::parse_port(nb::cast<std::string>(port), "RPCConfig.tracker_port");
  }
  return nb::cast<int>(port);
}

// An RPCConfig from kiln's class or any object with the reference's fields (TVM's
// RPCConfig), or nullopt for None.
std::optional<rpc::RPCConfig> rpc_config_from(nb::handle config) {
  if (config.is_none()) return std::nullopt;
  if (nb::isinstance<rpc::RPCConfig>(config)) return nb::cast<rpc::RPCConfig>(config);
  rpc::RPCConfig out;
  out.tracker_host = optional_attr<std::string>(config, "tracker_host");
  if (nb::hasattr(config, "tracker_port"))
    out.tracker_port = port_from(config.attr("tracker_port"));
  out.tracker_key = optional_attr<std::string>(config, "tracker_key");
  out.session_priority = optional_attr<int>(config, "session_priority").value_or(1);
  out.session_timeout_sec = optional_attr<int>(config, "session_timeout_sec").value_or(10);
  out.token = optional_attr<std::string>(config, "token").value_or("");
  out.request_wait_sec = optional_attr<double>(config, "request_wait_sec");
  return out;
}

// The exporter: a name, or a Python callable f(path) (kiln/testing.py binds the user's
// f(mod, path) to the module object), called under the GIL through a Function.
testing::ExportFunc export_func_from(nb::handle export_func) {
  if (nb::isinstance<nb::str>(export_func)) return nb::cast<std::string>(export_func);
  if (PyCallable_Check(export_func.ptr()) == 0) {
    throw nb::value_error(
        ("Unsupported export_func: " + nb::cast<std::string>(nb::repr(export_func))).c_str());
  }
  Function f = function_from_callable(export_func, "export_func");
  return testing::ExportFunction([f](const Module&, const std::string& path) { f(path); });
}

// What both runners return to Python: the arguments after the final call (host tensors and
// scalars, converted to numpy by kiln/testing.py) and the BenchmarkResult.
nb::tuple run_result(const testing::RunResult& result) {
  nb::list outputs;
  for (const Any& value : result.outputs) outputs.append(from_any(value));
  return nb::make_tuple(outputs, nb::cast(result.profile));
}

// What both runners take from Python, converted before the GIL is released.
struct RunInputs {
  Module module;  // a kiln.Module, or empty when a callable exports a foreign module
  std::vector<Any> args;
  std::optional<EvaluatorConfig> config;
  testing::ExportFunc exporter;
};
RunInputs run_inputs(nb::handle mod, nb::handle args, nb::handle config, nb::handle export_func) {
  return {nb::isinstance<Module>(mod) ? nb::cast<Module>(mod) : Module(), to_anys(args),
          evaluator_config_from(config), export_func_from(export_func)};
}

// The Python exception object that stands for `error`, made under the GIL on the thread that
// ran the work: an exception a Python exporter raised there comes back as itself (its
// pending copy is thread-local), any other error as the translator raises it.
nb::object python_exception_of(const std::exception_ptr& error) {
  try {
    try {
      std::rethrow_exception(error);
    } catch (const kiln::Error& e) {
      detail::rethrow_pending_python_error(e);  // throws the Python exception when it is one
      throw;
    }
  } catch (nb::python_error& e) {
    return nb::borrow(e.value());
  } catch (...) {
    set_python_error(std::current_exception());
    nb::python_error taken;
    return nb::borrow(taken.value());
  }
}

// One task of run_many, converted before the GIL is released.
struct ManyTask {
  RunInputs in;
  std::string device_type;
  std::optional<std::string> output_format;
};

}  // namespace

void bind_testing(nb::module_& m) {
  m.def(
      "_remove_stale_temporary_directories",
      [] { return without_gil([] { return kiln::remove_stale_temporary_directories(); }); },
      "Internal: removes the kiln_* temporary directories of processes that are gone (killed "
      "before they could clean up), as the kiln tool does at start; returns how many. "
      "kiln.testing's runners call it once per process.");

  m.def(
      "_local_run",
      [](nb::handle mod, const std::string& device_type, nb::handle args, nb::handle config,
         nb::handle export_func, std::optional<std::string> output_format) {
        const RunInputs in = run_inputs(mod, args, config, export_func);
        testing::RunHooks hooks;  // Ctrl-C is noticed between repeats
        hooks.on_repeat = [](int32_t, int32_t) { check_interrupt(); };
        testing::RunResult result = without_gil([&] {
          return testing::local_run(runtime(), in.module, device_type, in.args, in.config,
                                    in.exporter, output_format, hooks);
        });
        return run_result(result);
      },
      nb::arg("mod"), nb::arg("device_type"), nb::arg("args"), nb::arg("evaluator_config").none(),
      nb::arg("export_func"), nb::arg("output_format").none(),
      "Internal: kiln.testing.local_run without the numpy conversion.");

  m.def(
      "_rpc_run",
      [](nb::handle mod, const std::string& device_type, nb::handle args, nb::handle config,
         nb::handle rpc_config, nb::handle export_func, std::optional<std::string> output_format) {
        const RunInputs in = run_inputs(mod, args, config, export_func);
        const auto rpc = rpc_config_from(rpc_config);
        testing::RunResult result = without_gil([&] {
          return testing::rpc_run(runtime(), in.module, device_type, in.args, in.config, rpc,
                                  in.exporter, output_format);
        });
        nb::tuple outputs_and_profile = run_result(result);
        return nb::make_tuple(outputs_and_profile[0], outputs_and_profile[1], result.server);
      },
      nb::arg("mod"), nb::arg("device_type"), nb::arg("args"), nb::arg("evaluator_config").none(),
      nb::arg("rpc_config").none(), nb::arg("export_func"), nb::arg("output_format").none(),
      "Internal: kiln.testing.rpc_run without the numpy conversion; also returns the server "
      "(host:port) that measured.");

  m.def(
      "_rpc_run_many",
      [](nb::handle calls, nb::handle rpc_config, int jobs, int max_retries) {
        std::vector<ManyTask> tasks;
        for (nb::handle call : calls) {
          // (mod, device_type, args, evaluator_config, export_func, output_format)
          const nb::tuple c = nb::cast<nb::tuple>(call);
          const nb::handle format = c[5];
          tasks.push_back(
              {run_inputs(c[0], c[2], c[3], c[4]), nb::cast<std::string>(c[1]),
               format.is_none() ? std::nullopt : std::optional(nb::cast<std::string>(format))});
        }
        const auto rpc = rpc_config_from(rpc_config);
        // One (outputs, profile, server, error, lost, gave_up) per task, filled under the GIL
        // by the thread that ran it.
        std::vector<nb::object> outcomes(tasks.size());
        without_gil([&] {
          rpc::fan_out(tasks.size(), jobs, [&](size_t i) {
            const ManyTask& t = tasks[i];
            testing::RunResult result;
            const rpc::Attempts attempts = rpc::attempt_with_retries(
                [&] {
                  result = testing::rpc_run(runtime(), t.in.module, t.device_type, t.in.args,
                                            t.in.config, rpc, t.in.exporter, t.output_format);
                },
                max_retries);
            nb::gil_scoped_acquire gil;
            nb::list lost;
            for (const std::string& message : attempts.lost) lost.append(message);
            if (attempts.error) {
              outcomes[i] =
                  nb::make_tuple(nb::none(), nb::none(), nb::none(),
                                 python_exception_of(attempts.error), lost, attempts.gave_up);
            } else {
              nb::tuple outputs_and_profile = run_result(result);
              outcomes[i] = nb::make_tuple(outputs_and_profile[0], outputs_and_profile[1],
                                           result.server, nb::none(), lost, false);
            }
          });
        });
        nb::list out;
        for (nb::object& outcome : outcomes) out.append(outcome);
        return out;
      },
      nb::arg("calls"), nb::arg("rpc_config").none(), nb::arg("jobs"), nb::arg("max_retries"),
      "Internal: kiln.testing.run_many's fan-out (kiln/rpc/fan_out.h): each call (the "
      "arguments of _rpc_run but rpc_config) on a server of its own, `jobs` at once, tried again "
      "up to max_retries times on another server when its server is lost (RPCServerLostError). "
      "Returns one (outputs, profile, server, error, lost, gave_up) per call, in their order.");

  nb::class_<testing::MeasurementWorker>(
      m, "_Worker",
      "Internal: kiln.testing.Worker's core, a measurement worker process (kiln/measurement_"
      "worker.h).")
      .def(
          "__init__",
          [](testing::MeasurementWorker* self, std::optional<double> timeout) {
            testing::WorkerOptions options;
            options.timeout_s = timeout.value_or(0);
            new (self) testing::MeasurementWorker(runtime(), options);
          },
          nb::arg("timeout").none())
      .def(
          "run",
          [](testing::MeasurementWorker& self, nb::handle mod, const std::string& device_type,
             nb::handle args, nb::handle config, nb::handle export_func,
             std::optional<std::string> output_format) {
            const RunInputs in = run_inputs(mod, args, config, export_func);
            testing::RunResult result = without_gil([&] {
              return self.run(in.module, device_type, in.args, in.config, in.exporter,
                              output_format);
            });
            return run_result(result);
          },
          nb::arg("mod"), nb::arg("device_type"), nb::arg("args"),
          nb::arg("evaluator_config").none(), nb::arg("export_func"),
          nb::arg("output_format").none())
      .def(
          "run_file",
          [](testing::MeasurementWorker& self, const std::string& path,
             const std::string& device_type, nb::handle args, nb::handle config,
             std::optional<std::string> function) {
            const std::vector<Any> converted = to_anys(args);
            const std::optional<EvaluatorConfig> evaluator = evaluator_config_from(config);
            testing::RunHooks hooks;
            hooks.function = function.value_or("");
            testing::RunResult result = without_gil(
                [&] { return self.run_artifact(path, device_type, converted, evaluator, hooks); });
            return run_result(result);
          },
          nb::arg("path"), nb::arg("device_type"), nb::arg("args"),
          nb::arg("evaluator_config").none(), nb::arg("function").none())
      .def("close", [](testing::MeasurementWorker& self) { without_gil([&] { self.close(); }); })
      .def_prop_ro("pid", [](const testing::MeasurementWorker& self) { return self.pid(); })
      .def_prop_ro("starts", [](const testing::MeasurementWorker& self) { return self.starts(); });

  nb::class_<testing::ModuleIdentity>(
      m, "ModuleIdentity",
      "A side's module in kiln.testing.ab_run: the file it was loaded from and the SHA-256 of its "
      "content (kiln/ab_run.h).")
      .def_ro("file", &testing::ModuleIdentity::file)
      .def_ro("sha256", &testing::ModuleIdentity::sha256)
      .def_ro("hashed", &testing::ModuleIdentity::hashed)
      .def("__repr__", [](const testing::ModuleIdentity& id) {
        return "ModuleIdentity(file='" + id.file + "', sha256='" + id.sha256 + "')";
      });

  nb::class_<testing::AbResult>(
      m, "AbResult",
      "What kiln.testing.ab_run measured: per-round seconds per call of each side, the ratio "
      "B/A with its interval and the verdict (kiln/ab_run.h).")
      .def_ro("a_seconds", &testing::AbResult::a_seconds)
      .def_ro("b_seconds", &testing::AbResult::b_seconds)
      .def_ro("b_first", &testing::AbResult::b_first)
      .def_ro("a_pressure", &testing::AbResult::a_pressure)
      .def_ro("b_pressure", &testing::AbResult::b_pressure)
      .def_ro("seed", &testing::AbResult::seed)
      .def_ro("a_module", &testing::AbResult::a_module)
      .def_ro("b_module", &testing::AbResult::b_module)
      .def_ro("same_module", &testing::AbResult::same_module)
      .def_ro("differences", &testing::AbResult::differences)
      .def_ro("looks", &testing::AbResult::looks)
      .def_ro("planned_looks", &testing::AbResult::planned_looks)
      .def_ro("ratio", &testing::AbResult::ratio)
      .def_ro("low", &testing::AbResult::low)
      .def_ro("high", &testing::AbResult::high)
      .def_ro("confidence", &testing::AbResult::confidence)
      .def_ro("verdict", &testing::AbResult::verdict)
      .def_ro("significant", &testing::AbResult::significant)
      .def_ro("detectable", &testing::AbResult::detectable)
      .def_ro("reason", &testing::AbResult::reason)
      .def_ro("rounds_to_decide", &testing::AbResult::rounds_to_decide)
      .def("__repr__", [](const testing::AbResult& r) {
        return "AbResult(verdict='" + r.verdict + "', ratio=" + std::to_string(r.ratio) +
               ", low=" + std::to_string(r.low) + ", high=" + std::to_string(r.high) +
               ", rounds=" + std::to_string(r.a_seconds.size()) + ")";
      });

  m.def(
      "_ab_run",
      [](const Module& mod_a, const Module& mod_b, const std::string& device_type,
         nb::handle args_a, nb::handle args_b, nb::handle config,
         const std::optional<std::string>& function_a, const std::optional<std::string>& function_b,
         int32_t rounds, int32_t max_rounds, double threshold, double confidence,
         std::optional<uint64_t> seed) {
        Runtime& rt = runtime();
        const Device device = rt.parse_device(device_type);
        testing::AbSide a, b;
        a.module = mod_a;
        b.module = mod_b;
        a.function = function_a.value_or("");
        b.function = function_b.value_or(a.function);
        a.device = b.device = device;
        a.args = to_anys(args_a);
        b.args = to_anys(args_b);
        a.evaluator_config = b.evaluator_config = evaluator_config_from(config);
        a.context = b.context = &rt;
        testing::AbOptions options;
        options.rounds = rounds;
        options.max_rounds = max_rounds;
        options.threshold = threshold;
        options.confidence = confidence;
        options.seed = seed;
        options.on_round = [](int32_t, int32_t) { check_interrupt(); };  // Ctrl-C between rounds
        return without_gil([&] { return testing::ab_run(a, b, options); });
      },
      nb::arg("mod_a"), nb::arg("mod_b"), nb::arg("device_type"), nb::arg("args_a"),
      nb::arg("args_b"), nb::arg("evaluator_config").none(), nb::arg("function_a").none(),
      nb::arg("function_b").none(), nb::arg("rounds"), nb::arg("max_rounds"), nb::arg("threshold"),
      nb::arg("confidence"), nb::arg("seed").none(),
      "Internal: kiln.testing.ab_run on two loaded kiln.Modules.");

  nb::class_<rpc::RPCConfig>(m, "RPCConfig",
                             "Where rpc_run finds a remote device, as TVM's RPCConfig: a "
                             "tracker, a key, a priority and a session timeout. Unset fields "
                             "fall back to "
                             "KILN_TRACKER_HOST/_PORT/_KEY, then TVM_TRACKER_HOST/_PORT/_KEY.")
      .def(
          "__init__",
          [](rpc::RPCConfig* self, std::optional<std::string> tracker_host, nb::handle tracker_port,
             std::optional<std::string> tracker_key, int session_priority, int session_timeout_sec,
             std::string token, std::optional<double> request_wait_sec) {
            auto* c = new (self) rpc::RPCConfig();
            c->tracker_host = std::move(tracker_host);
            c->tracker_port = port_from(tracker_port);
            c->tracker_key = std::move(tracker_key);
            c->session_priority = session_priority;
            c->session_timeout_sec = session_timeout_sec;
            c->token = std::move(token);
            c->request_wait_sec = request_wait_sec;
          },
          nb::arg("tracker_host") = nb::none(), nb::arg("tracker_port") = nb::none(),
          nb::arg("tracker_key") = nb::none(), nb::arg("session_priority") = 1,
          nb::arg("session_timeout_sec") = 10, nb::arg("token") = "",
          nb::arg("request_wait_sec") = nb::none())
      .def_ro("tracker_host", &rpc::RPCConfig::tracker_host)
      .def_ro("tracker_port", &rpc::RPCConfig::tracker_port)
      .def_ro("tracker_key", &rpc::RPCConfig::tracker_key)
      .def_ro("session_priority", &rpc::RPCConfig::session_priority)
      .def_ro("session_timeout_sec", &rpc::RPCConfig::session_timeout_sec)
      .def_ro("token", &rpc::RPCConfig::token)
      .def_ro("request_wait_sec", &rpc::RPCConfig::request_wait_sec)
      .def_static(
          "_normalized",
          [](nb::handle config) { return rpc::RPCConfig::normalized(rpc_config_from(config)); },
          nb::arg("config").none(),
          "The reference's normalisation: environment fallbacks, then ValueError for the first "
          "missing field (host, port, key).")
      .def(
          "connect_tracker",
          [](const rpc::RPCConfig& c) { return without_gil([&] { return c.connect_tracker(); }); },
          "A TrackerSession, within session_timeout_sec (ValueError saying how to query the "
          "tracker otherwise).")
      .def(
          "connect_server",
          [](const rpc::RPCConfig& c) {
            return without_gil([&] { return c.connect_server(runtime()); });
          },
          "connect_tracker() then a request for a server with tracker_key.")
      .def(
          "count_num_servers",
          [](const rpc::RPCConfig& c, bool allow_missing) {
            return without_gil([&] { return c.count_num_servers(allow_missing); });
          },
          nb::arg("allow_missing") = true)
      .def("__repr__", [](const rpc::RPCConfig& c) {
        auto text = [](const std::optional<std::string>& v) {
          return v ? "'" + *v + "'" : std::string("None");
        };
        return "RPCConfig(tracker_host=" + text(c.tracker_host) +
               ", tracker_port=" + (c.tracker_port ? std::to_string(*c.tracker_port) : "None") +
               ", tracker_key=" + text(c.tracker_key) +
               ", session_priority=" + std::to_string(c.session_priority) +
               ", session_timeout_sec=" + std::to_string(c.session_timeout_sec) + ")";
      });
}

}  // namespace kiln::python
