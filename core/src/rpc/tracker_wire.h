// SPDX-License-Identifier: Apache-2.0
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

// The deepest nesting of arrays and objects in JSON `text`, counted over the bytes (brackets
// inside strings do not count) without parsing: nlohmann::json's parser recurses once per
// level, so text nested too deep must be refused before it is parsed. Stops counting once
// `stop_above` is passed and returns that depth.
size_t json_depth(const std::string& text, size_t stop_above = SIZE_MAX);
// The nesting bound of every JSON text the tracker and its clients parse (TVM's own values
// nest 3 deep; Python's json recursion breaks replays somewhere below 1,000).
inline constexpr size_t kMaxJsonDepth = 32;

// What a tracker with a tracker token answers, in plain text, to a peer that sends the magic
// instead of starting a TLS handshake; then it closes the connection. Its first 4 bytes
// ("KILN") are what a client reads in place of the magic: Kiln's clients recognise them and
// say that a tracker token is required; TVM's report a wrong magic.
inline constexpr char kTokenRequiredReply[] =
    "KILN tracker: this tracker requires a tracker token (TLS); connection refused\n";
inline constexpr char kTokenRequiredPrefix[] = "KILN";

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
