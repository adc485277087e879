// SPDX-License-Identifier: Apache-2.0
// kiln::sdk::AtomicFile: `path` is replaced whole on commit, never partially written, and a
// write that fails midway leaves the old file and no temporary file behind.
#include "kiln/sdk/support/atomic_file.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "kiln/sdk/error.hpp"
#include "kiln/sdk/support/temp_dir.hpp"

namespace kiln::sdk {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string read(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The names of the entries of `dir`, sorted.
std::vector<std::string> entries(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.push_back(entry.path().filename());
  std::sort(names.begin(), names.end());
  return names;
}

ino_t inode(const fs::path& file) {
  struct stat st {};
  EXPECT_EQ(::stat(file.c_str(), &st), 0) << file;
  return st.st_ino;
}

TEST(AtomicFile, ReplacesTheFileOnlyOnCommit) {
  const TempDir dir("kiln_atomic_file_test_");
  const fs::path target = dir.path() / "out.bin";
  std::ofstream(target) << "old contents";
  const ino_t old_inode = inode(target);
  // A reader that opened the old file keeps seeing it whole.
  std::ifstream reader(target, std::ios::binary);
  {
    AtomicFile file(target);
    file.write("new ");
    file.write(std::string(10000, 'x'));
    EXPECT_EQ(read(target), "old contents");  // nothing visible before commit
    EXPECT_TRUE(fs::exists(file.temp_path()));
    EXPECT_EQ(file.temp_path().parent_path(), dir.path());
    file.commit();
    EXPECT_FALSE(fs::exists(file.temp_path()));
  }
  EXPECT_EQ(read(target), "new " + std::string(10000, 'x'));
  EXPECT_NE(inode(target), old_inode);  // renamed over, not rewritten in place
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(reader), {}), "old contents");
  EXPECT_THAT(entries(dir.path()), ElementsAre("out.bin"));
}

// Lowers RLIMIT_FSIZE so that writes past `bytes` fail with EFBIG (SIGXFSZ ignored), and
// restores both on destruction.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    EXPECT_EQ(::getrlimit(RLIMIT_FSIZE, &old_), 0);
    old_handler_ = ::signal(SIGXFSZ, SIG_IGN);
    rlimit limit = old_;
    limit.rlim_cur = bytes;
    EXPECT_EQ(::setrlimit(RLIMIT_FSIZE, &limit), 0);
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &old_);
    ::signal(SIGXFSZ, old_handler_);
  }

 private:
  rlimit old_{};
  sighandler_t old_handler_ = SIG_DFL;
};

TEST(AtomicFile, WriteFailingMidwayLeavesTheOldFileAndNoPartialFile) {
  const TempDir dir("kiln_atomic_file_test_");
  const fs::path target = dir.path() / "out.bin";
  std::ofstream(target) << "old contents";
  {
    AtomicFile file(target);
    {
      const FileSizeLimit limit(4096);
      try {
        file.write(std::string(64 * 1024, 'x'));
        FAIL() << "a 64 KiB write under a 4 KiB file size limit succeeded";
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), KILN_ERROR_RUNTIME);
        EXPECT_THAT(e.what(), HasSubstr(file.temp_path().string()));
        EXPECT_THAT(e.what(), HasSubstr("File too large"));
      }
    }
    // The first 4 KiB did reach the temporary file: the failure really was midway.
    EXPECT_EQ(fs::file_size(file.temp_path()), 4096u);
    EXPECT_EQ(read(target), "old contents");
  }
  EXPECT_EQ(read(target), "old contents");
  EXPECT_THAT(entries(dir.path()), ElementsAre("out.bin"));
}

TEST(AtomicFile, AbandonedWithoutCommitRemovesTheTemporaryFile) {
  const TempDir dir("kiln_atomic_file_test_");
  const fs::path target = dir.path() / "new.bin";
  {
    AtomicFile file(target);
    file.write("partial");
    ASSERT_TRUE(fs::exists(file.temp_path()));
  }
  EXPECT_TRUE(entries(dir.path()).empty());
}

TEST(AtomicFile, CommitsAFileWrittenByAnotherWriter) {
  const TempDir dir("kiln_atomic_file_test_");
  const fs::path target = dir.path() / "out.bin";
  AtomicFile file(target);
  std::ofstream(file.temp_path()) << "from a compiler";
  file.commit();
  EXPECT_EQ(read(target), "from a compiler");
}

TEST(AtomicFile, CommitWithoutATemporaryFileFailsAndLeavesThePath) {
  const TempDir dir("kiln_atomic_file_test_");
  const fs::path target = dir.path() / "out.bin";
  std::ofstream(target) << "old contents";
  AtomicFile file(target);
  EXPECT_THROW(file.commit(), Error);
  EXPECT_EQ(read(target), "old contents");
}

TEST(AtomicFile, TemporaryNamesAreDistinct) {
  const AtomicFile a("/tmp/kiln_same_target");
  const AtomicFile b("/tmp/kiln_same_target");
  EXPECT_NE(a.temp_path(), b.temp_path());
}

TEST(AtomicFile, MissingFolderIsNotFound) {
  const TempDir dir("kiln_atomic_file_test_");
  AtomicFile file(dir.path() / "missing" / "out.bin");
  try {
    file.write("x");
    FAIL() << "wrote into a missing folder";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), KILN_ERROR_NOT_FOUND);
    EXPECT_THAT(e.what(), HasSubstr("missing"));
  }
}

TEST(AtomicFile, EmptyPathIsAValueError) {
  try {
    AtomicFile file("");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), KILN_ERROR_VALUE);
  }
}

TEST(WriteFileAtomically, CreatesAndReplaces) {
  const TempDir dir("kiln_atomic_file_test_");
  const fs::path target = dir.path() / "out.txt";
  write_file_atomically(target, "");
  EXPECT_TRUE(fs::exists(target));
  EXPECT_EQ(fs::file_size(target), 0u);
  write_file_atomically(target, "second");
  EXPECT_EQ(read(target), "second");
  EXPECT_THAT(entries(dir.path()), ElementsAre("out.txt"));
}

}  // namespace
}  // namespace kiln::sdk
