// SPDX-License-Identifier: Apache-2.0
// A last word from `kiln` when a kernel or plugin crashes it: run in-process (a single run,
// `kiln profile`), a SIGSEGV, SIGBUS, SIGILL, SIGFPE or SIGABRT would otherwise end the
// command with a bare "Segmentation fault". The handler prints what was running and how to
// keep going, then lets the signal end the process as before (its exit status unchanged).
#ifndef KILN_TOOLS_KILN_CRASH_NOTE_H_
#define KILN_TOOLS_KILN_CRASH_NOTE_H_

#include <string>

namespace kiln::tool {

// Installs the handlers (once; on an alternate stack, so that a stack overflow is reported
// too). Signals whose handler is not the default (a sanitizer's, a debugger's) are left alone.
void install_crash_note();

// While it lives, a crash is reported as "kiln: <signal> while running <what>". Not nested:
// the innermost scope's text is the one printed, and its end clears the note.
class CrashNoteScope {
 public:
  explicit CrashNoteScope(const std::string& what);
  ~CrashNoteScope();
  CrashNoteScope(const CrashNoteScope&) = delete;
  CrashNoteScope& operator=(const CrashNoteScope&) = delete;
};

}  // namespace kiln::tool

#endif  // KILN_TOOLS_KILN_CRASH_NOTE_H_
