// Helpers shared by the tracker (tracker.cc) and its clients (tracker_client.cc): the wire
// framing of the tracker protocol (SPEC.md §4.5, docs/tracker.md), JSON text as TVM's Python
// writes it, match keys and the text summary.
#ifndef KILN_SRC_RPC_TRACKER_WIRE_H_
#define KILN_SRC_RPC_TRACKER_WIRE_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace kiln::rpc::tracker_wire {

// Objects keep their members in the order they arrived, as Python dicts do.
using Json = nlohmann::ordered_json;

// Little-endian int32 to and from 4 bytes.
std::string encode_int32(int32_t value);
int32_t decode_int32(const unsigned char* bytes);

// `value` as Python's json.dumps(value) writes it: ", " and ": " separators, non-ASCII as
// \uXXXX escapes.
std::string dumps(const Json& value);
// One message: int32 length, then the text.
std::string frame(const std::string& text);

// Python's str() of a JSON scalar (what text_summary prints for "addr"): strings as they
// are, null as None, booleans as True/False.
std::string python_str(const Json& value);

// TrackerSession::text_summary() from SUMMARY's second element. Throws RuntimeError when
// the data lacks queue_info or server_info.
std::string text_summary(const Json& data);

}  // namespace kiln::rpc::tracker_wire

#endif  // KILN_SRC_RPC_TRACKER_WIRE_H_
