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
  // $KILN_TRACKER_TOKEN when that is set and not empty (normalized(), resolve_token), else none.
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

// ---- Tokens (core/src/rpc/token_source.cc): the one place that decides which token a server,
// a tracker or a client uses. Behind `kiln rpc-server --token/--token-file/--tracker-token-file`,
// `kiln tracker --token-file`, `kiln query --tracker-token-file`, RPCConfig::tracker_token
// (normalized()) and Python's connect_tracker(tracker_token=None).
//
// Precedence, the first source that is given wins:
//   1. `value`, the token itself (--token T, RPCConfig::tracker_token);
//   2. the first line of `file` (--token-file F, --tracker-token-file F; read_token_file);
//   3. the environment variable of `variable` ($KILN_RPC_TOKEN or $KILN_TRACKER_TOKEN), when
//      it is set and not empty;
//   4. none: the empty string (no token).
// Errors, each a ValueError that names the source:
//   - `value` and `file` both given: "give either <value_name> or <file_name>, not both";
//   - an empty `value`: "<value_name> is empty";
//   - a `file` that cannot be read: "<file_name>: cannot read the token file '<path>'", or
//     "<file_name>: the token file '<path>' has an empty first line".
// Run configs give `remote.token`/`token_file` (exactly one, checked where the YAML is parsed,
// with its line) and reach this resolver through RPCConfig.

// Which environment variable a token falls back to.
enum class TokenVariable {
  kNone,     // no fallback
  kRpc,      // $KILN_RPC_TOKEN: the servers' shared token
  kTracker,  // $KILN_TRACKER_TOKEN: the tracker's token
};
// "KILN_RPC_TOKEN", "KILN_TRACKER_TOKEN", or "" for kNone.
const char* token_variable_name(TokenVariable variable);

// Where one token may come from (see the precedence above).
struct TokenSource {
  std::optional<std::string> value;           // the token itself; unset: not given
  std::optional<std::filesystem::path> file;  // a token file; unset: not given
  TokenVariable variable = TokenVariable::kNone;
  std::string value_name = "the token";      // how errors name `value` ("--token")
  std::string file_name = "the token file";  // how errors name `file` ("--token-file")
};

// The token `source` resolves to by the precedence above; empty when none is given anywhere.
// Throws ValueError as listed above.
std::string resolve_token(const TokenSource& source);

// The shared token in the first line of the token file `path`, without trailing spaces or
// CR. Throws ValueError "cannot read the token file '<path>'" or "the token file '<path>' has
// an empty first line".
std::string read_token_file(const std::filesystem::path& path);

// A new random token of 256 bits (43 URL-safe characters) from the system's CSPRNG, for
// --token-file files (`kiln rpc-token`). Throws RuntimeError when no random bytes are to be had.
std::string generate_token();

}  // namespace kiln::rpc

#endif  // KILN_RPC_RPC_CONFIG_H_
