// SPDX-License-Identifier: Apache-2.0
// A count of the heap allocations this test binary makes through the global operator new,
// which allocation_counter.cc replaces. Lets a test prove a path allocates nothing.
#ifndef KILN_TESTS_SDK_SUPPORT_ALLOCATION_COUNTER_H_
#define KILN_TESTS_SDK_SUPPORT_ALLOCATION_COUNTER_H_

namespace kiln::testing {

// Allocations made through any form of operator new since the process started, on any thread.
long allocation_count();

}  // namespace kiln::testing

using kiln::testing::allocation_count;

#endif  // KILN_TESTS_SDK_SUPPORT_ALLOCATION_COUNTER_H_
