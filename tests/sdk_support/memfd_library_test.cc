// SPDX-License-Identifier: Apache-2.0
// kiln::sdk::dlopen_bytes: a library loads from bytes held in memory, each load is a copy of
// its own (the /proc/self/fd name probing), and bad input is refused with the right codes.
#include "kiln/sdk/support/memfd_library.hpp"

#include <dlfcn.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <string>

#include "kiln/sdk/error.hpp"

namespace kiln::sdk {
namespace {

using ::testing::HasSubstr;

// The bytes of the small test library (tests/sdk_support/memfd_test_library.c).
std::string library_bytes() {
  std::ifstream in(KILN_MEMFD_TEST_LIBRARY, std::ios::binary);
  EXPECT_TRUE(in) << "cannot read " << KILN_MEMFD_TEST_LIBRARY;
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

using BumpFn = int (*)();

// The library's counter function in `handle`.
BumpFn bump_of(void* handle) {
  void* symbol = ::dlsym(handle, "kiln_memfd_test_bump");
  EXPECT_NE(symbol, nullptr);
  return reinterpret_cast<BumpFn>(symbol);
}

TEST(DlopenBytes, LoadsASmallLibraryFromMemory) {
  const std::string bytes = library_bytes();
  ASSERT_FALSE(bytes.empty());
  void* handle = dlopen_bytes(bytes.data(), bytes.size(), "kiln-memfd-test");
  ASSERT_NE(handle, nullptr);
  const BumpFn bump = bump_of(handle);
  ASSERT_NE(bump, nullptr);
  EXPECT_EQ(bump(), 1);
  EXPECT_EQ(bump(), 2);
  EXPECT_EQ(::dlclose(handle), 0);
}

TEST(DlopenBytes, EachLoadWhileAnotherIsLoadedIsACopyOfItsOwn) {
  // The first load's descriptor is closed on return, so the second memory file gets the same
  // number; without probing, dlopen would return the first library again, sharing its counter.
  const std::string bytes = library_bytes();
  void* first = dlopen_bytes(bytes.data(), bytes.size(), "kiln-memfd-test-1");
  void* second = dlopen_bytes(bytes.data(), bytes.size(), "kiln-memfd-test-2");
  EXPECT_NE(first, second);
  EXPECT_EQ(bump_of(first)(), 1);
  EXPECT_EQ(bump_of(first)(), 2);
  EXPECT_EQ(bump_of(second)(), 1);
  ::dlclose(second);
  ::dlclose(first);
}

TEST(DlopenBytes, BytesThatAreNoLibraryAreAValueErrorWithTheLoadersReason) {
  const std::string junk = "this is not an ELF file";
  try {
    dlopen_bytes(junk.data(), junk.size(), "junk");
    FAIL() << "loaded junk";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), KILN_ERROR_VALUE);
    EXPECT_THAT(e.what(), HasSubstr("cannot load junk: cannot load it from memory: "));
  }
}

TEST(DlopenBytes, NoBytesIsAValueError) {
  try {
    dlopen_bytes(nullptr, 0, "nothing");
    FAIL() << "loaded nothing";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), KILN_ERROR_VALUE);
    EXPECT_THAT(e.what(), HasSubstr("nothing"));
  }
}

}  // namespace
}  // namespace kiln::sdk
