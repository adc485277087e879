// SPDX-License-Identifier: Apache-2.0
// A configuration error that knows where it happened: file, 1-based line and column, and the
// dotted key path (e.g. `plugins[1].options`) of the offending entry.
#ifndef KILN_CONFIG_ERROR_H_
#define KILN_CONFIG_ERROR_H_

#include <string>
#include <utility>

#include "kiln/error.h"

namespace kiln {

// Thrown for a malformed configuration file (YAML syntax, unknown keys, wrong value types, bad
// values). It is a ValueError, so it crosses the plugin ABI as KILN_ERROR_VALUE. what() reads
// `<file>:<line>:<column>: <key>: <message>`; `<key>: ` is omitted when the key is empty, the
// column when it is unknown (0), and line and column when the line is unknown (0).
class ConfigError : public ValueError {
 public:
  // `file`: the file's path or a source name; `line`, `column`: 1-based, 0 when unknown;
  // `key`: dotted key path, may be empty; `message`: the bare message, without position.
  ConfigError(std::string file, int line, int column, std::string key, std::string message)
      : ValueError(format(file, line, column, key, message)),
        file_(std::move(file)),
        line_(line),
        column_(column),
        key_(std::move(key)),
        message_(std::move(message)) {}

  // The file (or source name) the error is in.
  const std::string& file() const { return file_; }
  // 1-based line, 0 when unknown.
  int line() const { return line_; }
  // 1-based column, 0 when unknown.
  int column() const { return column_; }
  // Dotted key path such as `plugins[1].options`; empty when the error is not about one key.
  const std::string& key() const { return key_; }
  // The message without file, position and key.
  const std::string& message() const { return message_; }

  // Formats the text what() returns from the same parts as the constructor.
  static std::string format(const std::string& file, int line, int column, const std::string& key,
                            const std::string& message) {
    std::string out = file;
    if (line > 0) {
      out += ':' + std::to_string(line);
      if (column > 0) out += ':' + std::to_string(column);
    }
    if (!out.empty()) out += ": ";
    if (!key.empty()) out += key + ": ";
    out += message;
    return out;
  }

 private:
  std::string file_;
  int line_;
  int column_;
  std::string key_;
  std::string message_;
};

}  // namespace kiln

#endif  // KILN_CONFIG_ERROR_H_
