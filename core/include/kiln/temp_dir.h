// SPDX-License-Identifier: Apache-2.0
// TemporaryDirectory: a private directory under $TMPDIR (else /tmp), removed with everything
// in it when the object goes away, also when the scope is left by an exception. A thin wrapper
// over the SDK's one temporary directory, kiln::sdk::TempDir (kiln/sdk/support/temp_dir.hpp),
// that keeps libkiln's error types; the SDK type stays out of this public header because the
// support library is linked into libkiln privately.
//
// A process killed by a signal runs no destructor, so each directory also carries what is
// needed to clean it up later: while it lives, its owner holds an flock() on it, and a marker
// file (kOwnerMarker, written once the lock is held) says it is one of these directories.
// remove_stale_temporary_directories() removes the marked ones whose lock nobody holds (their
// owner is gone), and install_temporary_directory_signal_cleanup() removes this process's
// directories from a SIGINT / SIGTERM / SIGHUP / SIGQUIT handler before the signal does its
// usual work.
#ifndef KILN_TEMP_DIR_H_
#define KILN_TEMP_DIR_H_

#include <cstddef>
#include <filesystem>
#include <memory>
#include <string>

namespace kiln {
namespace sdk {
class TempDir;
}  // namespace sdk

class TemporaryDirectory {
 public:
  // The marker file in every TemporaryDirectory (it holds the owner's process id, for people).
  static constexpr const char* kOwnerMarker = ".kiln_temp_owner";

  // Creates <$TMPDIR or /tmp>/<prefix>XXXXXX with mode 0700, locks it and writes the marker.
  // Throws RuntimeError naming the pattern and the system's reason when it cannot (ValueError
  // for a prefix with '/').
  explicit TemporaryDirectory(const std::string& prefix);
  // Removes the directory and its contents; failures are ignored.
  ~TemporaryDirectory();
  TemporaryDirectory(const TemporaryDirectory&) = delete;
  TemporaryDirectory& operator=(const TemporaryDirectory&) = delete;

  // The absolute path of the directory.
  const std::filesystem::path& path() const;

 private:
  std::unique_ptr<sdk::TempDir> dir_;
  int lock_fd_ = -1;  // the directory, open and flock()ed while this object lives
  int slot_ = -1;     // this directory's entry in the signal handler's table, -1 when none
};

// Removes the stale directories TemporaryDirectory made in `parent` (default: $TMPDIR, else
// /tmp): entries named kiln_* that are real directories (not links) of this user, with the
// marker file, whose flock() this process can take, which means no live process holds it (the
// lock goes with its owner, in any PID namespace). An unmarked directory (made by another
// program or an older Kiln) is never touched. Returns the number removed; never throws.
size_t remove_stale_temporary_directories(const std::filesystem::path& parent = {});

// Installs handlers for SIGINT, SIGTERM, SIGHUP and SIGQUIT that remove every live
// TemporaryDirectory of this process (async-signal-safe: no allocation, only system calls),
// then restore the handler that was there before and raise the signal again, so the process
// ends as it would have (exit status 128 + signal in a shell). Signals that were ignored stay
// ignored. For command-line tools; call it once, from the main thread, before work starts.
void install_temporary_directory_signal_cleanup();

}  // namespace kiln

#endif  // KILN_TEMP_DIR_H_
