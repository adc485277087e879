// SPDX-License-Identifier: Apache-2.0
#include "kiln/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <cstring>
#include <memory>

namespace kiln {
namespace {

spdlog::level::level_enum to_spdlog(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return spdlog::level::debug;
    case LogLevel::kInfo:
      return spdlog::level::info;
    case LogLevel::kWarn:
      return spdlog::level::warn;
    case LogLevel::kError:
      return spdlog::level::err;
    case LogLevel::kOff:
      return spdlog::level::off;
  }
  return spdlog::level::warn;
}

LogLevel level_from_env() {
  const char* env = std::getenv("KILN_LOG");
  if (env == nullptr || *env == '\0') return LogLevel::kWarn;
  if (std::strcmp(env, "debug") == 0 || std::strcmp(env, "trace") == 0) return LogLevel::kDebug;
  if (std::strcmp(env, "info") == 0) return LogLevel::kInfo;
  if (std::strcmp(env, "warn") == 0 || std::strcmp(env, "warning") == 0) return LogLevel::kWarn;
  if (std::strcmp(env, "error") == 0) return LogLevel::kError;
  if (std::strcmp(env, "off") == 0) return LogLevel::kOff;
  std::fprintf(stderr, "kiln: ignoring KILN_LOG=%s (expected debug, info, warn, error or off)\n",
               env);
  return LogLevel::kWarn;
}

struct Logger {
  Logger() : level(level_from_env()) {
    sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
    logger = std::make_shared<spdlog::logger>("kiln", sink);
    logger->set_pattern("[kiln] [%^%l%$] %v");
    logger->set_level(to_spdlog(level));
  }
  std::shared_ptr<spdlog::sinks::stderr_color_sink_mt> sink;
  std::shared_ptr<spdlog::logger> logger;
  LogLevel level;
};

Logger& logger() {
  static Logger instance;
  return instance;
}

}  // namespace

void set_log_level(LogLevel level) {
  logger().level = level;
  logger().logger->set_level(to_spdlog(level));
}

LogLevel log_level() { return logger().level; }

void log(LogLevel level, const std::string& source, const std::string& message) {
  if (static_cast<int>(level) < static_cast<int>(logger().level)) return;
  logger().logger->log(to_spdlog(level), "{}: {}", source, message);
}

}  // namespace kiln
