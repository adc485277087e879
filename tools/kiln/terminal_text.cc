// SPDX-License-Identifier: Apache-2.0
#include "terminal_text.h"

#include <fmt/format.h>

#include <cstdint>

namespace kiln::tool {

namespace {

// The length of the valid UTF-8 sequence at the start of `s` (1 to 4), or 0 when it is not
// one (a stray continuation byte, a truncated or overlong sequence, a surrogate, > U+10FFFF).
size_t utf8_sequence(std::string_view s) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(s[i]); };
  const uint8_t lead = byte(0);
  if (lead < 0x80) return 1;
  size_t n = 0;
  uint32_t code = 0;
  if (lead >= 0xC2 && lead <= 0xDF) {
    n = 2;
    code = lead & 0x1F;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    n = 3;
    code = lead & 0x0F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    n = 4;
    code = lead & 0x07;
  } else {
    return 0;
  }
  if (s.size() < n) return 0;
  for (size_t i = 1; i < n; ++i) {
    if ((byte(i) & 0xC0) != 0x80) return 0;
    code = (code << 6) | (byte(i) & 0x3F);
  }
  const bool overlong = (n == 3 && code < 0x800) || (n == 4 && code < 0x10000);
  const bool surrogate = code >= 0xD800 && code <= 0xDFFF;
  if (overlong || surrogate || code > 0x10FFFF) return 0;
  return n;
}

}  // namespace

std::string printable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const auto c = static_cast<uint8_t>(text[i]);
    if (c < 0x20 || c == 0x7F) {
      out += fmt::format("\\x{:02x}", c);
      ++i;
      continue;
    }
    const size_t n = utf8_sequence(text.substr(i));
    if (n == 0) {
      out += fmt::format("\\x{:02x}", c);
      ++i;
      continue;
    }
    // C1 controls: U+0080-U+009F, two bytes C2 80-9F.
    if (n == 2 && c == 0xC2 && static_cast<uint8_t>(text[i + 1]) <= 0x9F) {
      out += fmt::format("\\u{:04x}", static_cast<uint8_t>(text[i + 1]));
      i += 2;
      continue;
    }
    out.append(text.substr(i, n));
    i += n;
  }
  return out;
}

std::string printable_lines(std::string_view text) {
  std::string out;
  size_t start = 0;
  while (true) {
    const size_t end = text.find('\n', start);
    out += printable(text.substr(start, end == std::string_view::npos ? end : end - start));
    if (end == std::string_view::npos) return out;
    out += '\n';
    start = end + 1;
  }
}

}  // namespace kiln::tool
