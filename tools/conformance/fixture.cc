// SPDX-License-Identifier: Apache-2.0
#include "fixture.h"

#include <fmt/format.h>

namespace kiln::conformance {

void ConformanceTest::SetUp() {
  TargetTest::SetUp();
  if (IsSkipped() || HasFatalFailure()) return;
  ledger_ = std::make_shared<AllocationLedger>();
  backend_ = make_accounting_backend(target_.backend, ledger_);
  context_ = std::make_shared<AccountingContext>(runtime_, backend_);
  device_ = Device{backend_->dl_device_type(), 0};
}

void ConformanceTest::TearDown() {
  // A test that failed or skipped may have stopped before freeing what it allocated: only a
  // test that otherwise passed is judged, so that the leak verdict is the plugin's alone.
  if (!ledger_ || HasFailure() || IsSkipped()) return;
  for (const std::string& problem : ledger_->problems()) {
    ADD_FAILURE() << plugin_text() << ": " << problem;
  }
  const std::string leak = unreturned_allocations(*ledger_, plugin_text());
  if (!leak.empty()) ADD_FAILURE() << leak;
}

std::string ConformanceTest::plugin_text() const {
  return fmt::format("plugin {} (device type {})", backend_->plugin_name(), target_.name);
}

const ModuleSpec* ConformanceTest::conformance_module(std::string& why_not) const {
  if (!backend_->has_modules()) {
    why_not = "the backend has no module slots (it runs no kernels)";
  } else if (!target_.module) {
    why_not = fmt::format("no conformance module given for {} (--module {}:PATH:FORMAT:KERNEL)",
                          target_.name, target_.name);
  }
  return why_not.empty() ? &*target_.module : nullptr;
}

std::string unreturned_allocations(const AllocationLedger& ledger, const std::string& who) {
  const AllocationLedger::Totals totals = ledger.totals();
  if (totals.outstanding == 0) return "";
  const std::string why =
      totals.failed_frees > 0
          ? fmt::format(
                "free returned an error {} time(s), and an allocation whose free failed "
                "is still the plugin's",
                totals.failed_frees)
          : std::string("the test never asked to free them, a bug of the conformance kit");
  return fmt::format(
      "leak: {} of the {} allocation(s) this test made through {} were not freed ({} of {} "
      "bytes): {}",
      totals.outstanding, totals.allocations, who, totals.outstanding_bytes, totals.allocated_bytes,
      why);
}

}  // namespace kiln::conformance
