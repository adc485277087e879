// SPDX-License-Identifier: Apache-2.0
#include "worker_events.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <nlohmann/json.hpp>

#include "kiln/error.h"

namespace kiln::conformance {
namespace {

// Writes all of `text` to `fd`; gives up on an error other than EINTR.
void write_all(int fd, const std::string& text) {
  size_t at = 0;
  while (at < text.size()) {
    const ssize_t n = ::write(fd, text.data() + at, text.size() - at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    at += static_cast<size_t>(n);
  }
}

// Streams the start and end of each test; the test body may crash right after OnTestStart, so
// that line is written before GoogleTest calls the test.
class EventStreamer : public ::testing::EmptyTestEventListener {
 public:
  explicit EventStreamer(int fd) : fd_(fd) {}

  void OnTestStart(const ::testing::TestInfo& info) override {
    WorkerEvent event;
    event.kind = WorkerEvent::Kind::kStart;
    event.test.suite = info.test_suite_name();
    event.test.name = info.name();
    event.test.target = event.test.suite.substr(event.test.suite.find('/') + 1);
    write_all(fd_, encode_worker_event(event));
  }

  void OnTestEnd(const ::testing::TestInfo& info) override {
    WorkerEvent event;
    event.kind = WorkerEvent::Kind::kEnd;
    event.test = outcome_of(info);
    write_all(fd_, encode_worker_event(event));
  }

 private:
  int fd_;
};

const char* kind_text(WorkerEvent::Kind kind) {
  switch (kind) {
    case WorkerEvent::Kind::kStart:
      return "start";
    case WorkerEvent::Kind::kEnd:
      return "end";
    case WorkerEvent::Kind::kDone:
      return "done";
  }
  return "?";
}

}  // namespace

std::string encode_worker_event(const WorkerEvent& event) {
  nlohmann::json j{{"event", kind_text(event.kind)}};
  if (event.kind != WorkerEvent::Kind::kDone) {
    j["suite"] = event.test.suite;
    j["name"] = event.test.name;
  }
  if (event.kind == WorkerEvent::Kind::kEnd) {
    j["result"] = to_string(event.test.status);
    j["reason"] = event.test.message;
    j["elapsed_ms"] = event.test.elapsed_ms;
  }
  // Invalid UTF-8 in a failure message (bytes a plugin returned) is replaced, not thrown on.
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

WorkerEvent decode_worker_event(const std::string& line) {
  auto bad = [&line](const std::string& what) {
    return ValueError(fmt::format("kiln-conformance worker event '{}': {}", line, what));
  };
  const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("event") || !j["event"].is_string()) {
    throw bad("not a JSON object with an \"event\"");
  }
  WorkerEvent event;
  const std::string kind = j["event"].get<std::string>();
  if (kind == "done") {
    event.kind = WorkerEvent::Kind::kDone;
    return event;
  }
  if (kind != "start" && kind != "end") throw bad("unknown event '" + kind + "'");
  event.kind = kind == "start" ? WorkerEvent::Kind::kStart : WorkerEvent::Kind::kEnd;
  if (!j.value("suite", nlohmann::json()).is_string() ||
      !j.value("name", nlohmann::json()).is_string()) {
    throw bad("no \"suite\" or \"name\"");
  }
  event.test.suite = j["suite"].get<std::string>();
  event.test.name = j["name"].get<std::string>();
  event.test.target = event.test.suite.substr(event.test.suite.find('/') + 1);
  if (event.kind == WorkerEvent::Kind::kStart) return event;
  const std::optional<TestOutcome::Status> status =
      status_from_string(j.value("result", std::string()));
  if (!status) throw bad("no known \"result\"");
  event.test.status = *status;
  event.test.message = j.value("reason", std::string());
  event.test.elapsed_ms = j.value("elapsed_ms", int64_t{0});
  return event;
}

void stream_test_events(int fd) {
  ::testing::UnitTest::GetInstance()->listeners().Append(new EventStreamer(fd));
}

void write_done_event(int fd) { write_all(fd, encode_worker_event(WorkerEvent{})); }

}  // namespace kiln::conformance
