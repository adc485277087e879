// SPDX-License-Identifier: Apache-2.0
// The crash note's handler (crash_note.h): async-signal-safe, so it only copies bytes and
// writes them.
#include "crash_note.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace kiln::tool {
namespace {

constexpr int kSignals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
char g_note[1024];
std::atomic<bool> g_note_set{false};
// Running as a supervised child (supervised.h): the parent reports the crash and its remedy.
bool g_supervised = false;

const char* signal_name(int sig) {
  switch (sig) {
    case SIGSEGV:
      return "SIGSEGV (a bad memory access)";
    case SIGBUS:
      return "SIGBUS (a bad memory access)";
    case SIGILL:
      return "SIGILL (an illegal instruction)";
    case SIGFPE:
      return "SIGFPE (an arithmetic fault)";
    case SIGABRT:
      return "SIGABRT (abort)";
    default:
      return "a fatal signal";
  }
}

void write_all(const char* text) {
  size_t left = std::strlen(text);
  while (left > 0) {
    const ssize_t n = ::write(STDERR_FILENO, text, left);
    if (n <= 0) return;
    text += n;
    left -= static_cast<size_t>(n);
  }
}

void on_crash(int sig) {
  if (g_note_set.load()) {
    write_all("\nkiln: ");
    write_all(signal_name(sig));
    write_all(" while running ");
    write_all(g_note);
    write_all(g_supervised
                  ? "\n"
                  : ". A kernel or plugin that crashes ends a run in kiln's process; run it "
                    "with --isolation process to get a failed run instead (docs/isolation.md)\n");
  }
  // The default action now: the process ends of this signal, as it would have.
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

}  // namespace

void install_crash_note() {
  static std::once_flag once;
  std::call_once(once, [] {
    g_supervised = std::getenv("KILN_SUPERVISED") != nullptr;
    static char stack[64 * 1024];
    stack_t alternate{};
    alternate.ss_sp = stack;
    alternate.ss_size = sizeof(stack);
    ::sigaltstack(&alternate, nullptr);
    for (int sig : kSignals) {
      struct sigaction previous {};
      if (::sigaction(sig, nullptr, &previous) != 0 || previous.sa_handler != SIG_DFL) continue;
      struct sigaction action {};
      action.sa_handler = on_crash;
      action.sa_flags = SA_ONSTACK | SA_RESETHAND;
      sigemptyset(&action.sa_mask);
      ::sigaction(sig, &action, nullptr);
    }
  });
}

CrashNoteScope::CrashNoteScope(const std::string& what) {
  g_note_set = false;
  const size_t n = std::min(what.size(), sizeof(g_note) - 1);
  std::memcpy(g_note, what.data(), n);
  g_note[n] = '\0';
  g_note_set = true;
}

CrashNoteScope::~CrashNoteScope() { g_note_set = false; }

}  // namespace kiln::tool
