// SPDX-License-Identifier: Apache-2.0
#include "rpc/remote_objects.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "ffi/error_object.h"
#include "rpc/client.h"

namespace kiln::rpc {

RemoteHandle::~RemoteHandle() { session->free_handle(handle); }

namespace {

// The callable of a remote function: `self` is its RemoteHandle.
KilnError* invoke_remote(void* self, const KilnAny* args, int32_t num_args, KilnAny* ret) {
  auto* handle = static_cast<RemoteHandle*>(self);
  try {
    thread_local std::vector<uint8_t> body;  // calls are hot: no allocation per call
    body.clear();
    wire::Writer w(body);
    w.u64(handle->handle);
    w.u32(static_cast<uint32_t>(num_args));
    for (int32_t i = 0; i < num_args; ++i) handle->session->encode(w, Any::from_abi(args[i]));
    auto values = handle->session->request(wire::Code::kCallFunc, body);
    if (values.size() != 1) throw handle->session->malformed_reply("CallFunc");
    ::kiln::detail::store_result(std::move(values[0]), ret);
    return nullptr;
  } catch (...) {
    return ::kiln::detail::error_from_current_exception("");
  }
}

}  // namespace

Function remote_function(std::shared_ptr<RPCSession::Impl> session, uint64_t handle,
                         std::string name) {
  auto keep = make_object<RemoteHandle>(std::move(session), handle, false);
  KilnCallable callable{&invoke_remote, keep.get()};
  return Function::from_abi(callable, keep, std::move(name));
}

const RemoteHandle* remote_handle_of(const Function& f) {
  if (!f || f.callable().call != &invoke_remote) return nullptr;
  return static_cast<const RemoteHandle*>(f.callable().self);
}

void encode_evaluator_options(wire::Writer& w, const TimeEvaluatorOptions& o) {
  w.i32(o.number);
  w.i32(o.repeat);
  w.i32(o.min_repeat_ms);
  w.i32(o.limit_zero_time_iterations);
  w.i32(o.cooldown_interval_ms);
  w.i32(o.repeats_to_cooldown);
  w.i64(o.cache_flush_bytes);
  w.str(o.f_preproc);
  w.u8(o.keep_raw_samples);
  w.u8(o.noise.enabled);
  w.f64(o.noise.target_rse);
  w.i32(o.noise.min_repeats);
  w.f64(o.noise.min_time_s);
  w.f64(o.noise.timeout_s);
  w.i32(o.noise.max_repeats);
  w.i32(o.noise.plateau_window);
  w.f64(o.noise.plateau_tolerance);
}

TimeEvaluatorOptions decode_evaluator_options(wire::Reader& r) {
  TimeEvaluatorOptions o;
  o.number = r.i32("number");
  o.repeat = r.i32("repeat");
  o.min_repeat_ms = r.i32("min_repeat_ms");
  o.limit_zero_time_iterations = r.i32("limit_zero_time_iterations");
  o.cooldown_interval_ms = r.i32("cooldown_interval_ms");
  o.repeats_to_cooldown = r.i32("repeats_to_cooldown");
  o.cache_flush_bytes = r.i64("cache_flush_bytes");
  o.f_preproc = r.str("f_preproc", wire::kMaxPathBytes);
  o.keep_raw_samples = r.u8("keep_raw_samples") != 0;
  o.noise.enabled = r.u8("noise.enabled") != 0;
  o.noise.target_rse = r.f64("noise.target_rse");
  o.noise.min_repeats = r.i32("noise.min_repeats");
  o.noise.min_time_s = r.f64("noise.min_time_s");
  o.noise.timeout_s = r.f64("noise.timeout_s");
  o.noise.max_repeats = r.i32("noise.max_repeats");
  o.noise.plateau_window = r.i32("noise.plateau_window");
  o.noise.plateau_tolerance = r.f64("noise.plateau_tolerance");
  return o;
}

std::string benchmark_result_to_wire(const BenchmarkResult& result) {
  nlohmann::json j;
  j["results"] = result.results();
  j["timer"] = result.timer;
  j["numbers"] = result.numbers;
  nlohmann::json samples = nlohmann::json::array();
  for (const auto& s : result.raw_samples) samples.push_back({s.calls, s.seconds});
  j["raw_samples"] = samples;
  j["stop_reason"] = result.stop_reason;
  j["name"] = result.name;
  j["device"] = {result.device.type, result.device.id};
  return j.dump();
}

BenchmarkResult benchmark_result_from_wire(const std::string& text) {
  try {
    const auto j = nlohmann::json::parse(text);
    BenchmarkResult r(j.at("results").get<std::vector<double>>());
    r.timer = j.at("timer").get<std::string>();
    r.numbers = j.at("numbers").get<std::vector<int64_t>>();
    for (const auto& s : j.at("raw_samples")) {
      r.raw_samples.push_back({s.at(0).get<int64_t>(), s.at(1).get<double>()});
    }
    r.stop_reason = j.at("stop_reason").get<std::string>();
    r.name = j.at("name").get<std::string>();
    r.device = {j.at("device").at(0).get<int32_t>(), j.at("device").at(1).get<int32_t>()};
    return r;
  } catch (const nlohmann::json::exception& e) {
    throw RPCError(fmt::format("the server sent a malformed time evaluator result: {}", e.what()),
                   0);
  }
}

}  // namespace kiln::rpc
