// SPDX-License-Identifier: Apache-2.0
// One file name, two contents (issue 35, item 1: "treat the class, not the instance"). Two kernel
// libraries named libstamp.so, with the same symbols, differ in one constant (stamp_kernel.cc:
// stamp(out) writes 1 or 2). Through every path of Kiln that names a module's file after
// something other than its content — uploads of one RPC session, uploads of two sessions at
// once, the VM's imports, farm points (rpc_run, whose file on the server is always
// kiln_tmp_mod.<format>), measurement workers and local_run — each call must answer with its
// own library's value while the other one is loaded too. docs/architecture.md, "Caches and
// names", says what each path is keyed by.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <barrier>
#include <filesystem>
#include <fstream>
#include <future>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/measurement_worker.h"
#include "kiln/rpc/rpc_config.h"
#include "kiln/rpc/server.h"
#include "kiln/rpc/session.h"
#include "kiln/rpc/tracker.h"
#include "rpc/rpc_test_util.h"
#include "rpc/session_server.h"
#include "test_util.h"

namespace kiln::rpc {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// The library built with stamp value `value` (1 or 2); both are named libstamp.so.
fs::path stamp_library(int value) {
  return fs::path(KILN_SAME_NAME_DIR) / std::to_string(value) / "libstamp.so";
}

constexpr int64_t kElements = 16;

// A server on a loopback port whose sessions run as `isolation` says, `sessions` at once.
ServerOptions same_name_server(SessionIsolation isolation, int sessions = 1) {
  ServerOptions o;
  o.port = 0;
  o.key = "same-name";
  o.isolation = isolation;
  o.max_sessions = sessions;
  return o;
}

const char* name_of(SessionIsolation isolation) {
  return isolation == SessionIsolation::kThread ? "thread isolation" : "process isolation";
}

// What `function` of `m` writes into a fresh remote float32 tensor of the session `s`, as a
// value every element must share (-1 when they differ, so a mix never passes).
float remote_stamp(RPCSession& s, RemoteModule& m, const std::string& function = "stamp") {
  Tensor out = Tensor::empty({kElements}, DataType::Float(32), s.cpu());
  const std::vector<float> zeros(kElements, 0.0f);
  out.copy_from(zeros.data(), zeros.size() * sizeof(float));
  m[function](out);
  const Tensor host = out.to_host();
  const float first = host.host_span<float>()[0];
  for (int64_t i = 1; i < kElements; ++i) {
    if (host.host_span<float>()[i] != first) return -1.0f;
  }
  return first;
}

// The value every element of the host tensor `t` holds (-1 when they differ).
float stamped(const Tensor& t) {
  const float first = t.host_span<float>()[0];
  for (int64_t i = 1; i < t.numel(); ++i) {
    if (t.host_span<float>()[i] != first) return -1.0f;
  }
  return first;
}

std::vector<Any> zeros_argument() {
  Tensor out = Tensor::empty({kElements}, DataType::Float(32));
  for (int64_t i = 0; i < kElements; ++i) out.host_span<float>()[i] = 0.0f;
  return {Any(out)};
}

TEST(SameName, TheLibrariesDifferOnlyInTheirConstant) {
  // The premise of every test below: one file name, two contents, two answers.
  ASSERT_EQ(stamp_library(1).filename(), stamp_library(2).filename());
  Module one = load_module(stamp_library(1));
  Module two = load_module(stamp_library(2));
  std::vector<Any> args = zeros_argument();
  one["stamp"](args[0]);
  EXPECT_EQ(stamped(args[0].cast<Tensor>()), 1.0f);
  two["stamp"](args[0]);
  EXPECT_EQ(stamped(args[0].cast<Tensor>()), 2.0f);
}

// One session uploads a library, loads it, uploads another under the same name and loads that:
// both modules stay loaded and each runs its own code, calls interleaved.
TEST(SameName, TwoUploadsOfOneFileNameInOneSessionEachRunTheirOwnCode) {
  for (const SessionIsolation isolation : {SessionIsolation::kThread, SessionIsolation::kProcess}) {
    SCOPED_TRACE(name_of(isolation));
    Server server(same_name_server(isolation));
    RPCSession s = connect("127.0.0.1", server.port(), "same-name");
    s.upload(stamp_library(1), "libstamp.so");
    RemoteModule first = s.load_module("libstamp.so");
    EXPECT_EQ(remote_stamp(s, first), 1.0f);
    s.upload(stamp_library(2), "libstamp.so");
    RemoteModule second = s.load_module("libstamp.so");
    for (int round = 0; round < 3; ++round) {
      EXPECT_EQ(remote_stamp(s, second), 2.0f) << "round " << round;
      EXPECT_EQ(remote_stamp(s, first), 1.0f) << "round " << round;
    }
    // And back again: a third upload of the first library is a third module.
    s.upload(stamp_library(1), "libstamp.so");
    RemoteModule third = s.load_module("libstamp.so");
    EXPECT_EQ(remote_stamp(s, third), 1.0f);
    EXPECT_EQ(remote_stamp(s, second), 2.0f);
  }
}

// A VM executable imports the library by its path in the session: an executable loaded after the
// library was replaced calls the new one, the one loaded before keeps the old one.
TEST(SameName, VmImportsOfOneFileNameResolveToWhatWasThereAtLoad) {
  const std::string program =
      "kiln_vm 1\nimport \"lib/libstamp.so\"\npacked_func @stamp\n"
      "func @main(out) regs=1 {\n  call stamp in: %0 dst: %void\n  ret %0\n}\n";
  for (const SessionIsolation isolation : {SessionIsolation::kThread, SessionIsolation::kProcess}) {
    SCOPED_TRACE(name_of(isolation));
    Server server(same_name_server(isolation));
    RPCSession s = connect("127.0.0.1", server.port(), "same-name");
    s.upload_bytes(program, "prog.kvmt");
    s.upload(stamp_library(1), "lib/libstamp.so");
    RemoteModule before = s.load_module("prog.kvmt");
    s.upload(stamp_library(2), "lib/libstamp.so");
    RemoteModule after = s.load_module("prog.kvmt");
    EXPECT_EQ(remote_stamp(s, after, "main"), 2.0f);
    EXPECT_EQ(remote_stamp(s, before, "main"), 1.0f);
  }
}

// A VM executable may import two libraries of one file name from two folders; it loads (from
// their paths), but a package keys its files by name, so exporting it is refused with a reason
// instead of packing one library for both. The same library imported under two paths is one
// content: it is packed once and the package runs it.
TEST(SameName, AnExecutableImportingTwoLibrariesOfOneFileNameIsNotPackedAsOne) {
  kiln::TempDir dir;
  auto program = [](const fs::path& a, const fs::path& b) {
    return "kiln_vm 1\nimport \"" + a.string() + "\"\nimport \"" + b.string() +
           "\"\npacked_func @stamp\n"
           "func @main(out) regs=1 {\n  call stamp in: %0 dst: %void\n  ret %0\n}\n";
  };
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir.path() / name) << text;
    return dir.path() / name;
  };
  const Module both = load_module(write("both.kvmt", program(stamp_library(1), stamp_library(2))));
  try {
    both.export_library(dir.path() / "both.tar", "tar");
    ADD_FAILURE() << "two libraries named libstamp.so were packed under one name";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("two of its artifacts are named 'libstamp.so'"));
  }
  EXPECT_FALSE(fs::exists(dir.path() / "both.tar"));

  const fs::path same = stamp_library(1).parent_path() / ".." / "1" / "libstamp.so";
  const Module twice = load_module(write("twice.kvmt", program(stamp_library(1), same)));
  twice.export_library(dir.path() / "twice.tar", "tar");
  const Module back = load_module(dir.path() / "twice.tar");
  std::vector<Any> args = zeros_argument();
  back["main"](args[0]);
  EXPECT_EQ(stamped(args[0].cast<Tensor>()), 1.0f);
}

// Two sessions of one server at once upload different libraries under the same file name and
// call them in step: each session's calls answer with its own library.
TEST(SameName, TwoConcurrentSessionsUploadingOneFileNameEachRunTheirOwnCode) {
  for (const SessionIsolation isolation : {SessionIsolation::kThread, SessionIsolation::kProcess}) {
    SCOPED_TRACE(name_of(isolation));
    Server server(same_name_server(isolation, 2));
    std::barrier step(2);
    auto client = [&](int value) {
      std::vector<float> got;
      RPCSession s = connect("127.0.0.1", server.port(), "same-name");
      step.arrive_and_wait();  // both sessions are open
      s.upload(stamp_library(value), "libstamp.so");
      RemoteModule m = s.load_module("libstamp.so");
      step.arrive_and_wait();  // both libraries are loaded
      for (int round = 0; round < 5; ++round) {
        got.push_back(remote_stamp(s, m));
        step.arrive_and_wait();
      }
      return got;
    };
    auto one = std::async(std::launch::async, client, 1);
    auto two = std::async(std::launch::async, client, 2);
    EXPECT_THAT(one.get(), ::testing::Each(1.0f));
    EXPECT_THAT(two.get(), ::testing::Each(2.0f));
  }
}

// Farm fan-out: rpc_run names the file it uploads kiln_tmp_mod.<format> whatever the module,
// so points of two modules measured at once on two servers (one process: thread isolation)
// upload one name with two contents. Each point's output is its own module's.
TEST(SameName, FarmPointsOfModulesWithOneBaseNameEachMeasureTheirOwnModule) {
  TrackerOptions tracker_options;
  tracker_options.port = 0;
  Tracker tracker(tracker_options);
  std::vector<std::unique_ptr<Server>> servers;
  for (int i = 0; i < 2; ++i) {
    ServerOptions o = same_name_server(SessionIsolation::kThread);
    o.tracker = "127.0.0.1:" + std::to_string(tracker.port());
    servers.push_back(std::make_unique<Server>(o));
  }
  ASSERT_TRUE(kiln::test::wait_until(
      [&] {
        for (const auto& q : connect_tracker("127.0.0.1", tracker.port()).summary().queues) {
          if (q.key == "same-name") return q.free == 2;
        }
        return false;
      },
      10s));
  RPCConfig config;
  config.tracker_host = "127.0.0.1";
  config.tracker_port = tracker.port();
  config.tracker_key = "same-name";
  config.session_timeout_sec = 60;
  config.request_wait_sec = 30;
  const Module modules[2] = {load_module(stamp_library(1)), load_module(stamp_library(2))};
  for (const std::string exporter : {"so", "tar"}) {
    SCOPED_TRACE(exporter);
    auto point = [&](int value) {
      std::vector<float> got;
      for (int round = 0; round < 3; ++round) {
        testing::RunResult r = testing::rpc_run(modules[value - 1], "cpu", zeros_argument(),
                                                EvaluatorConfig{1, 1, 0, false}, config, exporter);
        got.push_back(stamped(r.outputs.at(0).cast<Tensor>()));
      }
      return got;
    };
    auto one = std::async(std::launch::async, point, 1);
    auto two = std::async(std::launch::async, point, 2);
    EXPECT_THAT(one.get(), ::testing::Each(1.0f));
    EXPECT_THAT(two.get(), ::testing::Each(2.0f));
  }
}

// An isolated measurement worker serves every run in one process and one session directory:
// artifacts of one file name (run_artifact) and exports of modules loaded from one file name
// (run) alternate, and each run answers with its own library.
TEST(SameName, AMeasurementWorkerRunsEachArtifactOfOneNameAsItsOwn) {
  testing::MeasurementWorker worker(Runtime::global());
  const EvaluatorConfig quick{1, 1, 0, false};
  for (int round = 0; round < 2; ++round) {
    for (const int value : {1, 2}) {
      const testing::RunResult r =
          worker.run_artifact(stamp_library(value), "cpu", zeros_argument(), quick);
      EXPECT_EQ(stamped(r.outputs.at(0).cast<Tensor>()), static_cast<float>(value))
          << "round " << round;
    }
  }
  const Module modules[2] = {load_module(stamp_library(1)), load_module(stamp_library(2))};
  for (const std::string exporter : {"so", "tar"}) {
    for (const int value : {1, 2, 1}) {
      const testing::RunResult r =
          worker.run(modules[value - 1], "cpu", zeros_argument(), quick, exporter);
      EXPECT_EQ(stamped(r.outputs.at(0).cast<Tensor>()), static_cast<float>(value)) << exporter;
    }
  }
  EXPECT_EQ(worker.starts(), 1) << "one worker process served every run";
}

// local_run exports each module to kiln_tmp_mod.<format> in a directory of its own and loads it
// in this process, where the other module is loaded too.
TEST(SameName, LocalRunsOfModulesWithOneBaseNameEachRunTheirOwnModule) {
  const Module modules[2] = {load_module(stamp_library(1)), load_module(stamp_library(2))};
  for (const std::string exporter : {"so", "tar"}) {
    for (const int value : {1, 2, 1, 2}) {
      const testing::RunResult r = testing::local_run(modules[value - 1], "cpu", zeros_argument(),
                                                      EvaluatorConfig{1, 1, 0, false}, exporter);
      EXPECT_EQ(stamped(r.outputs.at(0).cast<Tensor>()), static_cast<float>(value)) << exporter;
    }
  }
}

// A thread-isolated server serves every session in one process, whose dynamic loader knows each
// library a session loaded by its path: a later session's directory must never have an earlier
// one's name, also once that directory is gone (mkdtemp alone may hand out a free name again).
TEST(SameName, SessionDirectoryNamesNeverComeBack) {
  kiln::TempDir parent;
  std::set<std::string> names;
  for (int i = 0; i < 200; ++i) {
    const fs::path dir = make_session_directory(parent.path());
    EXPECT_TRUE(fs::is_directory(dir));
    EXPECT_TRUE(names.insert(dir.filename().string()).second) << dir << " came back";
    remove_session_directory(dir);  // free again, as when its session ends
  }
  EXPECT_TRUE(fs::is_empty(parent.path()));
}

}  // namespace
}  // namespace kiln::rpc
