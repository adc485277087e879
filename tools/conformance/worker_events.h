// SPDX-License-Identifier: Apache-2.0
// The stream a kiln-conformance worker process writes to its parent (docs/conformance.md,
// "Isolation"): one JSON object per line, written with write(2) as each event happens, so that
// every line written before the worker dies reaches the parent.
//
//   {"event":"start","suite":"DeviceConformance/cpu","name":"TensorRoundTrip"}
//   {"event":"end","suite":...,"name":...,"result":"pass","reason":"","elapsed_ms":3}
//   {"event":"done"}                      after the last test, before the worker exits
#ifndef KILN_TOOLS_CONFORMANCE_WORKER_EVENTS_H_
#define KILN_TOOLS_CONFORMANCE_WORKER_EVENTS_H_

#include <string>

#include "suite.h"

namespace kiln::conformance {

// The file descriptor a worker writes its events to; its parent puts the pipe there.
inline constexpr int kWorkerEventFd = 3;

// One event of the stream.
struct WorkerEvent {
  enum class Kind { kStart, kEnd, kDone };
  Kind kind = Kind::kDone;
  // kStart: suite, name and target; kEnd: the whole outcome; kDone: unused.
  TestOutcome test;
};

// `event` as one line, '\n' included.
std::string encode_worker_event(const WorkerEvent& event);

// The event of one line (without its '\n'). Throws ValueError naming the line when it is not
// an event of this protocol.
WorkerEvent decode_worker_event(const std::string& line);

// Adds a GoogleTest listener that writes a start and an end event to `fd` around every test.
// Call before RUN_ALL_TESTS(); GoogleTest owns the listener. A failed write (the parent is
// gone) is ignored: the worker dies with its parent anyway (PR_SET_PDEATHSIG).
void stream_test_events(int fd);

// Writes the done event to `fd`: every test the worker was given has ended.
void write_done_event(int fd);

}  // namespace kiln::conformance

#endif  // KILN_TOOLS_CONFORMANCE_WORKER_EVENTS_H_
