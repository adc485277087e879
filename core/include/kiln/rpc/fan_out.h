// SPDX-License-Identifier: Apache-2.0
// One fan-out of work over a farm of RPC servers, with a retry when a server is lost: `kiln run`
// sweeps with --jobs (tools/kiln/run_sweep.cc) and Python's kiln.testing.run_many both run on
// it, so they agree on what "server lost" is (rpc::ServerLostError, never a message's words) and
// on when to try again.
#ifndef KILN_RPC_FAN_OUT_H_
#define KILN_RPC_FAN_OUT_H_

#include <cstddef>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "kiln/rpc/rpc_error.h"

namespace kiln::rpc {

// What became of one piece of work's attempts.
struct Attempts {
  int count = 0;                  // attempts made: 1 + the retries
  std::vector<std::string> lost;  // what() of each attempt whose server was lost, in order
  std::exception_ptr error;       // what ended the work; null when its last attempt returned
  // Whether the work ended because its server was lost on every allowed attempt (`error` is
  // then the last ServerLostError).
  bool gave_up = false;
};

// Called before a retry: the ServerLostError of the attempt that lost its server and the
// number of the attempt about to start (2 for the first retry).
using OnServerLost = std::function<void(const ServerLostError& error, int next_attempt)>;

// Runs `attempt` until it returns, or throws anything but ServerLostError (the work's own
// failure: a compile error, a crash in its session, a session timeout; never tried again), or
// has lost its server max_retries + 1 times. Each retry is a new attempt from the start
// (`attempt` requests a server of its own; nothing of a lost attempt is kept). `on_lost`
// (may be empty) runs before each retry. Errors are recorded in the result, not thrown, except
// kiln::detail::InterruptedError (Ctrl-C ends the caller's work as a whole). ValueError when
// max_retries < 0.
Attempts attempt_with_retries(const std::function<void()>& attempt, int max_retries,
                              const OnServerLost& on_lost = {});

// Runs work(i) for every i in [0, count) on min(jobs, count) threads, each taking the next i
// when it is free (so at most `jobs` servers are held at once), and returns when all have run.
// The calling thread waits meanwhile, running its interrupt poll (kiln/detail/cancellation.h):
// when the poll throws, no further i starts, the running ones finish, and the interrupt is
// rethrown. `work` should record its own failures; the first exception it lets out stops
// further i from starting and is rethrown once the running ones finish. ValueError when
// jobs < 1. The work always runs on threads of its own (none for count 0), never on the
// calling thread: its waits do not run the caller's interrupt poll, so Ctrl-C never cuts a
// measurement short.
void fan_out(size_t count, int jobs, const std::function<void(size_t i)>& work);

}  // namespace kiln::rpc

#endif  // KILN_RPC_FAN_OUT_H_
