// SPDX-License-Identifier: Apache-2.0
// The GoogleTest fixtures of the conformance suite (suite.h registers them): one per kind of
// target, each running a plain test body bound to one target at run time. Internal to the kit.
#ifndef KILN_TOOLS_CONFORMANCE_FIXTURE_H_
#define KILN_TOOLS_CONFORMANCE_FIXTURE_H_

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "accounting_backend.h"
#include "kiln/kiln.h"
#include "kiln/profiling/collector.h"
#include "suite.h"

namespace kiln::conformance {

// What every fixture shares: a target, whose disposition SetUp applies (skip or fail with the
// target's reason), and a body that is a plain function, so that the same test code registers
// once per target at run time. GoogleTest requires one fixture class per test suite, hence one
// class per kind of target, each deriving from this with itself as `Self`.
template <typename Self>
class TargetTest : public ::testing::Test {
 public:
  using Body = void (*)(Self&);
  TargetTest(const Runtime& runtime, const Target& target, Body body)
      : runtime_(runtime), target_(target), body_(body) {}

  void SetUp() override {
    switch (target_.disposition) {
      case Target::Disposition::kSkip:
        GTEST_SKIP() << target_.name << ": " << target_.reason;
      case Target::Disposition::kFail:
        FAIL() << target_.name << ": " << target_.reason;
      case Target::Disposition::kRun:
        break;
    }
  }
  void TestBody() override { body_(static_cast<Self&>(*this)); }

  const Runtime& runtime_;
  const Target& target_;
  Body body_;
};

// One device test, bound to one device type (the fixture of "DeviceConformance/*"). The test
// reaches the plugin through the kit's own dispatch (accounting_backend.h): `backend_` and the
// Tensors it makes with `context_` allocate through it, so TearDown can fail a test that
// leaves anything it allocated unfreed.
class ConformanceTest : public TargetTest<ConformanceTest> {
 public:
  using TargetTest::TargetTest;

  void SetUp() override;
  // Fails the test, when nothing else did, if an allocation it made is still outstanding.
  void TearDown() override;

  // "plugin stub_faults (device type stub_faults)": who a failure message blames.
  std::string plugin_text() const;
  // The target's conformance module (--module), or null with `why_not` set when the tests that
  // launch it must skip or do without: the backend has no module slots, or no module was given.
  const ModuleSpec* conformance_module(std::string& why_not) const;

  Ref<DeviceBackend> backend_;  // the accounting backend for the target's plugin
  Device device_;
  std::shared_ptr<AllocationLedger> ledger_;
  std::shared_ptr<AccountingContext> context_;
};

// One collector test, bound to one collector target (the fixture of "CollectorConformance/*").
class CollectorTest : public TargetTest<CollectorTest> {
 public:
  using TargetTest::TargetTest;

  // A fresh collector instance (its own init/teardown cycle), initialised for the host.
  std::shared_ptr<profiling::MetricCollector> make() const {
    auto c = profiling::plugin_collector(target_.name, runtime_);
    c->init({Device::cpu()});
    return c;
  }
};

// The allocations `ledger` still counts as outstanding, as a failure message naming their count
// and bytes and `who` ("plugin x (device type y)"); "" when there are none.
std::string unreturned_allocations(const AllocationLedger& ledger, const std::string& who);

// ---- the deeper device tests (depth_tests.cc; docs/conformance.md says what each checks) ----

// 48 allocations of 16 MiB, each freed at once: every one freed without error, and the process's
// virtual memory does not keep them.
void returns_freed_memory(ConformanceTest& t);
// An allocation of max_alloc_bytes + 1 (a device attribute) is an error.
void refuses_allocations_over_the_limit(ConformanceTest& t);
// The device timer around device-to-device copies (64 MiB each, enough of them for 20 ms) is
// above 0, within a factor of 20 of the host's steady clock around the same synchronized run
// both ways, and no faster than memory can be: a timer stuck at 0 or in the wrong unit fails
// without any vendor input.
void timer_measures_device_copies(ConformanceTest& t);
// The device timer around a kernel of known duration (--timing-kernel) is plausible against
// the host's steady clock.
void timer_matches_a_kernel_of_known_duration(ConformanceTest& t);
// 4 threads allocate, copy in, launch, copy out and free on their own buffers at once.
void works_from_four_threads(ConformanceTest& t);
// The conformance kernel's values over several lengths and alphas, element by element.
void computes_correct_results(ConformanceTest& t);

}  // namespace kiln::conformance

#endif  // KILN_TOOLS_CONFORMANCE_FIXTURE_H_
