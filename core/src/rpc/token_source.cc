// SPDX-License-Identifier: Apache-2.0
// The one token resolver (kiln/rpc/rpc_config.h, "Tokens"): an inline token, else a token
// file's first line, else $KILN_RPC_TOKEN / $KILN_TRACKER_TOKEN, else none. Servers, the
// tracker, `kiln query`, RPCConfig and Python all call resolve_token, so that they agree on the
// order and on the messages.
#include <fmt/format.h>

#include <cstdlib>
#include <fstream>

#include "kiln/error.h"
#include "kiln/rpc/rpc_config.h"

namespace kiln::rpc {

const char* token_variable_name(TokenVariable variable) {
  if (variable == TokenVariable::kRpc) return "KILN_RPC_TOKEN";
  if (variable == TokenVariable::kTracker) return "KILN_TRACKER_TOKEN";
  return "";
}

std::string read_token_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::string token;
  if (!in || !std::getline(in, token)) {
    throw ValueError(fmt::format("cannot read the token file '{}'", path.string()));
  }
  while (!token.empty() && (token.back() == '\r' || token.back() == ' ')) token.pop_back();
  if (token.empty()) {
    throw ValueError(fmt::format("the token file '{}' has an empty first line", path.string()));
  }
  return token;
}

std::string resolve_token(const TokenSource& source) {
  if (source.value && source.file) {
    throw ValueError(
        fmt::format("give either {} or {}, not both", source.value_name, source.file_name));
  }
  if (source.value) {
    if (source.value->empty()) throw ValueError(fmt::format("{} is empty", source.value_name));
    return *source.value;
  }
  if (source.file) {
    try {
      return read_token_file(*source.file);
    } catch (const ValueError& e) {
      throw ValueError(fmt::format("{}: {}", source.file_name, e.what()));
    }
  }
  if (source.variable != TokenVariable::kNone) {
    // An empty variable is no token, as an unset one (`KILN_RPC_TOKEN= kiln rpc-server`).
    const char* env = std::getenv(token_variable_name(source.variable));
    if (env != nullptr && *env != '\0') return env;
  }
  return {};
}

}  // namespace kiln::rpc
