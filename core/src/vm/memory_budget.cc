// SPDX-License-Identifier: Apache-2.0
#include "vm/memory_budget.h"

#include <fmt/format.h>

#include <utility>

#include "kiln/error.h"

namespace kiln::vm {
namespace {
thread_local std::shared_ptr<MemoryBudget> t_budget;
}  // namespace

MemoryBudget::MemoryBudget(uint64_t limit, std::string source)
    : limit_(limit), source_(std::move(source)) {}

bool MemoryBudget::try_charge(uint64_t nbytes) {
  uint64_t used = used_.load(std::memory_order_relaxed);
  do {
    if (limit_ > 0 && (nbytes > limit_ || used > limit_ - nbytes)) return false;
  } while (!used_.compare_exchange_weak(used, used + nbytes, std::memory_order_relaxed));
  return true;
}

void MemoryBudget::charge(uint64_t nbytes, std::string_view what) {
  if (try_charge(nbytes)) return;
  throw OutOfMemoryError(
      fmt::format("{} {} bytes would exceed the memory limit of {} bytes ({} held; {})", what,
                  nbytes, limit_, used(), source_));
}

void MemoryBudget::refund(uint64_t nbytes) noexcept {
  used_.fetch_sub(nbytes, std::memory_order_relaxed);
}

bool MemoryBudget::fits(uint64_t nbytes) const {
  const uint64_t held = used();
  return limit_ == 0 || (nbytes <= limit_ && held <= limit_ - nbytes);
}

ScopedMemoryBudget::ScopedMemoryBudget(std::shared_ptr<MemoryBudget> budget)
    : previous_(std::exchange(t_budget, std::move(budget))) {}

ScopedMemoryBudget::~ScopedMemoryBudget() { t_budget = std::move(previous_); }

std::shared_ptr<MemoryBudget> current_memory_budget() { return t_budget; }

}  // namespace kiln::vm
