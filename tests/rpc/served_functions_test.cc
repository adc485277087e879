// SPDX-License-Identifier: Apache-2.0
// Which global functions a session serves (issue 30, item 7; docs/rpc.md, "Which functions a
// session serves"): every function the application registered, under any name ("testing.*"
// and "rpc.test.*" included, as in TVM, where registering is the opt-in); Kiln's own
// diagnostic functions only when the server offers them, told apart by where they come from,
// not by their names; and testing.echo on a local session, as TVM's LocalSession serves it.
// Real servers on loopback, sessions on threads of this process (where the application's
// functions are), and local_session().
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/rpc/server.h"
#include "kiln/rpc/session.h"

namespace kiln::rpc {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// Kiln's diagnostic functions, none of which a server offers without its test hook.
const std::vector<std::string> kDiagnostic = {
    "testing.echo",    "rpc.test.addone",    "rpc.test.sleep", "rpc.test.block",
    "rpc.test.alloc",  "rpc.test.raise",     "rpc.test.nop",   "rpc.test.crash",
    "rpc.test.getenv", "rpc.test.read_file", "rpc.test.pid",   "rpc.test.strcat"};

// A global function the application registers for the scope of a test.
class Registered {
 public:
  Registered(std::string name, Function f) : name_(std::move(name)) {
    registry::set(name_, std::move(f), /*override=*/false);
  }
  ~Registered() { registry::remove(name_); }
  Registered(const Registered&) = delete;
  Registered& operator=(const Registered&) = delete;

 private:
  std::string name_;
};

// A server whose sessions run on threads of this process: they see its registry.
ServerOptions in_process(bool test_functions) {
  ServerOptions o;
  o.port = 0;
  o.key = "served";
  o.isolation = SessionIsolation::kThread;
  o.test_hooks.test_functions = test_functions;
  return o;
}

// The message of the RPCError that asking `s` for `name` raises ("" when it is served).
std::string refusal(const RPCSession& s, const std::string& name) {
  try {
    s.get_function(name);
  } catch (const RPCError& e) {
    return e.what();
  }
  return "";
}

TEST(ServedFunctions, TheApplicationsFunctionsAreServedUnderAnyName) {
  Registered testing_fn(
      "testing.served_test_double",
      Function::from_typed("testing.served_test_double", [](int64_t x) { return 2 * x; }));
  Registered rpc_test_fn(
      "rpc.test.served_test_concat",
      Function::from_typed("rpc.test.served_test_concat",
                           [](const std::string& a, const std::string& b) { return a + b; }));
  Server server(in_process(/*test_functions=*/false));
  RPCSession s = connect("127.0.0.1", server.port(), "served");
  EXPECT_EQ(s.get_function("testing.served_test_double")(int64_t{21}).cast<int64_t>(), 42);
  EXPECT_EQ(s.get_function("rpc.test.served_test_concat")(std::string("ab"), std::string("cd"))
                .cast<std::string>(),
            "abcd");
  // Kiln's own stay hidden on the same server: they can hold the session (sleep, block), take
  // its memory (alloc), end its process (crash) or read the server's files (read_file).
  for (const std::string& name : kDiagnostic) {
    EXPECT_THAT(refusal(s, name), HasSubstr("no global function '" + name + "'")) << name;
  }
  // The session is still fine after the refusals.
  EXPECT_EQ(s.get_function("testing.served_test_double")(int64_t{-4}).cast<int64_t>(), -8);
}

TEST(ServedFunctions, DiagnosticFunctionsStayOutOfTheRegistry) {
  {
    Server with_hooks(in_process(/*test_functions=*/true));
    RPCSession s = connect("127.0.0.1", with_hooks.port(), "served");
    EXPECT_EQ(s.get_function("rpc.test.addone")(int64_t{1}).cast<int64_t>(), 2);
    EXPECT_EQ(s.get_function("testing.echo")(int64_t{7}).cast<int64_t>(), 7);
  }
  // Offering them did not register them: neither the application nor a server without the
  // hook in the same process sees them afterwards.
  for (const std::string& name : kDiagnostic) {
    EXPECT_FALSE(registry::get(name).has_value()) << name;
  }
  Server without(in_process(/*test_functions=*/false));
  RPCSession s = connect("127.0.0.1", without.port(), "served");
  EXPECT_THAT(refusal(s, "rpc.test.block"), HasSubstr("no global function 'rpc.test.block'"));
  EXPECT_THAT(refusal(s, "rpc.test.alloc"), HasSubstr("no global function 'rpc.test.alloc'"));
}

TEST(ServedFunctions, TheApplicationsFunctionWinsOverADiagnosticOfTheSameName) {
  Registered echo("testing.echo", Function::from_packed("testing.echo", [](const Any*, int32_t) {
                    return Any(std::string("the application's echo"));
                  }));
  Server server(in_process(/*test_functions=*/true));
  RPCSession s = connect("127.0.0.1", server.port(), "served");
  EXPECT_EQ(s.get_function("testing.echo")(int64_t{1}).cast<std::string>(),
            "the application's echo");
  EXPECT_EQ(s.get_function("rpc.test.addone")(int64_t{1}).cast<int64_t>(), 2) << "the others stay";
}

TEST(ServedFunctions, ALocalSessionServesTestingEchoAndTheApplicationsFunctions) {
  Registered testing_fn(
      "testing.served_test_negate",
      Function::from_typed("testing.served_test_negate", [](int64_t x) { return -x; }));
  Registered rpc_test_fn(
      "rpc.test.served_test_addone",
      Function::from_typed("rpc.test.served_test_addone", [](int64_t x) { return x + 1; }));
  RPCSession s = local_session(Runtime::global());
  // TVM's testing.echo returns its first argument.
  Function echo = s.get_function("testing.echo");
  EXPECT_EQ(echo(int64_t{1}, std::string("a")).cast<int64_t>(), 1);
  EXPECT_EQ(echo(std::string("xyz")).cast<std::string>(), "xyz");
  EXPECT_TRUE(echo().is_none());
  EXPECT_EQ(s.get_function("testing.served_test_negate")(int64_t{5}).cast<int64_t>(), -5);
  EXPECT_EQ(s.get_function("rpc.test.served_test_addone")(int64_t{10}).cast<int64_t>(), 11);
  // Kiln's other diagnostic functions are not offered.
  for (const std::string& name : kDiagnostic) {
    if (name == "testing.echo") continue;
    EXPECT_THAT(refusal(s, name), HasSubstr("no global function '" + name + "'")) << name;
  }
}

TEST(ServedFunctions, ASessionProcessOffersWhatItsServerOffers) {
  // The worker gets the server's choice on its command line: testing.echo alone here.
  ServerOptions o;
  o.port = 0;
  o.key = "served";
  o.test_hooks.echo_function = true;
  Server server(o);
  RPCSession s = connect("127.0.0.1", server.port(), "served");
  EXPECT_EQ(s.get_function("testing.echo")(int64_t{3}, int64_t{4}).cast<int64_t>(), 3);
  EXPECT_THAT(refusal(s, "rpc.test.addone"), HasSubstr("no global function 'rpc.test.addone'"));
  EXPECT_THAT(refusal(s, "rpc.test.crash"), HasSubstr("no global function 'rpc.test.crash'"));
}

TEST(ServedFunctions, TheApplicationsFunctionsServeAsATimeEvaluatorsPreprocessor) {
  std::atomic<int> calls{0};
  Registered preproc(
      "testing.served_test_preproc",
      Function::from_packed("testing.served_test_preproc", [&calls](const Any*, int32_t) {
        ++calls;
        return Any();
      }));
  RPCSession s = local_session(Runtime::global());
  s.upload(fs::path(KILN_EXAMPLE_KERNEL_DIR) / "libvector_add.so", "libvector_add.so");
  RemoteModule m = s.load_module("libvector_add.so");
  Tensor a = Tensor::empty({16}, DataType::Float(32), s.cpu());
  Tensor c = Tensor::empty({16}, DataType::Float(32), s.cpu());
  TimeEvaluatorOptions options;
  options.number = 1;
  options.repeat = 3;
  options.f_preproc = "testing.served_test_preproc";
  const BenchmarkResult r = m.time_evaluator("vector_add", s.cpu(), options)({a, a, c, 1.0});
  EXPECT_EQ(r.results().size(), 3u);
  EXPECT_EQ(calls.load(), 3) << "once per repeat";
  // Kiln's diagnostic functions are not reachable as a preprocessor either.
  options.f_preproc = "rpc.test.block";
  try {
    m.time_evaluator("vector_add", s.cpu(), options)({a, a, c, 1.0});
    ADD_FAILURE() << "rpc.test.block served as f_preproc";
  } catch (const RPCError& e) {
    EXPECT_THAT(e.what(), HasSubstr("f_preproc 'rpc.test.block'"));
  }
}

}  // namespace
}  // namespace kiln::rpc
