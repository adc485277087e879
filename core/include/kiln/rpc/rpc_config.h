// SPDX-License-Identifier: Apache-2.0
// RPCConfig (SPEC.md §1.7): where rpc_run finds a remote device — a tracker, a key, a
// priority and a session timeout — with the reference's environment fallbacks and errors.
#ifndef KILN_RPC_RPC_CONFIG_H_
#define KILN_RPC_RPC_CONFIG_H_

#include <filesystem>
#include <optional>
#include <string>

#include "kiln/rpc/session.h"
#include "kiln/rpc/tracker.h"

namespace kiln::rpc {

struct RPCConfig {
  std::optional<std::string> tracker_host;
  std::optional<int> tracker_port;
  std::optional<std::string> tracker_key;
  int session_priority = 1;
  int session_timeout_sec = 10;
  // Beyond the reference:
  std::string token;  // the servers' shared token, when they require one
  // The tracker token, when the tracker requires one (TrackerOptions::token); empty: from
  // $KILN_TRACKER_TOKEN when that is set (normalized()), else none.
  std::string tracker_token;
  // Seconds the tracker may take to grant a server before the request fails with "no free
  // server with key ..." (the reference waits forever; so does an unset bound).
  std::optional<double> request_wait_sec;

  // The reference's _normalized: an unset or empty host / key and an unset or 0 port fall
  // back to KILN_TRACKER_HOST / _PORT / _KEY, then TVM_TRACKER_HOST / _PORT / _KEY. Throws
  // ValueError, checking host, port, key in that order:
  //   "RPCConfig.tracker_host is not provided. Please provide it explicitly,or set
  //    environment variable TVM_TRACKER_HOST" (same for tracker_port, tracker_key)
  // and ValueError for a port variable that is not a number. An empty tracker_token takes
  // $KILN_TRACKER_TOKEN.
  static RPCConfig normalized(const std::optional<RPCConfig>& config);
  // Parses a port given as text (the reference accepts "9190"); ValueError otherwise.
  static int parse_port(const std::string& text, const std::string& what);

  // Connects within session_timeout_sec; ValueError "Unable to connect to the tracker using
  // the following configuration: ..." (with the command to query it) otherwise.
  TrackerSession connect_tracker() const;
  // connect_tracker() then request(runtime, tracker_key, session_priority,
  // session_timeout_sec).
  RPCSession connect_server(Runtime& runtime) const;
  // API-edge default: connect_server(Runtime::global()).
  RPCSession connect_server() const;
  // Servers registered under tracker_key (SUMMARY's server_info; keys with ':' work). With
  // allow_missing = false, 0 is ValueError("Unable to find servers with the specific key
  // using the following configuration: ...").
  int count_num_servers(bool allow_missing = true) const;
};

// A tracker setting from the environment: KILN_TRACKER_<field>, else TVM_TRACKER_<field>
// (`field`: "HOST", "PORT" or "KEY"), the first that is set and not empty.
struct TrackerEnvValue {
  std::string variable;  // which one, for messages
  std::string value;
};
std::optional<TrackerEnvValue> tracker_env(const std::string& field);

// A tracker's or a server's address.
struct HostPort {
  std::string host;
  int port = 0;
};
// Splits "HOST:PORT" (also "[v6]:PORT") at the last ':'. Throws ValueError "'<text>' is not
// HOST:PORT", with the reason, when a part is missing or the port is not 1-65535.
HostPort parse_host_port(const std::string& text);

// The shared token in the first line of the token file `path`, without trailing spaces or
// CR. Throws ValueError "cannot read the token file '<path>'" or "the token file '<path>' has
// an empty first line".
std::string read_token_file(const std::filesystem::path& path);

// A new random token of 256 bits (43 URL-safe characters) from the system's CSPRNG, for
// --token-file files (`kiln rpc-token`). Throws RuntimeError when no random bytes are to be had.
std::string generate_token();

}  // namespace kiln::rpc

#endif  // KILN_RPC_RPC_CONFIG_H_
