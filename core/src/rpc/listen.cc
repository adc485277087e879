// SPDX-License-Identifier: Apache-2.0
#include "rpc/listen.h"

#include <fmt/format.h>

#include <boost/asio/ip/address.hpp>
#include <vector>

#include "kiln/error.h"

namespace kiln::rpc {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {
// `host` as an address, or the addresses a name resolves to.
std::vector<asio::ip::address> resolve(asio::any_io_executor executor, const std::string& host) {
  boost::system::error_code ec;
  const asio::ip::address address = asio::ip::make_address(host, ec);
  if (!ec) return {address};
  tcp::resolver resolver(executor);
  const auto results = resolver.resolve(host, "", tcp::resolver::passive, ec);
  if (ec || results.empty()) {
    throw RuntimeError(fmt::format("cannot resolve host '{}': {}", host,
                                   ec ? ec.message() : std::string("no address")));
  }
  std::vector<asio::ip::address> addresses;
  for (const auto& r : results) addresses.push_back(r.endpoint().address());
  return addresses;
}
}  // namespace

int listen_on_first_free_port(tcp::acceptor& acceptor, const std::string& host, int first,
                              int end) {
  const std::vector<asio::ip::address> addresses = resolve(acceptor.get_executor(), host);
  if (end <= first) end = first + 1;
  std::string last_error = "no port to try";
  for (int port = first; port < end && port <= 65535; ++port) {
    // A name may resolve to an address this machine cannot bind (::1 without IPv6).
    for (const asio::ip::address& address : addresses) {
      boost::system::error_code ec;
      acceptor.open(address.is_v6() ? tcp::v6() : tcp::v4(), ec);
      if (!ec) acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
      if (!ec) acceptor.bind(tcp::endpoint(address, static_cast<unsigned short>(port)), ec);
      if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
      if (!ec) return acceptor.local_endpoint().port();
      last_error = ec.message();
      boost::system::error_code ignored;
      acceptor.close(ignored);
    }
  }
  throw RuntimeError(
      fmt::format("cannot bind to any port in [{}, {}) on {}: {}", first, end, host, last_error));
}

}  // namespace kiln::rpc
