// SPDX-License-Identifier: Apache-2.0
// Claims on dynamic-loader objects (kiln/sdk/support/library_claims.hpp): a handle the dynamic
// loader returns twice (the same library opened again by path) is refused the second time, and
// a closed claim frees the handle for a new load.
#include "kiln/sdk/support/library_claims.hpp"

#include <dlfcn.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "kiln/c/abi.h"
#include "kiln/sdk/error.hpp"

namespace kiln::sdk {
namespace {

using ::testing::HasSubstr;

void* open_test_library() {
  void* handle = ::dlopen(KILN_MEMFD_TEST_LIBRARY, RTLD_NOW | RTLD_LOCAL);
  EXPECT_NE(handle, nullptr) << ::dlerror();
  return handle;
}

TEST(LibraryClaims, ASecondClaimOnOneObjectIsRefused) {
  void* first = open_test_library();
  ASSERT_TRUE(claim_library(first));
  void* second = open_test_library();  // the loader's own object again, by its path
  ASSERT_EQ(second, first);
  EXPECT_FALSE(claim_library(second));
  try {
    claim_library_or_close(second, "the test library");  // closes the reference it took
    FAIL() << "a second claim was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), KILN_ERROR_RUNTIME);
    EXPECT_THAT(e.what(), HasSubstr("cannot load the test library"));
    EXPECT_THAT(e.what(), HasSubstr("returned an object that is loaded already"));
  }
  close_claimed_library(first);  // the first load's reference (the second's is closed)
  // Closed and unclaimed: the next load may be claimed (whatever address it has).
  void* again = open_test_library();
  EXPECT_TRUE(claim_library(again));
  close_claimed_library(again);
  close_claimed_library(nullptr);  // nothing
}

}  // namespace
}  // namespace kiln::sdk
