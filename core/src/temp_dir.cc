// SPDX-License-Identifier: Apache-2.0
#include "kiln/temp_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "kiln/error.h"
#include "kiln/sdk/error.hpp"
#include "kiln/sdk/support/temp_dir.hpp"

namespace kiln {
namespace {

// ----- Removal with system calls only (usable in a signal handler) -----

// Deeper trees are left alone: these directories hold a few files and an unpacked package.
constexpr int kMaxDepth = 16;

// The kernel's record for getdents64 (glibc only wraps it since 2.30).
struct LinuxDirent64 {
  uint64_t d_ino;
  int64_t d_off;
  unsigned short d_reclen;
  unsigned char d_type;
  char d_name[1];
};

bool is_dot_or_dot_dot(const char* name) {
  return name[0] == '.' && (name[1] == '\0' || (name[1] == '.' && name[2] == '\0'));
}

// Removes `name` in the directory `parent_fd` with everything in it. Never follows a link
// (a link is removed, not what it points to). No allocation: a small buffer per level.
void remove_tree_at(int parent_fd, const char* name, int depth) noexcept {
  if (::unlinkat(parent_fd, name, 0) == 0 || errno == ENOENT) return;
  if (errno != EISDIR && errno != EPERM) return;  // unlink(2) of a directory gives either
  if (depth >= kMaxDepth) return;
  // Removing entries while reading the directory may skip some: read it again until it can go.
  for (int pass = 0; pass < 8; ++pass) {
    const int fd = ::openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return;
    alignas(8) char buffer[2048];
    long n = 0;
    while ((n = ::syscall(SYS_getdents64, fd, buffer, sizeof buffer)) > 0) {
      for (long offset = 0; offset < n;) {
        const auto* entry = reinterpret_cast<const LinuxDirent64*>(buffer + offset);
        offset += entry->d_reclen;
        if (is_dot_or_dot_dot(entry->d_name)) continue;
        if (entry->d_type == DT_DIR) {
          remove_tree_at(fd, entry->d_name, depth + 1);
        } else if (::unlinkat(fd, entry->d_name, 0) != 0 && errno != ENOENT) {
          remove_tree_at(fd, entry->d_name, depth + 1);  // DT_UNKNOWN: maybe a directory
        }
      }
    }
    ::close(fd);
    if (::unlinkat(parent_fd, name, AT_REMOVEDIR) == 0 || errno == ENOENT) return;
    if (errno != ENOTEMPTY && errno != EEXIST) return;
  }
}

// ----- The live directories of this process, for the signal handler -----

// A fixed table, so the handler reads it without locks or allocation. A directory that finds
// no free slot is still removed by its destructor, only not by the handler.
constexpr int kSlots = 64;
enum SlotState : int { kFree = 0, kBusy = 1, kLive = 2 };
struct Slot {
  std::atomic<int> state{kFree};
  char path[PATH_MAX];
};
Slot g_slots[kSlots];
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler reads slot states");

int register_directory(const std::string& path) {
  if (path.size() >= PATH_MAX) return -1;
  for (int i = 0; i < kSlots; ++i) {
    int expected = kFree;
    if (g_slots[i].state.compare_exchange_strong(expected, kBusy)) {
      std::memcpy(g_slots[i].path, path.c_str(), path.size() + 1);
      g_slots[i].state.store(kLive);
      return i;
    }
  }
  return -1;
}

void remove_live_directories() noexcept {
  for (Slot& slot : g_slots) {
    if (slot.state.load() == kLive) remove_tree_at(AT_FDCWD, slot.path, 0);
  }
}

// ----- Signals -----

constexpr int kCleanupSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
struct sigaction g_previous[NSIG];

void on_signal(int signal_number) {
  const int saved_errno = errno;
  remove_live_directories();
  // The handler that was there before (the default: terminate) gets the signal once this one
  // returns: it is blocked while this handler runs.
  ::sigaction(signal_number, &g_previous[signal_number], nullptr);
  ::raise(signal_number);
  errno = saved_errno;
}

std::string default_parent() {
  const char* base = std::getenv("TMPDIR");
  return base != nullptr && *base != '\0' ? base : "/tmp";
}

}  // namespace

TemporaryDirectory::TemporaryDirectory(const std::string& prefix) {
  try {
    dir_ = std::make_unique<sdk::TempDir>(prefix);
  } catch (const sdk::Error& e) {
    if (e.code() == KILN_ERROR_VALUE) throw ValueError(e.what());
    throw RuntimeError(e.what());
  }
  slot_ = register_directory(dir_->path().string());
  // The lock first, then the marker: a marked directory whose lock is free has no owner.
  lock_fd_ = ::open(dir_->path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (lock_fd_ >= 0 && ::flock(lock_fd_, LOCK_EX | LOCK_NB) == 0) {
    const int marker = ::openat(lock_fd_, kOwnerMarker,
                                O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (marker >= 0) {
      const std::string pid = std::to_string(::getpid()) + "\n";
      [[maybe_unused]] const ssize_t written = ::write(marker, pid.data(), pid.size());
      ::close(marker);
    }
  }
}

TemporaryDirectory::~TemporaryDirectory() {
  dir_.reset();  // removes the directory
  if (slot_ >= 0) g_slots[slot_].state.store(kFree);
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

const std::filesystem::path& TemporaryDirectory::path() const { return dir_->path(); }

size_t remove_stale_temporary_directories(const std::filesystem::path& parent_in) {
  const std::string parent = parent_in.empty() ? default_parent() : parent_in.string();
  DIR* dir = ::opendir(parent.c_str());
  if (dir == nullptr) return 0;
  const int parent_fd = ::dirfd(dir);
  size_t removed = 0;
  while (const dirent* entry = ::readdir(dir)) {
    if (std::strncmp(entry->d_name, "kiln_", 5) != 0) continue;
    const int fd =
        ::openat(parent_fd, entry->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) continue;  // not a directory, a link, or gone
    struct stat st {};
    // Another user's directory is theirs to clean; an unmarked one is not ours to judge. The
    // lock is taken only when no live process holds it, and kept while removing, so an owner
    // can never be working in a directory this removes.
    if (::fstat(fd, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == ::geteuid() &&
        ::faccessat(fd, TemporaryDirectory::kOwnerMarker, F_OK, AT_SYMLINK_NOFOLLOW) == 0 &&
        ::flock(fd, LOCK_EX | LOCK_NB) == 0) {
      remove_tree_at(parent_fd, entry->d_name, 0);
      if (::faccessat(parent_fd, entry->d_name, F_OK, AT_SYMLINK_NOFOLLOW) != 0) ++removed;
    }
    ::close(fd);
  }
  ::closedir(dir);
  return removed;
}

void install_temporary_directory_signal_cleanup() {
  static std::atomic<bool> installed{false};
  if (installed.exchange(true)) return;
  for (int signal_number : kCleanupSignals) {
    struct sigaction previous {};
    if (::sigaction(signal_number, nullptr, &previous) != 0) continue;
    if (previous.sa_handler == SIG_IGN) continue;  // e.g. SIGHUP under nohup
    g_previous[signal_number] = previous;
    struct sigaction action {};
    action.sa_handler = on_signal;
    sigemptyset(&action.sa_mask);
    // Every cleanup signal waits while one is handled, so two never clean at once.
    for (int other : kCleanupSignals) sigaddset(&action.sa_mask, other);
    action.sa_flags = SA_RESTART;
    ::sigaction(signal_number, &action, nullptr);
  }
}

}  // namespace kiln
