// SPDX-License-Identifier: Apache-2.0
// kiln::sdk::TempDir: created private under $TMPDIR, removed with its contents on scope exit,
// also when the scope is left by an exception, and ownership moves with the object.
#include "kiln/sdk/support/temp_dir.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <utility>

#include "kiln/sdk/error.hpp"

namespace kiln::sdk {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// Fills `dir` with a file and a subfolder holding another file.
void populate(const fs::path& dir) {
  std::ofstream(dir / "a.txt") << "a";
  fs::create_directory(dir / "sub");
  std::ofstream(dir / "sub" / "b.txt") << "b";
}

TEST(TempDir, IsAPrivateDirectoryNamedAfterThePrefix) {
  const TempDir dir("kiln_temp_dir_test_");
  ASSERT_TRUE(fs::is_directory(dir.path()));
  EXPECT_THAT(dir.path().filename().string(), StartsWith("kiln_temp_dir_test_"));
  struct stat st {};
  ASSERT_EQ(::stat(dir.path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
}

TEST(TempDir, EmptyDirectoryIsRemovedOnScopeExit) {
  fs::path path;
  {
    const TempDir dir("kiln_temp_dir_test_");
    path = dir.path();
    ASSERT_TRUE(fs::exists(path));
  }
  EXPECT_FALSE(fs::exists(path));
}

TEST(TempDir, NonEmptyDirectoryIsRemovedOnScopeExit) {
  fs::path path;
  {
    const TempDir dir("kiln_temp_dir_test_");
    path = dir.path();
    populate(path);
    ASSERT_TRUE(fs::exists(path / "sub" / "b.txt"));
  }
  EXPECT_FALSE(fs::exists(path));
}

TEST(TempDir, IsRemovedWhenAnExceptionLeavesTheScope) {
  fs::path path;
  try {
    const TempDir dir("kiln_temp_dir_test_");
    path = dir.path();
    populate(path);
    throw std::runtime_error("boom");
  } catch (const std::runtime_error&) {
  }
  ASSERT_FALSE(path.empty());
  EXPECT_FALSE(fs::exists(path));
}

TEST(TempDir, MoveTransfersOwnership) {
  fs::path path;
  {
    TempDir outer("kiln_temp_dir_test_");
    path = outer.path();
    {
      TempDir inner(std::move(outer));
      EXPECT_TRUE(outer.path().empty());
      EXPECT_EQ(inner.path(), path);
    }
    // The moved-to object removed it; the moved-from one must not have.
    EXPECT_FALSE(fs::exists(path));
  }
}

// Sets TMPDIR for the life of the object and restores the previous value after.
class ScopedTmpdir {
 public:
  explicit ScopedTmpdir(const std::string& value) {
    const char* old = std::getenv("TMPDIR");
    had_ = old != nullptr;
    if (had_) old_ = old;
    ::setenv("TMPDIR", value.c_str(), 1);
  }
  ~ScopedTmpdir() {
    if (had_) {
      ::setenv("TMPDIR", old_.c_str(), 1);
    } else {
      ::unsetenv("TMPDIR");
    }
  }

 private:
  bool had_ = false;
  std::string old_;
};

TEST(TempDir, HonoursTmpdir) {
  const TempDir base("kiln_temp_dir_base_");
  const ScopedTmpdir tmpdir(base.path().string());
  const TempDir dir("kiln_temp_dir_test_");
  EXPECT_EQ(dir.path().parent_path(), base.path());
}

TEST(TempDir, MissingBaseIsARuntimeErrorNamingIt) {
  const ScopedTmpdir tmpdir("/nonexistent/kiln_temp_dir_test");
  try {
    const TempDir dir("kiln_temp_dir_test_");
    FAIL() << "created " << dir.path();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), KILN_ERROR_RUNTIME);
    EXPECT_THAT(e.what(), HasSubstr("/nonexistent/kiln_temp_dir_test/kiln_temp_dir_test_"));
  }
}

TEST(TempDir, PrefixWithASlashIsRefused) {
  try {
    const TempDir dir("../escape_");
    FAIL() << "created " << dir.path();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), KILN_ERROR_VALUE);
  }
}

}  // namespace
}  // namespace kiln::sdk
