// SPDX-License-Identifier: Apache-2.0
// Logging: Kiln logs through spdlog on stderr. The level comes from KILN_LOG
// (debug|info|warn|error|off; default warn) or set_log_level().
#ifndef KILN_LOGGING_H_
#define KILN_LOGGING_H_

#include <string>

namespace kiln {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3, kOff = 4 };

// Sets the level of Kiln's logger (overrides KILN_LOG).
void set_log_level(LogLevel level);
LogLevel log_level();
// Writes one line at `level`, attributed to `source` (a plugin or core component).
void log(LogLevel level, const std::string& source, const std::string& message);

}  // namespace kiln

#endif  // KILN_LOGGING_H_
