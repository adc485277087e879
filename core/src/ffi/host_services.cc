// SPDX-License-Identifier: Apache-2.0
#include <spdlog/spdlog.h>

#include "ffi/error_object.h"
#include "kiln/logging.h"

namespace kiln::ffi {

KilnError* new_error(int32_t code, const std::string& message) {
  return new KilnError{code, message};
}

namespace {

KilnError* error_new(void*, int32_t code, const char* message) {
  return new_error(code, message != nullptr ? message : "");
}
int32_t error_code(void*, const KilnError* error) { return error->code; }
const char* error_message(void*, const KilnError* error) { return error->message.c_str(); }
void error_free(void*, KilnError* error) { delete error; }

LogLevel to_level(int32_t level) {
  switch (level) {
    case KILN_LOG_DEBUG:
      return LogLevel::kDebug;
    case KILN_LOG_INFO:
      return LogLevel::kInfo;
    case KILN_LOG_WARN:
      return LogLevel::kWarn;
    default:
      return LogLevel::kError;
  }
}
void log_line(void*, int32_t level, const char* plugin, const char* message) {
  kiln::log(to_level(level), plugin != nullptr ? plugin : "plugin",
            message != nullptr ? message : "");
}
int32_t log_enabled(void*, int32_t level) {
  return static_cast<int32_t>(to_level(level)) >= static_cast<int32_t>(log_level()) ? 1 : 0;
}

}  // namespace

const KilnHostServices& host_services() {
  static const KilnHostServices services = {
      sizeof(KilnHostServices), nullptr,     nullptr,   &error_new,   &error_code,
      &error_message,           &error_free, &log_line, &log_enabled,
  };
  return services;
}

}  // namespace kiln::ffi
