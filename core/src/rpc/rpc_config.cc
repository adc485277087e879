// SPDX-License-Identifier: Apache-2.0
#include "kiln/rpc/rpc_config.h"
#include "rpc/tls_psk.h"

#include <fmt/format.h>

#include <cstdlib>

#include "kiln/detail/cancellation.h"
#include "kiln/error.h"

namespace kiln::rpc {

namespace {

ValueError missing(const char* field, const char* env_name) {
  return ValueError(fmt::format(
      "RPCConfig.{} is not provided. Please provide it explicitly,or set environment variable {}",
      field, env_name));
}

std::string describe(const RPCConfig& c) {
  return fmt::format(
      "    tracker host: {}\n    tracker port: {}\n    tracker key: {}\n"
      "    timeout (sec): {}\n",
      c.tracker_host.value_or(""), c.tracker_port.value_or(0), c.tracker_key.value_or(""),
      c.session_timeout_sec);
}

}  // namespace

int RPCConfig::parse_port(const std::string& text, const std::string& what) {
  try {
    size_t used = 0;
    const int port = std::stoi(text, &used);
    if (used == text.size() && port > 0 && port <= 65535) return port;
  } catch (const std::exception&) {
  }
  throw ValueError(fmt::format("{} '{}' is not a port number (1-65535)", what, text));
}

std::optional<TrackerEnvValue> tracker_env(const std::string& field) {
  for (const std::string prefix : {"KILN_TRACKER_", "TVM_TRACKER_"}) {
    const std::string variable = prefix + field;
    const char* value = std::getenv(variable.c_str());
    if (value != nullptr && *value != '\0') return TrackerEnvValue{variable, value};
  }
  return std::nullopt;
}

HostPort parse_host_port(const std::string& text) {
  const auto colon = text.rfind(':');
  std::string host = colon == std::string::npos ? std::string() : text.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);  // [::1]:9190
  }
  if (host.empty()) throw ValueError(fmt::format("'{}' is not HOST:PORT", text));
  try {
    return {host, RPCConfig::parse_port(text.substr(colon + 1), "port")};
  } catch (const ValueError& e) {
    throw ValueError(fmt::format("'{}' is not HOST:PORT: {}", text, e.what()));
  }
}

RPCConfig RPCConfig::normalized(const std::optional<RPCConfig>& config) {
  RPCConfig c = config.value_or(RPCConfig{});
  if (!c.tracker_host || c.tracker_host->empty()) {
    c.tracker_host.reset();
    if (auto host = tracker_env("HOST")) c.tracker_host = host->value;
  }
  if (!c.tracker_port || *c.tracker_port == 0) {
    c.tracker_port.reset();
    if (auto port = tracker_env("PORT")) c.tracker_port = parse_port(port->value, port->variable);
  }
  if (!c.tracker_key || c.tracker_key->empty()) {
    c.tracker_key.reset();
    if (auto key = tracker_env("KEY")) c.tracker_key = key->value;
  }
  if (c.tracker_token.empty()) {
    TokenSource source;
    source.variable = TokenVariable::kTracker;
    c.tracker_token = resolve_token(source);
  }
  if (!c.tracker_host) throw missing("tracker_host", "TVM_TRACKER_HOST");
  if (!c.tracker_port) throw missing("tracker_port", "TVM_TRACKER_PORT");
  if (!c.tracker_key) throw missing("tracker_key", "TVM_TRACKER_KEY");
  if (c.session_timeout_sec < 0) throw ValueError("RPCConfig.session_timeout_sec must be >= 0");
  if (c.request_wait_sec && !(*c.request_wait_sec > 0)) {
    throw ValueError("RPCConfig.request_wait_sec must be > 0");
  }
  return c;
}

TrackerSession RPCConfig::connect_tracker() const {
  const RPCConfig c = normalized(*this);
  const auto timeout = std::chrono::milliseconds(
      c.session_timeout_sec > 0 ? int64_t{c.session_timeout_sec} * 1000 : int64_t{60000});
  try {
    return TrackerSession::connect(*c.tracker_host, *c.tracker_port, timeout, c.tracker_token);
  } catch (const kiln::detail::InterruptedError&) {
    throw;  // Ctrl-C (kiln/detail/cancellation.h)
  } catch (const std::exception& e) {
    throw ValueError(
        fmt::format("Unable to connect to the tracker using the following configuration:\n{}"
                    "Please check the tracker status via the following command:\n"
                    "     kiln query --tracker {}:{}\n(error: {})",
                    describe(c), *c.tracker_host, *c.tracker_port, e.what()));
  }
}

RPCSession RPCConfig::connect_server(Runtime& runtime) const {
  const RPCConfig c = normalized(*this);
  std::optional<std::chrono::milliseconds> wait;
  if (c.request_wait_sec) {
    wait = std::chrono::milliseconds(static_cast<int64_t>(*c.request_wait_sec * 1000));
  }
  TrackerSession tracker = c.connect_tracker();
  return tracker.request(runtime, *c.tracker_key, c.session_priority, c.session_timeout_sec, 5,
                         wait, c.token);
}

int RPCConfig::count_num_servers(bool allow_missing) const {
  const RPCConfig c = normalized(*this);
  const TrackerSummary summary = c.connect_tracker().summary();
  int count = 0;
  for (const auto& s : summary.servers) {
    if (s.key == "server:" + *c.tracker_key) ++count;
  }
  if (count == 0 && !allow_missing) {
    throw ValueError(fmt::format(
        "Unable to find servers with the specific key using the following configuration:\n{}"
        "Please check the tracker status via the following command:\n"
        "     kiln query --tracker {}:{}",
        describe(c), *c.tracker_host, *c.tracker_port));
  }
  return count;
}

RPCSession TrackerSession::request(Runtime& runtime, const std::string& key, int priority,
                                   double session_timeout_s, int max_retry,
                                   std::optional<std::chrono::milliseconds> wait,
                                   const std::string& token) {
  std::string last_error;
  for (int attempt = 0; attempt < max_retry; ++attempt) {
    try {
      const ServerAddress address = request_server(key, priority, wait);
      ConnectOptions options;
      options.key = address.matchkey;
      options.session_timeout_s = session_timeout_s;
      options.token = token;
      return rpc::connect(address.host, address.port, options, runtime);
    } catch (const NotFoundError&) {
      throw;  // the wait bound passed: asking again would wait again
    } catch (const ValueError&) {
      throw;  // a missing or wrong token: asking again cannot help
    } catch (const kiln::detail::InterruptedError&) {
      throw;  // Ctrl-C (kiln/detail/cancellation.h)
    } catch (const std::exception& e) {
      last_error = e.what();
    }
  }
  // Every server the tracker handed out was gone: lost, for a fan-out to try again later.
  throw ServerLostError(
      fmt::format("Cannot request {} after {} retry, last_error:{}", key, max_retry, last_error));
}

std::string generate_token() { return tls::generate_token(); }

}  // namespace kiln::rpc
