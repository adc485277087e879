// SPDX-License-Identifier: Apache-2.0
// kiln-rpc-session: one session of `kiln rpc-server` in a process of its own. The server
// starts it (rpc/session_process.h); it is not meant to be run by hand.
#include "rpc/session_process.h"

int main(int argc, char** argv) { return kiln::rpc::session_worker_main(argc, argv); }
