// SPDX-License-Identifier: Apache-2.0
#include "rpc/tracker_wire.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <vector>

#include "kiln/error.h"

namespace kiln::rpc::tracker_wire {

std::string encode_int32(int32_t value) {
  const auto u = static_cast<uint32_t>(value);
  std::string out(4, '\0');
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>((u >> (8 * i)) & 0xFF);
  return out;
}

size_t json_depth(const std::string& text, size_t stop_above) {
  size_t depth = 0;
  size_t deepest = 0;
  bool in_string = false;
  bool escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
      if (deepest > stop_above) return deepest;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

int32_t decode_int32(const unsigned char* bytes) {
  uint32_t u = 0;
  for (int i = 0; i < 4; ++i) u |= static_cast<uint32_t>(bytes[i]) << (8 * i);
  return static_cast<int32_t>(u);
}

namespace {
void dumps_into(const Json& value, std::string& out) {
  if (value.is_array()) {
    out += '[';
    bool first = true;
    for (const auto& item : value) {
      if (!first) out += ", ";
      first = false;
      dumps_into(item, out);
    }
    out += ']';
  } else if (value.is_object()) {
    out += '{';
    bool first = true;
    for (const auto& [k, v] : value.items()) {
      if (!first) out += ", ";
      first = false;
      out += Json(k).dump(-1, ' ', true);
      out += ": ";
      dumps_into(v, out);
    }
    out += '}';
  } else {
    // Replace invalid UTF-8 rather than throw: the text came from a peer.
    out += value.dump(-1, ' ', true, Json::error_handler_t::replace);
  }
}
}  // namespace

std::string dumps(const Json& value) {
  std::string out;
  dumps_into(value, out);
  return out;
}

std::string frame(const std::string& text) {
  return encode_int32(static_cast<int32_t>(text.size())) + text;
}

std::string python_str(const Json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_null()) return "None";
  if (value.is_boolean()) return value.get<bool>() ? "True" : "False";
  return dumps(value);
}

namespace {
// The number of code points of UTF-8 text (what Python's len() counts).
size_t utf8_length(const std::string& text) {
  size_t n = 0;
  for (const char c : text) {
    if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++n;
  }
  return n;
}

// Python's f"{s:<{width}}" (the width counts code points).
std::string pad_right(const std::string& s, size_t width) {
  const size_t n = utf8_length(s);
  return n >= width ? s : s + std::string(width - n, ' ');
}
std::string number_text(const Json& value) {
  if (value.is_number_integer()) return value.dump();
  if (value.is_number_float()) return std::to_string(static_cast<int64_t>(value.get<double>()));
  throw RuntimeError("Invalid return value: a queue count is not a number: " + dumps(value));
}
}  // namespace

std::string text_summary(const Json& data) {
  if (!data.is_object() || !data.contains("queue_info") || !data.contains("server_info") ||
      !data["queue_info"].is_object() || !data["server_info"].is_array()) {
    throw RuntimeError("Invalid return value: SUMMARY lacks queue_info or server_info: " +
                       dumps(data));
  }
  const std::string dashes30(30, '-');
  std::string res;
  res += "Server List\n";
  res += dashes30 + "\n";
  res += "server-address           key\n";
  res += dashes30 + "\n";

  struct Row {
    std::string key;
    std::string addr;
  };
  std::vector<Row> rows;
  for (const auto& item : data["server_info"]) {
    Row row;
    if (item.is_object() && item.contains("key") && item["key"].is_string()) {
      row.key = item["key"].get<std::string>();
    }
    if (item.is_object() && item.contains("addr") && item["addr"].is_array()) {
      bool first = true;
      for (const auto& part : item["addr"]) {
        if (!first) row.addr += ':';
        first = false;
        row.addr += python_str(part);
      }
    }
    rows.push_back(std::move(row));
  }
  std::stable_sort(rows.begin(), rows.end(),
                   [](const Row& a, const Row& b) { return a.key < b.key; });
  // Servers per rpc key: the info key less its "server:" prefix. Unlike the reference, which
  // takes the second ':'-field, this counts keys that contain ':' correctly.
  std::map<std::string, int64_t> total;
  for (const Row& row : rows) {
    res += pad_right(row.addr, 21) + "    " + row.key + "\n";
    const auto colon = row.key.find(':');
    if (colon != std::string::npos) ++total[row.key.substr(colon + 1)];
  }
  res += dashes30 + "\n";
  res += "\n";

  std::vector<std::string> keys;
  size_t max_key_len = 0;
  for (const auto& [k, v] : data["queue_info"].items()) {
    keys.push_back(k);
    max_key_len = std::max(max_key_len, utf8_length(k));
  }
  std::sort(keys.begin(), keys.end());
  res += "Queue Status\n";
  const std::string title = pad_right("key", max_key_len) + "   total  free  pending\n";
  const std::string separator = std::string(utf8_length(title), '-') + "\n";
  res += separator + title + separator;
  const auto& queue_info = data["queue_info"];
  for (const std::string& k : keys) {
    const auto& q = queue_info.at(k);
    if (!q.is_object() || !q.contains("free") || !q.contains("pending")) {
      throw RuntimeError("Invalid return value: queue '" + k + "' lacks free or pending");
    }
    const auto it = total.find(k);
    const int64_t t = it == total.end() ? 0 : it->second;
    const std::string free = number_text(q["free"]);
    const std::string pending = number_text(q["pending"]);
    if (t != 0 || pending != "0") {
      res += pad_right(k, max_key_len) + "   " + pad_right(std::to_string(t), 5) + "  " +
             pad_right(free, 4) + "  " + pad_right(pending, 7) + "\n";
    }
  }
  res += separator;
  return res;
}

}  // namespace kiln::rpc::tracker_wire
