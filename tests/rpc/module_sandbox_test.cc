// SPDX-License-Identifier: Apache-2.0
// Modules a session loads stay inside its work directory (issue 16, items 2 and 3): a VM
// executable that imports itself is refused instead of overflowing the server's stack, and an
// import that is absolute or climbs out with '..' is refused before anything outside is opened,
// with errors that name paths relative to the session only.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "kiln/kiln.h"
#include "kiln/rpc/server.h"
#include "kiln/rpc/session.h"
#include "rpc/rpc_test_util.h"

namespace kiln::rpc {
// Named after the file, not anonymous: its helpers meet other files' in a unity build.
namespace module_sandbox_test {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

const std::string kKernels = KILN_EXAMPLE_KERNEL_DIR;

ServerOptions loopback() {
  ServerOptions o;
  o.port = 0;
  o.key = "sandbox";
  o.test_hooks.test_functions = true;  // testing.echo shows the session still serves
  return o;
}

std::string program_importing(const std::string& import) {
  return "kiln_vm 1\nimport \"" + import + "\"\nfunc @main(x) regs=1 {\n  ret %0\n}\n";
}

// The message of the RPCError that loading `path` raises.
std::string load_error(RPCSession& s, const std::string& path) {
  try {
    s.load_module(path);
  } catch (const RPCError& e) {
    return e.what();
  }
  ADD_FAILURE() << path << " loaded";
  return "";
}

TEST(RpcModuleSandbox, ASelfImportingExecutableIsRefusedAndTheServerLives) {
  Server server(loopback());
  RPCSession s = connect("127.0.0.1", server.port(), "sandbox");
  s.upload_bytes(program_importing("self.kvmt"), "self.kvmt");
  s.upload_bytes(program_importing("b.kvmt"), "a.kvmt");
  s.upload_bytes(program_importing("a.kvmt"), "b.kvmt");
  EXPECT_THAT(load_error(s, "self.kvmt"), HasSubstr("self.kvmt imports itself"));
  EXPECT_THAT(load_error(s, "a.kvmt"), HasSubstr("a.kvmt -> b.kvmt -> a.kvmt"));
  // The same session still works.
  EXPECT_EQ(s.get_function("testing.echo")(int64_t{7}).cast<int64_t>(), 7);
}

TEST(RpcModuleSandbox, ImportsThatLeaveTheWorkDirectoryAreRefusedBeforeTheyAreOpened) {
  Server server(loopback());
  RPCSession s = connect("127.0.0.1", server.port(), "sandbox");
  // A real library outside the session: it would load (and run its constructors) if the
  // import were followed.
  const std::string outside = kKernels + "/libvector_add.so";
  ASSERT_TRUE(fs::exists(outside));
  s.upload_bytes(program_importing(outside), "absolute.kvmt");
  s.upload_bytes(program_importing("../../escape.so"), "dotdot.kvmt");
  s.upload_bytes(program_importing("/nonexistent/probe.so"), "probe.kvmt");
  // One level up is the server's own work directory: its path must not appear either.
  s.upload_bytes(program_importing("../sibling/x.so"), "sibling.kvmt");
  for (const char* name : {"absolute.kvmt", "dotdot.kvmt", "probe.kvmt", "sibling.kvmt"}) {
    const std::string message = load_error(s, name);
    EXPECT_THAT(message, HasSubstr("only open files inside the session's work directory")) << name;
    // Nothing tells whether the outside path exists, and the server's own folders stay unnamed.
    EXPECT_THAT(message, Not(HasSubstr("cannot find"))) << name;
    EXPECT_THAT(message, Not(HasSubstr(server.work_dir().string()))) << name;
  }
  EXPECT_THAT(load_error(s, "sibling.kvmt"), HasSubstr("directory, not '../sibling/x.so'"));
  // A symlink planted inside that points outside is refused the same way.
  s.upload_bytes(program_importing("link.so"), "via_link.kvmt");
  const fs::path dir = *fs::directory_iterator(server.work_dir());
  fs::create_symlink(outside, dir / "link.so");
  EXPECT_THAT(load_error(s, "via_link.kvmt"),
              HasSubstr("only open files inside the session's work directory"));
}

TEST(RpcModuleSandbox, ImportsInsideTheWorkDirectoryStillLoad) {
  Server server(loopback());
  RPCSession s = connect("127.0.0.1", server.port(), "sandbox");
  s.upload(kKernels + "/libvector_add.so", "lib/libvector_add.so");
  s.upload_bytes(program_importing("lib/libvector_add.so"), "prog.kvmt");
  RemoteModule m = s.load_module("prog.kvmt");
  EXPECT_TRUE(m.get_function("main"));
}

TEST(RpcModuleSandbox, ASelfImportDoesNotCrashAServerProcess) {
  test::StartedProcess server = test::start_rpc_server({"--key", "sandbox", "--max-sessions", "2"});
  ASSERT_GT(server.port, 0);
  {
    RPCSession s = connect("127.0.0.1", server.port, "sandbox");
    s.upload_bytes(program_importing("self.kvmt"), "self.kvmt");
    EXPECT_THAT(load_error(s, "self.kvmt"), HasSubstr("imports itself"));
  }
  // The process is alive and serves the next client (a second slot: this test is not about how
  // fast a closed session frees its own).
  RPCSession again = connect("127.0.0.1", server.port, "sandbox");
  EXPECT_EQ(again.get_function("testing.echo")(int64_t{3}).cast<int64_t>(), 3);
}

}  // namespace module_sandbox_test
}  // namespace kiln::rpc
