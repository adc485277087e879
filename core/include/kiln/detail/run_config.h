// SPDX-License-Identifier: Apache-2.0
// Run configurations for `kiln run RUN.yaml`: which module and function to run, on which device,
// how to time it, its arguments (.npy files, generated tensors, scalars) and the checks on its
// outputs. parse_run_config() reads and validates the YAML, make_inputs() builds the arguments,
// check_outputs() compares and saves the results. The YAML format is documented in
// docs/run-config.md.
// Not installed (kiln/detail/, docs/architecture.md "The public surface"): libkiln implements it
// for `kiln run`, `kiln profile` and the tests; no API or ABI promise.
#ifndef KILN_DETAIL_RUN_CONFIG_H_
#define KILN_DETAIL_RUN_CONFIG_H_

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kiln/any.h"
#include "kiln/config_error.h"
#include "kiln/detail/throughput.h"
#include "kiln/dtype.h"
#include "kiln/evaluator.h"
#include "kiln/tensor.h"

namespace kiln::run {

// One positional argument of the function run.
struct InputSpec {
  // Where the argument comes from.
  enum class Kind {
    kNpy,        // a .npy file, read with Tensor::load_npy
    kGenerated,  // a tensor of `shape` and `dtype` filled as `init` says
    kScalar,     // an int64, double or bool value (`scalar`)
  };
  // How a generated tensor is filled.
  enum class Init {
    kZeros,   // all 0 (false)
    kOnes,    // all 1 (true)
    kRandom,  // uniform in [low, high), from std::mt19937_64 seeded with `seed`
    kArange,  // element i (row-major) is start + i * step
  };

  std::string name;  // label used by outputs and messages; "arg<i>" when the YAML has none
  Kind kind = Kind::kGenerated;
  // kNpy: the file, absolute (parse_run_config resolves it against the run file's folder).
  std::filesystem::path npy;
  // kGenerated: the tensor's shape and element type. kNpy: filled by parse_run_config from the
  // file (after checking them against `shape` / `dtype` when the YAML gives them). kScalar:
  // shape is empty and dtype is int64, float64 or bool.
  std::vector<int64_t> shape;
  DataType dtype = DataType::Float(32);
  Init init = Init::kZeros;  // kGenerated only
  // kRandom: the generator's seed (parse_run_config defaults it to the input's position, so
  // that two random inputs differ) and the range. Floats: uniform in [low, high) rounded to
  // the dtype (never below the first representable value >= low, never reaching high).
  // Integers and bool: uniform integers in [low, high); low and high must then be whole
  // numbers within +-2^53. The same seed always gives the same bytes, on every platform.
  uint64_t seed = 0;
  double low = 0;
  double high = 1;
  // kArange: first value and increment (whole numbers for integer dtypes).
  double start = 0;
  double step = 1;
  Any scalar;    // kScalar: the value (an int64, a double or a bool)
  int line = 0;  // 1-based line of the input in the run file, 0 when not from a file
};

// Checks on one argument after the run: compare it with an expected .npy, save it, or both.
struct OutputSpec {
  int32_t index = 0;  // position of the argument in RunSpec::inputs
  std::string name;   // that input's name
  // Where to write the tensor as .npy (absolute; parent folders are created when missing).
  std::optional<std::filesystem::path> save;
  // The .npy to compare with (absolute; must exist when the config is parsed).
  std::optional<std::filesystem::path> expected;
  // numpy.allclose semantics: element-wise |got - expected| <= atol + rtol * |expected|, in
  // double precision, for every dtype (bool and integers included; use rtol = atol = 0 for
  // exact equality). Equal infinities match; NaN never matches (equal_nan = false, numpy's
  // default).
  double rtol = 1e-5;
  double atol = 1e-8;
};

// A check on the function's return value (the `result:` section), or on one element of a
// returned tuple: compare it with an expected .npy or an expected scalar, save it, or both.
// A tuple is checked and saved element by element, with files named <stem>.<i><ext> (nested
// tuples: <stem>.<i>.<j><ext>); a scalar is saved and compared as a 0-d .npy (int64, float64
// or bool).
struct ResultSpec {
  std::vector<int32_t> element;  // the path into nested tuples; empty: the value itself
  std::string name;              // "result", "result[1]", "result[1][0]"
  // Where to write the value as .npy (absolute; parent folders are created when missing).
  std::optional<std::filesystem::path> save;
  // The .npy to compare with (absolute; it, or <stem>.0<ext> for a tuple, must exist when the
  // config is parsed).
  std::optional<std::filesystem::path> expected;
  std::optional<Any> value;  // an expected scalar (int64, double or bool)
  double rtol = 1e-5;        // tolerances as in OutputSpec (numpy.isclose)
  double atol = 1e-8;
};

// The `profile:` section: profile calls of the function with metric collectors.
struct ProfileSpec {
  // A collector by name, with options for its plugin (JSON text; empty: the plugin set's).
  struct Collector {
    std::string name;
    std::string options_json;
  };
  std::vector<Collector> collectors;  // e.g. "perf", or {name: perf, options: {events: [...]}}
  int32_t calls = 1;                  // profiled calls after the timing
  // Report files to write (absolute; parent folders are created): the table, CSV, JSON and
  // Chrome-trace forms of kiln::profiling::Report.
  std::optional<std::filesystem::path> table, csv, json, trace;
};

// The `remote:` section: run on a device of an RPC server found through a tracker
// (kiln::testing::rpc_run). Unset fields fall back to the environment as in RPCConfig.
struct RemoteSpec {
  std::optional<std::string> tracker_host;  // from `tracker: HOST:PORT`
  std::optional<int> tracker_port;
  std::optional<std::string> key;
  int32_t priority = 1;
  int32_t session_timeout = 10;  // seconds; 0 = unlimited
  std::optional<double> wait;    // seconds the tracker may take to grant a server
  std::string token;             // `token`, or the first line of `token_file`
  // `tracker_token`, or the first line of `tracker_token_file`: the tracker's token, when it
  // requires one (empty: $KILN_TRACKER_TOKEN, else none).
  std::string tracker_token;
};

// A parsed run configuration.
struct RunSpec {
  std::filesystem::path file;    // the run configuration itself, as given to the parser
  std::filesystem::path module;  // the module file, absolute
  std::string function;          // the function to run; empty: the module's entry function
  std::string device = "cpu";    // "cpu", "cpu:0", "opencl:1", ... (Device::parse accepts it)
  std::string exporter = "tar";  // the YAML key `export`: "tar", "so", "ndk" or another name
  // How the function is timed, both read from the `evaluator:` section by one function of the
  // parser; code that times a run takes them together from evaluator_settings(spec).
  EvaluatorConfig evaluator;  // number, repeat, min_repeat_ms, enable_cpu_cache_flush
  // The complete evaluator options: evaluator.to_options() plus the YAML's extra evaluator
  // keys (limit_zero_time_iterations, cooldown, cache_flush_bytes, keep_raw_samples, noise).
  TimeEvaluatorOptions extra;
  std::vector<InputSpec> inputs;
  std::vector<OutputSpec> outputs;
  std::vector<ResultSpec> result;      // the `result:` section: checks on the return value
  std::optional<ProfileSpec> profile;  // the `profile:` section, when present
  std::optional<RemoteSpec> remote;    // the `remote:` section, when present
  // The `throughput:` section: bytes (a number, or `auto`, the default: the arguments' total
  // size) and flops per call (unset: no GFLOP/s).
  ThroughputSpec throughput;
  // 1-based (line, column) of each top-level key's value in `file`, for errors found after
  // parsing (a device the backend lacks, a function the module lacks): see error_at().
  std::map<std::string, std::pair<int, int>> positions;
};

// How a run of a configuration is timed, in one place: what testing::local_run and rpc_run take
// as their EvaluatorConfig (`config`), and the complete evaluator options for
// RunHooks::evaluator (`options`: the noise rule, cooldown, cache flush, raw samples, f_preproc;
// local_run and rpc_run take number, repeat, min_repeat_ms and the CPU cache flush from
// `config`). Progress and reports read the noise rule's timeout and target from `options`.
struct EvaluatorSettings {
  EvaluatorConfig config;
  TimeEvaluatorOptions options;
};

// The evaluator settings of `spec` (its `evaluator` and `extra`).
EvaluatorSettings evaluator_settings(const RunSpec& spec);

// A ConfigError about the top-level `key` of `spec`, at its value's position in spec.file
// (without line and column when the key is absent, e.g. a default or a command-line override).
ConfigError error_at(const RunSpec& spec, const std::string& key, const std::string& message);

// Reads and validates the run configuration at `path`. Relative paths in it (module, npy,
// expected, save) are resolved against the folder of `path`, after expanding
// ${KILN_EXAMPLES} (see examples_dir()). Throws kiln::NotFoundError when `path` does not
// exist or cannot be read, and kiln::ConfigError, reading `<file>:<line>:<column>: <key>:
// <message>`, for everything else: YAML syntax (a tab in the indentation is named as such),
// unknown keys (with a did-you-mean), wrong value
// types, a missing module / npy / expected file, an .npy whose shape or dtype differs from the
// ones given, bad device names, dtypes or init names, negative dimensions, out-of-range
// evaluator values, tolerances < 0, unknown output names or indices out of range. Device names
// are those of `device_types` (a Runtime's device_types() knows its plugins' names too).
// Loads no plugin.
RunSpec parse_run_config(const std::filesystem::path& path, const DeviceTypeNames& device_types);
// API-edge default: parse_run_config(path, Runtime::global().device_types()).
RunSpec parse_run_config(const std::filesystem::path& path);

// One swept parameter, or a group of parameters set together, of a `sweep:` section.
struct SweepAxis {
  std::string name;                 // the sweep key: "device", "shape", "inputs.n.scalar", ...
  std::vector<std::string> values;  // a label per value: "opencl", "[1024, 1024]", ...
};

// One point of a sweep's cross product: an ordinary run configuration, or why it is not one.
struct SweepPoint {
  size_t index = 0;                 // 0-based position in SweepSpec::points
  std::vector<std::string> values;  // the label of this point's value on each axis
  std::string label;                // "device=opencl, shape=[1024]" (empty for a plain config)
  std::optional<RunSpec> spec;      // the expanded configuration, when it is valid
  std::string error;  // when it is not: the error's message ("<file>:<line>:<column>: <key>: ...")
};

// A run configuration with a `sweep:` section, expanded into its points (docs/run-config.md
// "Sweeps"). A plain configuration is one point with no axes.
struct SweepSpec {
  std::filesystem::path file;
  std::vector<SweepAxis> axes;  // in the order of the file; the first varies slowest
  std::vector<SweepPoint> points;
  bool is_sweep() const { return !axes.empty(); }
};

// Reads the run configuration at `path` and expands its `sweep:` section into the cross product
// of its axes, each point an ordinary configuration validated as parse_run_config validates
// one. A point whose configuration is invalid keeps the error (with the file position of the
// offending value, often the sweep's own) instead of a spec, so that the others can still run.
// Each point's `save` files (outputs and result) get ".point<k>" before their extension (k: the
// point's 1-based number), so that the points do not overwrite each other's.
// Throws kiln::NotFoundError as parse_run_config does, and ConfigError for a malformed `sweep:`
// section itself (not a mapping, an unknown parameter, an empty or malformed list of values, a
// value listed twice, a parameter set by two axes, more than 100000 points). Without `sweep:`
// it returns one point and throws what parse_run_config throws.
SweepSpec parse_sweep_config(const std::filesystem::path& path,
                             const DeviceTypeNames& device_types);

// The folder ${KILN_EXAMPLES} expands to: the environment variable KILN_EXAMPLES when set and
// not empty, else <folder of libkiln>/../examples/kernels (the build tree's example kernels).
std::filesystem::path examples_dir();

// Builds the function's arguments in order: host tensors (on cpu:0) for kNpy and kGenerated
// inputs, the scalar values for kScalar. Throws the errors of Tensor::load_npy for a missing or
// malformed .npy, ValueError (naming the input and the field) for generation parameters
// parse_run_config would reject (for hand-made specs), and the allocator's errors.
std::vector<Any> make_inputs(const RunSpec& spec);

// The outcome of check_outputs.
struct CheckResult {
  bool ok = true;       // every comparison passed and every save succeeded
  std::string summary;  // one line per output entry, "\n"-separated (see check_outputs)
};

// Compares and saves the arguments after the run. `outputs` holds one value per input, in
// order (local_run's RunResult::outputs; tensors are copied to the host when on a device).
// For each OutputSpec, first the comparison with `expected`, then the `save`. Summary lines:
//   "out: ok (1000 elements match '<expected>' within rtol=1e-05 atol=1e-08; max abs diff 0)"
//   "out: 3 of 1000 elements differ (max abs diff 0.5 at [12], max rel diff 0.1 at [7]);
//    first mismatches: [12] got 1.5 expected 1, ...; compared with '<expected>' at rtol=...
//    atol=..." (on one line)
//   "out: shape mismatch: got [4, 4], expected [16] (from '<expected>')", "dtype mismatch",
//   "shape and dtype mismatch: got float32[4], expected float64[5] (...)"
//   "out: saved float32[1000] to '<save>'" / "out: cannot save to '<save>': <error>"
// and a line for an output that is not a tensor or an unreadable expected file. Failures set
// ok = false; they are not thrown. Throws ValueError when outputs.size() differs from the number
// of inputs.
CheckResult check_outputs(const RunSpec& spec, const std::vector<Any>& outputs);

// Checks and saves the function's return value as spec.result says (RunResult::result, its
// tensors on the host), with the summary lines of check_outputs named after the checked value
// ("result", "result[1]"), plus "result: ok (got 3, expected 3 within rtol=... atol=...)" /
// "result: got 2, expected 3 (rtol=... atol=...)" for a `value` check, and failing lines for an
// element path into a value that is not a tuple or out of its range, or a value that is neither a
// tensor, a scalar nor a tuple. Failures set ok = false; nothing is thrown.
CheckResult check_result(const RunSpec& spec, const Any& value);

// The leaves of a returned value for display: {("result", value)} for a tensor or a scalar,
// {("result[0]", ...), ("result[1][0]", ...)} for (nested) tuples; none gives no leaf.
std::vector<std::pair<std::string, Any>> result_leaves(const Any& value);

// A one-line description of a tensor's values: "float32[1000] min=0 max=999 mean=499.5
// first=[0, 1, 2, 3, 4, 5, ...]" with at most `max_values` values after "first=". NaNs are left
// out of min, max and mean and counted (" nan=3"); bool prints false/true; an empty tensor
// reads "float32[0] (empty)", an undefined one "undefined"; dtypes without element access
// (e.g. complex) print only "<dtype><shape>". A tensor on a device is copied to the host first.
std::string summarize(const Tensor& host_tensor, size_t max_values = 6);

}  // namespace kiln::run

#endif  // KILN_DETAIL_RUN_CONFIG_H_
