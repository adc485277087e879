// SPDX-License-Identifier: Apache-2.0
// rpc::local_session(runtime) (TVM's rpc.LocalSession) and the match-key helpers random_key and
// split_random_key (SPEC §4.4, §4.5; issue 19 item 5).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/rpc/session.h"
#include "kiln/rpc/tracker.h"

namespace kiln::rpc {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::StartsWith;

TEST(LocalSession, OffersTheClientApiInProcess) {
  RPCSession s = local_session(Runtime::global());
  // Files: the same API as a remote session, in a private directory.
  s.upload_bytes("hello", "dir/a.txt");
  EXPECT_EQ(s.download("dir/a.txt"), "hello");
  EXPECT_EQ(s.listdir(), std::vector<std::string>{"dir/"});
  EXPECT_THROW(s.download("../outside"), RPCError);
  s.remove("dir");
  EXPECT_TRUE(s.listdir().empty());
  // Devices are remote devices of the session; copies round-trip.
  const Device dev = s.cpu();
  EXPECT_TRUE(dev.is_remote());
  EXPECT_EQ(s.device_count("cpu"), 1);
  std::vector<float> in = {1, 2, 3, 4}, out(4);
  Tensor t = Tensor::empty({4}, DataType::Float(32), dev);
  t.copy_from(in.data(), in.size() * sizeof(float));
  t.copy_to(out.data(), out.size() * sizeof(float));
  EXPECT_EQ(out, in);
  // Modules load from the work directory and run, as on a server.
  s.upload(fs::path(KILN_EXAMPLE_KERNEL_DIR) / "libvector_add.so", "libvector_add.so");
  RemoteModule m = s.load_module("libvector_add.so");
  Tensor c = Tensor::empty({4}, DataType::Float(32), dev);
  m.get_function("vector_add")(t, t, c, 1.0);  // c = t + 1.0 * t
  c.copy_to(out.data(), out.size() * sizeof(float));
  EXPECT_EQ(out, (std::vector<float>{2, 4, 6, 8}));
}

TEST(LocalSession, SessionsAreIndependentAndCloseCleanly) {
  RPCSession a = local_session(Runtime::global());
  RPCSession b = local_session(Runtime::global());
  EXPECT_NE(a.index(), b.index());
  a.upload_bytes("x", "only_in_a");
  EXPECT_TRUE(b.listdir().empty());
  a.close();
  EXPECT_TRUE(a.closed());
  try {
    a.listdir();
    FAIL();
  } catch (const RuntimeError& e) {
    EXPECT_THAT(e.what(), HasSubstr("is closed"));
  }
  EXPECT_EQ(b.device_count("cpu"), 1);
}

TEST(MatchKeys, RandomKeyHasThePrefixAndAvoidsUsedKeys) {
  const std::string k = random_key("jetson");
  EXPECT_THAT(k, StartsWith("jetson:0."));  // "<prefix>:<random in [0, 1)>" as the reference's
  std::set<std::string> used;
  for (int i = 0; i < 200; ++i) {
    const std::string next = random_key("k", used);
    EXPECT_EQ(used.count(next), 0u);
    used.insert(next);
  }
  EXPECT_EQ(used.size(), 200u);
}

TEST(MatchKeys, SplitRandomKeySplitsAtTheLastColon) {
  EXPECT_EQ(split_random_key("jetson:0.25"),
            std::make_pair(std::string("jetson"), std::string("0.25")));
  // Keys with ':' of their own (apache/tvm#13420).
  EXPECT_EQ(split_random_key("127.0.0.1:5555:0.5"),
            std::make_pair(std::string("127.0.0.1:5555"), std::string("0.5")));
  EXPECT_EQ(split_random_key("plain"), std::make_pair(std::string("plain"), std::string()));
  const std::string key = random_key("a:b");
  EXPECT_EQ(split_random_key(key).first, "a:b");
}

}  // namespace
}  // namespace kiln::rpc
