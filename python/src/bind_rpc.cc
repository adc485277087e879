// SPDX-License-Identifier: Apache-2.0
// kiln.rpc's core (TVM's tvm.rpc, docs/rpc.md): RPCSession, RemoteModule, RemoteTimeEvaluator,
// TrackerSession and the two ways to open a session. Every call that talks to a server or a
// tracker runs with the GIL released. The Python layer (kiln/rpc.py) names them as TVM does.
#include <nanobind/stl/filesystem.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/set.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <mutex>
#include <set>
#include <string>
#include <utility>

#include "bindings.h"
#include "kiln/rpc/rpc_config.h"
#include "kiln/rpc/session.h"
#include "kiln/rpc/tracker.h"

namespace kiln::python {
namespace {

using std::chrono::milliseconds;

// A duration in seconds as given in Python, checked (`what` names it in the ValueError for a
// negative or non-finite one).
double checked_seconds(double seconds, const char* what) {
  if (!std::isfinite(seconds) || seconds < 0) {
    throw nb::value_error((std::string(what) + " must be a finite number of seconds >= 0, got " +
                           std::to_string(seconds))
                              .c_str());
  }
  return seconds;
}

milliseconds seconds_to_ms(double seconds, const char* what) {
  return std::chrono::duration_cast<milliseconds>(
      std::chrono::duration<double>(checked_seconds(seconds, what)));
}

// A remote time evaluator held by Python: the measurement loop runs on the server, so each
// call sends the arguments and gets back only the result.
struct PyRemoteTimeEvaluator {
  rpc::RemoteTimeEvaluator evaluator;
  std::string function_name;

  BenchmarkResult call(const nb::args& args) const {
    const std::vector<Any> values = to_anys(args);
    return without_gil([&] { return evaluator(values); });
  }
};

// ---- RPCSession ------------------------------------------------------------------------------

// The bytes of a Python bytes-like object (bytes, bytearray, memoryview).
std::string bytes_of(nb::handle data) {
  Py_buffer view;
  if (PyObject_GetBuffer(data.ptr(), &view, PyBUF_SIMPLE) != 0) throw nb::python_error();
  std::string out(static_cast<const char*>(view.buf), static_cast<size_t>(view.len));
  PyBuffer_Release(&view);
  return out;
}

bool is_bytes_like(nb::handle data) {
  return nb::isinstance<nb::bytes>(data) || nb::isinstance<nb::bytearray>(data) ||
         PyMemoryView_Check(data.ptr()) != 0;
}

// TVM's upload(data, target=None): a local file (str or os.PathLike; the target defaults to
// its base name) or bytes (then the target is required).
void upload(const rpc::RPCSession& s, nb::handle data, std::optional<std::string> target) {
  if (is_bytes_like(data)) {
    if (!target) throw nb::value_error("target must present when file is a bytearray");
    const std::string bytes = bytes_of(data);
    without_gil([&] { s.upload_bytes(bytes, *target); });
    return;
  }
  const std::filesystem::path local =
      nb::cast<std::string>(nb::module_::import_("os").attr("fspath")(data));
  const std::string remote = target ? *target : local.filename().string();
  without_gil([&] { s.upload(local, remote); });
}

std::string session_repr(const rpc::RPCSession& s) {
  return "<kiln.rpc.RPCSession " + s.peer() + " key='" + s.server_key() + "'" +
         (s.closed() ? " closed>" : ">");
}

void bind_session(nb::module_& m) {
  nb::class_<rpc::RPCSession>(
      m, "RPCSession",
      "A session with a `kiln rpc-server` (TVM's tvm.rpc.RPCSession): its devices, files in "
      "its work directory, modules loaded there and its global functions. Made by "
      "kiln.rpc.connect or TrackerSession.request; closed by close(), by `with`, or when the "
      "last reference (and every remote tensor and function of it) is gone. Safe to use from "
      "several threads (calls are serialised).")
      .def(
          "device",
          [](const rpc::RPCSession& s, const std::string& type, int32_t id) {
            return without_gil([&] { return s.device(type, id); });
          },
          nb::arg("dev_type"), nb::arg("dev_id") = 0,
          "The server's device `dev_type`:`dev_id` seen through this session (a remote device: "
          "kiln.empty(shape, dtype, dev) allocates on the server). `dev_type` is a name "
          "('cpu', 'cuda', 'opencl', ...) or a DLPack device type code.")
      .def(
          "device",
          [](const rpc::RPCSession& s, int32_t type, int32_t id) {
            return without_gil([&] { return s.device(type, id); });
          },
          nb::arg("dev_type"), nb::arg("dev_id") = 0)
      .def(
          "cpu",
          [](const rpc::RPCSession& s, int32_t id) {
            return without_gil([&] { return s.cpu(id); });
          },
          nb::arg("dev_id") = 0, "The server's CPU device `dev_id`.")
      .def(
          "cuda",
          [](const rpc::RPCSession& s, int32_t id) {
            return without_gil([&] { return s.device("cuda", id); });
          },
          nb::arg("dev_id") = 0, "The server's CUDA device `dev_id`.")
      .def(
          "opencl",
          [](const rpc::RPCSession& s, int32_t id) {
            return without_gil([&] { return s.device("opencl", id); });
          },
          nb::arg("dev_id") = 0, "The server's OpenCL device `dev_id` (TVM's sess.cl).")
      .def(
          "device_count",
          [](const rpc::RPCSession& s, const std::string& type) {
            return without_gil([&] { return s.device_count(type); });
          },
          nb::arg("dev_type"), "The number of devices of `dev_type` on the server (0: none).")
      .def("upload", &upload, nb::arg("data"), nb::arg("target") = nb::none(),
           "Writes a file into the session's work directory (TVM's upload): `data` is a local "
           "path (str or os.PathLike; `target` defaults to its base name) or bytes (then "
           "`target` is required). Overwrites. Paths leaving the work directory are refused "
           "with kiln.RPCError.")
      .def(
          "upload_bytes",
          [](const rpc::RPCSession& s, nb::handle data, const std::string& target) {
            const std::string bytes = bytes_of(data);
            without_gil([&] { s.upload_bytes(bytes, target); });
          },
          nb::arg("data"), nb::arg("target"),
          "Writes `data` (bytes-like) as the file `target` of the work directory.")
      .def(
          "download",
          [](const rpc::RPCSession& s, const std::string& path) {
            const std::string data = without_gil([&] { return s.download(path); });
            return nb::bytes(data.data(), data.size());
          },
          nb::arg("path"), "The contents of the work directory's file `path`, as bytes.")
      .def(
          "remove",
          [](const rpc::RPCSession& s, const std::string& path) {
            without_gil([&] { s.remove(path); });
          },
          nb::arg("path"),
          "Removes a file, or a directory with everything in it, from the work directory; a "
          "missing path is not an error.")
      .def(
          "listdir",
          [](const rpc::RPCSession& s, const std::string& path) {
            return without_gil([&] { return s.listdir(path); });
          },
          nb::arg("path") = "",
          "The names in a directory of the work directory ('' is the work directory itself), "
          "sorted; directories end with '/'.")
      .def(
          "load_module",
          [](const rpc::RPCSession& s, const std::string& path) {
            return without_gil([&] { return s.load_module(path); });
          },
          nb::arg("path"),
          "Loads the work directory's file `path` with the server's runtime (any format it "
          "reads: kernel libraries, TVM .so and .tar exports, ...); returns a RemoteModule.")
      .def(
          "get_function",
          [](const rpc::RPCSession& s, const std::string& name) {
            return without_gil([&] { return s.get_function(name); });
          },
          nb::arg("name"),
          "The server's global function `name` as a kiln.Function (calls run on the server; "
          "kiln.RPCError when it is not registered there).")
      .def(
          "close", [](const rpc::RPCSession& s) { without_gil([&] { s.close(); }); },
          "Ends the session (idempotent). Later calls raise RuntimeError('the RPC session "
          "with <host:port> is closed').")
      .def_prop_ro("closed", &rpc::RPCSession::closed,
                   "Whether the session has ended (closed, timed out, or the server is gone).")
      .def_prop_ro("peer", &rpc::RPCSession::peer, "'host:port' of the server.")
      .def_prop_ro("server_key", &rpc::RPCSession::server_key,
                   "The key the server announced: 'server:<key>'.")
      .def(
          "__enter__", [](nb::handle self) { return nb::borrow(self); },
          nb::sig("def __enter__(self) -> RPCSession"), "Returns the session itself.")
      .def(
          "__exit__",
          [](const rpc::RPCSession& s, nb::handle, nb::handle, nb::handle) {
            without_gil([&] { s.close(); });
          },
          nb::arg("exc_type").none(), nb::arg("exc_value").none(), nb::arg("traceback").none(),
          "Closes the session.")
      .def("__repr__", &session_repr);
}

// ---- RemoteModule ----------------------------------------------------------------------------

void bind_remote_module(nb::module_& m) {
  auto remote_module = nb::class_<rpc::RemoteModule>(
      m, "RemoteModule",
      "A module loaded on the server (RPCSession.load_module; TVM's RPC module): its functions "
      "are kiln.Functions that run there, called with remote tensors, ints, floats and strings.");
  def_time_evaluator(
      remote_module, "func_name",
      [](const rpc::RemoteModule& mod, const std::string& name, Device dev,
         TimeEvaluatorOptions options) {
        rpc::RemoteTimeEvaluator evaluator =
            without_gil([&] { return mod.time_evaluator(name, dev, std::move(options)); });
        return PyRemoteTimeEvaluator{std::move(evaluator), name};
      },
      "A RemoteTimeEvaluator that times `func_name` on `dev` (a device of this module's "
      "session), with kiln.Module.time_evaluator's parameters; the whole measurement loop runs "
      "on the server and each call returns a kiln.BenchmarkResult in seconds per call. "
      "`f_preproc` names a global function of the server.");
  auto get_function = [](const rpc::RemoteModule& mod, const std::string& name) {
    return without_gil([&] { return mod.get_function(name); });
  };
  remote_module
      .def("get_function", get_function, nb::arg("name"),
           "The function `name` of the module or of its imports (kiln.RPCError when absent).")
      .def("__getitem__", get_function, nb::arg("name"), "get_function(name).")
      .def(
          "__call__",
          [](const rpc::RemoteModule& mod, const nb::args& args) {
            Function entry = without_gil([&] { return mod.get_function(mod.entry_name()); });
            return call_from_python(entry, &PyTuple_GET_ITEM(args.ptr(), 0), args.size());
          },
          nb::sig("def __call__(self, *args: typing.Any) -> typing.Any"),
          "Calls the entry function (entry_name) on the server.")
      .def_prop_ro("entry_name", &rpc::RemoteModule::entry_name,
                   "The name of the module's entry function ('main' for TVM exports).")
      .def("__repr__", [](const rpc::RemoteModule& mod) {
        return "<kiln.rpc.RemoteModule entry='" + mod.entry_name() + "'>";
      });

  nb::class_<PyRemoteTimeEvaluator>(
      m, "RemoteTimeEvaluator",
      "Times one function of a remote module on the server (RemoteModule.time_evaluator): call "
      "it with the function's arguments (remote tensors, numbers) to get a BenchmarkResult.")
      .def("__call__", &PyRemoteTimeEvaluator::call,
           "Runs the measurement on the server (GIL released); returns a BenchmarkResult.")
      .def("__repr__", [](const PyRemoteTimeEvaluator& e) {
        return "<kiln.rpc.RemoteTimeEvaluator of '" + e.function_name + "'>";
      });
}

// ---- TrackerSession --------------------------------------------------------------------------

// The C++ TrackerSession is not thread-safe and has no close(): close() destroys the C++
// object inside its Python instance (which is then "not ready"), and a call made while
// another thread's call on the same session is running is refused instead of racing.
std::mutex busy_mutex;
std::set<const void*> busy_sessions;

// The C++ session inside `self`, or a ValueError once it is closed.
rpc::TrackerSession& open_tracker(nb::handle self) {
  if (!nb::isinstance<rpc::TrackerSession>(self)) throw nb::type_error("not a TrackerSession");
  if (!nb::inst_ready(self)) throw nb::value_error("the TrackerSession is closed");
  return *nb::inst_ptr<rpc::TrackerSession>(self);
}

bool tracker_closed(nb::handle self) {
  if (!nb::isinstance<rpc::TrackerSession>(self)) throw nb::type_error("not a TrackerSession");
  return !nb::inst_ready(self);
}

// One call on an open session, refused while another thread's call on it is running. Made
// and destroyed with the GIL held.
class TrackerCall {
 public:
  explicit TrackerCall(nb::handle self) : session_(&open_tracker(self)) {
    std::lock_guard<std::mutex> lock(busy_mutex);
    if (!busy_sessions.insert(session_).second) {
      throw nb::value_error(
          "the TrackerSession is in use by another thread (it is not thread-safe: use one "
          "per thread)");
    }
  }
  ~TrackerCall() {
    std::lock_guard<std::mutex> lock(busy_mutex);
    busy_sessions.erase(session_);
  }
  TrackerCall(const TrackerCall&) = delete;
  TrackerCall& operator=(const TrackerCall&) = delete;

  rpc::TrackerSession& session() const { return *session_; }

 private:
  rpc::TrackerSession* session_;
};

void close_tracker(nb::handle self) {
  if (tracker_closed(self)) return;
  {
    TrackerCall call(self);  // refuses while another thread uses it
  }
  nb::inst_destruct(self);  // ~TrackerSession closes the connection
}

nb::dict summary_dict(const rpc::TrackerSummary& summary) {
  return nb::cast<nb::dict>(nb::module_::import_("json").attr("loads")(
      nb::str(summary.json.data(), summary.json.size())));
}

void bind_tracker(nb::module_& m) {
  nb::class_<rpc::TrackerSession>(
      m, "TrackerSession",
      "A connection to an RPC tracker (TVM's tvm.rpc.TrackerSession, from "
      "kiln.rpc.connect_tracker): its summary, and requests for a free server by key. Not "
      "thread-safe (a concurrent call from another thread is refused); close() or `with` ends "
      "the connection.")
      .def(
          "summary",
          [](nb::handle self) {
            TrackerCall call(self);
            rpc::TrackerSummary summary = without_gil([&] { return call.session().summary(); });
            return summary_dict(summary);
          },
          "The tracker's SUMMARY as TVM returns it: {'queue_info': {key: {'free': n, "
          "'pending': m}}, 'server_info': [{'key': 'server:<key>', 'addr': [host, port]}, "
          "...]}.")
      .def(
          "text_summary",
          [](nb::handle self) {
            TrackerCall call(self);
            return without_gil([&] { return call.session().text_summary(); });
          },
          "The summary as text, in TVM's query_rpc_tracker layout (servers, then queues).")
      .def(
          "request",
          [](nb::handle self, const std::string& key, int priority, double session_timeout,
             int max_retry, std::optional<double> wait, const std::string& token) {
            const double timeout = checked_seconds(session_timeout, "session_timeout");
            std::optional<milliseconds> bound;
            if (wait) bound = seconds_to_ms(*wait, "wait");
            if (max_retry < 1) throw nb::value_error("max_retry must be at least 1");
            TrackerCall call(self);
            return without_gil([&] {
              return call.session().request(runtime(), key, priority, timeout, max_retry, bound,
                                            token);
            });
          },
          nb::arg("key"), nb::arg("priority") = 1, nb::arg("session_timeout") = 0,
          nb::arg("max_retry") = 5, nb::arg("wait") = nb::none(), nb::arg("token") = "",
          "An RPCSession with a free server registered under `key` (TVM's request): higher "
          "`priority` is served first; `session_timeout` seconds bound the session (0: "
          "unlimited). Without `wait` this blocks until the tracker grants a server, as TVM "
          "does; with `wait` (seconds), kiln.NotFoundError when none is granted in time. "
          "`token` is the servers' shared token. RuntimeError after `max_retry` failed "
          "attempts.")
      .def(
          "ping",
          [](nb::handle self) {
            TrackerCall call(self);
            return without_gil([&] { return call.session().ping(); });
          },
          "True when the tracker answers PING.")
      .def(
          "stop",
          [](nb::handle self, const std::string& stop_key) {
            TrackerCall call(self);
            return without_gil([&] { return call.session().stop(stop_key); });
          },
          nb::arg("stop_key"),
          "Asks the tracker to stop (STOP with the key its starter holds); True when accepted.")
      .def("close", &close_tracker, "Closes the connection to the tracker (idempotent).")
      .def_prop_ro("closed", &tracker_closed, "Whether close() was called.")
      // host and port never change: read without the busy check.
      .def_prop_ro(
          "host", [](nb::handle self) { return open_tracker(self).host(); }, "The tracker's host.")
      .def_prop_ro(
          "port", [](nb::handle self) { return open_tracker(self).port(); }, "The tracker's port.")
      .def(
          "__enter__", [](nb::handle self) { return nb::borrow(self); },
          nb::sig("def __enter__(self) -> TrackerSession"), "Returns the session itself.")
      .def(
          "__exit__",
          [](nb::handle self, nb::handle, nb::handle, nb::handle) { close_tracker(self); },
          nb::arg("exc_type").none(), nb::arg("exc_value").none(), nb::arg("traceback").none(),
          "Closes the connection.")
      .def("__repr__", [](nb::handle self) -> std::string {
        if (tracker_closed(self)) return "<kiln.rpc.TrackerSession closed>";
        const rpc::TrackerSession& t = open_tracker(self);
        return "<kiln.rpc.TrackerSession " + t.host() + ":" + std::to_string(t.port()) + ">";
      });
}

}  // namespace

void bind_rpc(nb::module_& m) {
  bind_session(m);
  bind_remote_module(m);
  bind_tracker(m);

  m.def(
      "_rpc_connect",
      [](const std::string& host, int port, const std::string& key, double session_timeout,
         const std::string& token, double connect_timeout) {
        rpc::ConnectOptions options;
        options.key = key;
        options.session_timeout_s = checked_seconds(session_timeout, "session_timeout");
        options.token = token;
        options.connect_timeout = seconds_to_ms(connect_timeout, "connect_timeout");
        return without_gil([&] { return rpc::connect(host, port, options, runtime()); });
      },
      nb::arg("host"), nb::arg("port"), nb::arg("key") = "", nb::arg("session_timeout") = 0,
      nb::arg("token") = "", nb::arg("connect_timeout") = 10, "Internal: kiln.rpc.connect.");

  m.def(
      "_rpc_local_session",
      [] { return without_gil([] { return rpc::local_session(runtime()); }); },
      "Internal: kiln.rpc.LocalSession.");
  m.def(
      "_random_key",
      [](const std::string& prefix, const std::set<std::string>& used) {
        return rpc::random_key(prefix, used);
      },
      nb::arg("prefix"), nb::arg("used"), "Internal: kiln.rpc.random_key.");
  m.def(
      "_split_random_key", [](const std::string& key) { return rpc::split_random_key(key); },
      nb::arg("key"), "Internal: kiln.rpc.split_random_key.");

  m.def(
      "_rpc_connect_tracker",
      [](const std::string& host, int port, double connect_timeout,
         const std::string& tracker_token) {
        const milliseconds timeout = seconds_to_ms(connect_timeout, "connect_timeout");
        return without_gil(
            [&] { return rpc::connect_tracker(host, port, timeout, tracker_token); });
      },
      nb::arg("host"), nb::arg("port"), nb::arg("connect_timeout") = 10,
      nb::arg("tracker_token") = "",
      "Internal: kiln.rpc.connect_tracker (tracker_token: '' for none; kiln.rpc resolves None "
      "with _rpc_resolve_token).");
  m.def(
      "_rpc_resolve_token",
      [](std::optional<std::string> value, std::optional<std::filesystem::path> file,
         const std::string& variable) {
        rpc::TokenSource source;
        source.value = std::move(value);
        source.file = std::move(file);
        if (variable == "rpc") {
          source.variable = rpc::TokenVariable::kRpc;
        } else if (variable == "tracker") {
          source.variable = rpc::TokenVariable::kTracker;
        } else if (!variable.empty()) {
          throw ValueError("_rpc_resolve_token: variable must be 'rpc', 'tracker' or '', got '" +
                           variable + "'");
        }
        return rpc::resolve_token(source);
      },
      nb::arg("value").none() = nb::none(), nb::arg("file").none() = nb::none(),
      nb::arg("variable") = "",
      "Internal: kiln::rpc::resolve_token (kiln/rpc/rpc_config.h): value, else the file's first "
      "line, else $KILN_RPC_TOKEN ('rpc') or $KILN_TRACKER_TOKEN ('tracker'), else ''.");
}

}  // namespace kiln::python
