// SPDX-License-Identifier: Apache-2.0
// Listening sockets of the RPC server and the tracker: the first free port of a range.
#ifndef KILN_SRC_RPC_LISTEN_H_
#define KILN_SRC_RPC_LISTEN_H_

#include <boost/asio/ip/tcp.hpp>
#include <string>

namespace kiln::rpc {

// Opens `acceptor` listening on `host` (an address, or a name: the first of its addresses that
// binds) at the first port of [first, end) that binds; `end <= first` tries `first` only, and 0
// asks for an ephemeral port. Returns the port bound. Throws RuntimeError "cannot resolve host
// '<host>': ..." or "cannot bind to any port in [<first>, <end>) on <host>: <last error>".
int listen_on_first_free_port(boost::asio::ip::tcp::acceptor& acceptor, const std::string& host,
                              int first, int end);

}  // namespace kiln::rpc

#endif  // KILN_SRC_RPC_LISTEN_H_
