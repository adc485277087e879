// SPDX-License-Identifier: Apache-2.0
// kiln::rpc::resolve_token (kiln/rpc/rpc_config.h, "Tokens"): the one resolver's precedence
// (value, file, environment, none) and each of its errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <fstream>
#include <string>

#include "kiln/error.h"
#include "kiln/rpc/rpc_config.h"
#include "test_util.h"

namespace kiln::rpc {
namespace token_source_test {

using ::testing::HasSubstr;

// A token source named as `kiln rpc-server` names its options.
TokenSource server_source() {
  TokenSource source;
  source.variable = TokenVariable::kRpc;
  source.value_name = "--token";
  source.file_name = "--token-file";
  return source;
}

std::string message_of(const TokenSource& source) {
  try {
    resolve_token(source);
  } catch (const ValueError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(TokenSource, ValueThenFileThenVariableThenNone) {
  TempDir dir;
  std::ofstream(dir.path() / "token") << "from-the-file \r\n second line\n";
  const ScopedEnv rpc_env("KILN_RPC_TOKEN", "from-the-environment");
  const ScopedEnv tracker_env("KILN_TRACKER_TOKEN", "from-the-tracker-variable");

  TokenSource source = server_source();
  source.value = "given-inline";
  EXPECT_EQ(resolve_token(source), "given-inline");
  source.value.reset();
  source.file = dir.path() / "token";
  EXPECT_EQ(resolve_token(source), "from-the-file") << "first line, trailing space and CR cut";
  source.file.reset();
  EXPECT_EQ(resolve_token(source), "from-the-environment");
  source.variable = TokenVariable::kTracker;
  EXPECT_EQ(resolve_token(source), "from-the-tracker-variable");
  source.variable = TokenVariable::kNone;
  EXPECT_EQ(resolve_token(source), "") << "no source given: no token";
}

TEST(TokenSource, AnUnsetOrEmptyVariableIsNoToken) {
  TokenSource source = server_source();
  {
    const ScopedEnv env("KILN_RPC_TOKEN", std::nullopt);
    EXPECT_EQ(resolve_token(source), "");
  }
  {
    const ScopedEnv env("KILN_RPC_TOKEN", "");
    EXPECT_EQ(resolve_token(source), "");
  }
  // The tracker's variable is not the servers'.
  const ScopedEnv rpc_env("KILN_RPC_TOKEN", std::nullopt);
  const ScopedEnv tracker_env("KILN_TRACKER_TOKEN", "only-the-tracker-token");
  EXPECT_EQ(resolve_token(source), "");
  EXPECT_STREQ(token_variable_name(TokenVariable::kRpc), "KILN_RPC_TOKEN");
  EXPECT_STREQ(token_variable_name(TokenVariable::kTracker), "KILN_TRACKER_TOKEN");
  EXPECT_STREQ(token_variable_name(TokenVariable::kNone), "");
}

TEST(TokenSource, EachErrorNamesItsSource) {
  TempDir dir;
  std::ofstream(dir.path() / "empty") << "\n";
  const ScopedEnv env("KILN_RPC_TOKEN", "not-used-when-an-error-comes-first");

  TokenSource both = server_source();
  both.value = "a-token";
  both.file = dir.path() / "empty";
  EXPECT_EQ(message_of(both), "give either --token or --token-file, not both");

  TokenSource empty_value = server_source();
  empty_value.value = "";
  EXPECT_EQ(message_of(empty_value), "--token is empty");

  TokenSource missing = server_source();
  missing.file = dir.path() / "missing";
  EXPECT_EQ(message_of(missing), fmt::format("--token-file: cannot read the token file '{}'",
                                             (dir.path() / "missing").string()));

  TokenSource empty_line = server_source();
  empty_line.file = dir.path() / "empty";
  EXPECT_EQ(message_of(empty_line),
            fmt::format("--token-file: the token file '{}' has an empty first line",
                        (dir.path() / "empty").string()));

  TokenSource unnamed;  // the default names
  unnamed.value = "";
  EXPECT_THAT(message_of(unnamed), HasSubstr("the token is empty"));
}

}  // namespace token_source_test
}  // namespace kiln::rpc
