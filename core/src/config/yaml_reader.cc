// SPDX-License-Identifier: Apache-2.0
#include "config/yaml_reader.h"

#include <yaml-cpp/anchor.h>
#include <yaml-cpp/eventhandler.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <system_error>
#include <unordered_map>
#include <utility>

#include "kiln/error.h"

namespace kiln::config {
namespace {

constexpr int kMaxJsonDepth = 256;
constexpr size_t kMaxDescribedLength = 40;

// 1-based line and column of `mark`, 0 when unknown.
std::pair<int, int> position_of(const YAML::Mark& mark) {
  if (mark.line < 0) return {0, 0};
  return {mark.line + 1, mark.column >= 0 ? mark.column + 1 : 0};
}

// Walks the parser's events of one document and throws ConfigError at the second occurrence of
// a key in any mapping. Works on events rather than the node tree, so aliases cannot loop.
class DuplicateKeyChecker : public YAML::EventHandler {
 public:
  explicit DuplicateKeyChecker(std::string file) : file_(std::move(file)) {}

  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override { begin_node(nullptr, {}); }
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override { begin_node(nullptr, {}); }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                const std::string& value) override {
    begin_node(&value, mark);
  }
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {
    push(false, begin_node(nullptr, {}));
  }
  void OnSequenceEnd() override { stack_.pop_back(); }
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {
    push(true, begin_node(nullptr, {}));
  }
  void OnMapEnd() override { stack_.pop_back(); }

 private:
  struct Frame {
    bool is_map = false;
    std::string path;                                // the collection's own key path
    size_t next_index = 0;                           // sequences: index of the next element
    bool expect_key = true;                          // mappings: whether a key comes next
    std::string current_key = "?";                   // mappings: the key of the coming value
    std::unordered_map<std::string, int> key_lines;  // mappings: key -> 1-based line
  };

  void push(bool is_map, std::string path) {
    Frame frame;
    frame.is_map = is_map;
    frame.path = std::move(path);
    stack_.push_back(std::move(frame));
  }

  // Accounts for a node starting in the current collection and returns its key path. `key`
  // is the scalar text when the node is a scalar (nullptr otherwise); `mark` its position.
  std::string begin_node(const std::string* key, const YAML::Mark& mark) {
    if (stack_.empty()) return "";
    Frame& top = stack_.back();
    if (!top.is_map) return index_key_path(top.path, top.next_index++);
    if (!top.expect_key) {
      top.expect_key = true;
      return join_key_path(top.path, top.current_key);
    }
    top.expect_key = false;
    top.current_key = key != nullptr ? *key : "?";
    if (key != nullptr) {
      auto [line, column] = position_of(mark);
      auto [it, inserted] = top.key_lines.emplace(*key, line);
      if (!inserted) {
        throw ConfigError(file_, line, column, join_key_path(top.path, *key),
                          "duplicate key '" + *key + "' (first defined at line " +
                              std::to_string(it->second) + ")");
      }
    }
    return "";  // complex keys get no path
  }

  std::string file_;
  std::vector<Frame> stack_;
};

enum class ParseResult { kOk, kInvalid, kOutOfRange };

// Parses YAML integer text: optional sign, then decimal digits, 0x hex or 0o octal digits.
ParseResult parse_int(std::string_view text, int64_t* out) {
  bool negative = false;
  if (!text.empty() && (text[0] == '+' || text[0] == '-')) {
    negative = text[0] == '-';
    text.remove_prefix(1);
  }
  int base = 10;
  if (text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) {
    base = 16;
    text.remove_prefix(2);
  } else if (text.size() > 2 && text[0] == '0' && (text[1] == 'o' || text[1] == 'O')) {
    base = 8;
    text.remove_prefix(2);
  }
  if (text.empty()) return ParseResult::kInvalid;
  uint64_t magnitude = 0;
  const char* last = text.data() + text.size();
  auto [end, ec] = std::from_chars(text.data(), last, magnitude, base);
  if (end != last) return ParseResult::kInvalid;  // e.g. "12abc", "1.5", "0x-1"
  if (ec == std::errc::result_out_of_range) return ParseResult::kOutOfRange;
  if (ec != std::errc()) return ParseResult::kInvalid;
  constexpr uint64_t kMaxPositive = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  if (negative) {
    if (magnitude > kMaxPositive + 1) return ParseResult::kOutOfRange;
    *out = magnitude == kMaxPositive + 1 ? std::numeric_limits<int64_t>::min()
                                         : -static_cast<int64_t>(magnitude);
  } else {
    if (magnitude > kMaxPositive) return ParseResult::kOutOfRange;
    *out = static_cast<int64_t>(magnitude);
  }
  return ParseResult::kOk;
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Parses YAML 1.2 core-schema float text ([-+]?(digits[.digits]|.digits)([eE][-+]?digits)?,
// [-+]?.inf, .nan in their three spellings) into `*out`.
bool parse_double(std::string_view text, double* out) {
  std::string_view body = text;
  bool negative = false;
  if (!body.empty() && (body[0] == '+' || body[0] == '-')) {
    negative = body[0] == '-';
    body.remove_prefix(1);
  }
  if (body == ".inf" || body == ".Inf" || body == ".INF") {
    *out = negative ? -std::numeric_limits<double>::infinity()
                    : std::numeric_limits<double>::infinity();
    return true;
  }
  if (text == ".nan" || text == ".NaN" || text == ".NAN") {
    *out = std::numeric_limits<double>::quiet_NaN();
    return true;
  }
  // Validate the shape by hand: from_chars would also take "inf", "nan" and hex floats.
  size_t i = 0;
  size_t int_digits = 0;
  size_t frac_digits = 0;
  while (i < body.size() && is_digit(body[i])) ++i, ++int_digits;
  if (i < body.size() && body[i] == '.') {
    ++i;
    while (i < body.size() && is_digit(body[i])) ++i, ++frac_digits;
  }
  if (int_digits + frac_digits == 0) return false;
  if (i < body.size() && (body[i] == 'e' || body[i] == 'E')) {
    ++i;
    if (i < body.size() && (body[i] == '+' || body[i] == '-')) ++i;
    size_t exp_digits = 0;
    while (i < body.size() && is_digit(body[i])) ++i, ++exp_digits;
    if (exp_digits == 0) return false;
  }
  if (i != body.size()) return false;
  // from_chars takes no '+'; give it the sign-less body. Overflow (1e999) is rejected.
  double value = 0;
  auto [end, ec] = std::from_chars(body.data(), body.data() + body.size(), value);
  if (ec != std::errc() || end != body.data() + body.size()) return false;
  *out = negative ? -value : value;
  return true;
}

bool parse_bool(std::string_view text, bool* out) {
  static constexpr std::string_view kTrue[] = {"true", "True", "TRUE", "yes", "Yes",
                                               "YES",  "on",   "On",   "ON"};
  static constexpr std::string_view kFalse[] = {"false", "False", "FALSE", "no", "No",
                                                "NO",    "off",   "Off",   "OFF"};
  for (std::string_view t : kTrue) {
    if (text == t) return *out = true, true;
  }
  for (std::string_view f : kFalse) {
    if (text == f) return *out = false, true;
  }
  return false;
}

// Throws "expected <expected>, got <node><note>" at `node`, or at `*position` when given.
[[noreturn]] void fail_expected(const YAML::Node& node, const std::string& file,
                                const std::string& key_path, const std::string& expected,
                                const std::string& note = "",
                                const YAML::Node* position = nullptr) {
  throw error_at(position != nullptr ? *position : node, file, key_path,
                 "expected " + expected + ", got " + describe_node(node) + note);
}

// The node an error about a mapping value should point at: the key when the value is null
// (yaml-cpp places an empty value at the next token), else the value.
const YAML::Node& value_anchor(const YAML::Node& key, const YAML::Node& value) {
  return value.IsNull() ? key : value;
}

template <typename T>
void decode_list(const YAML::Node& node, const std::string& file, const std::string& key_path,
                 const std::string& expected, std::vector<T>* out) {
  if (!node.IsSequence()) fail_expected(node, file, key_path, expected);
  out->clear();
  out->reserve(node.size());
  for (size_t i = 0; i < node.size(); ++i) {
    T item{};
    decode_value(node[i], file, index_key_path(key_path, i), &item);
    out->push_back(std::move(item));
  }
}

bool is_plain_or_core_tag(const std::string& tag) {
  return tag == "?" || tag.empty() || tag == "tag:yaml.org,2002:int" ||
         tag == "tag:yaml.org,2002:float" || tag == "tag:yaml.org,2002:bool" ||
         tag == "tag:yaml.org,2002:null";
}

nlohmann::ordered_json scalar_to_json(const YAML::Node& node) {
  const std::string& text = node.Scalar();
  if (!is_plain_or_core_tag(node.Tag())) return text;
  if (text == "null" || text == "Null" || text == "NULL" || text == "~" || text.empty()) {
    return nullptr;
  }
  if (text == "true" || text == "True" || text == "TRUE") return true;
  if (text == "false" || text == "False" || text == "FALSE") return false;
  int64_t int_value = 0;
  switch (parse_int(text, &int_value)) {
    case ParseResult::kOk:
      return int_value;
    case ParseResult::kOutOfRange: {
      uint64_t unsigned_value = 0;
      auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), unsigned_value);
      if (ec == std::errc() && end == text.data() + text.size()) return unsigned_value;
      double double_value = 0;
      if (parse_double(text, &double_value)) return double_value;
      return text;
    }
    case ParseResult::kInvalid:
      break;
  }
  double double_value = 0;
  if (parse_double(text, &double_value) && std::isfinite(double_value)) return double_value;
  return text;
}

nlohmann::ordered_json node_to_json(const YAML::Node& node, int depth) {
  if (depth > kMaxJsonDepth) {
    throw ConfigError("", 0, 0, "",
                      "YAML nests deeper than " + std::to_string(kMaxJsonDepth) +
                          " levels (a self-referencing alias?)");
  }
  switch (node.Type()) {
    case YAML::NodeType::Scalar:
      return scalar_to_json(node);
    case YAML::NodeType::Sequence: {
      nlohmann::ordered_json array = nlohmann::ordered_json::array();
      for (const YAML::Node& item : node) array.push_back(node_to_json(item, depth + 1));
      return array;
    }
    case YAML::NodeType::Map: {
      nlohmann::ordered_json object = nlohmann::ordered_json::object();
      for (auto it = node.begin(); it != node.end(); ++it) {
        std::string key = it->first.IsScalar()
                              ? it->first.Scalar()
                              : node_to_json(it->first, depth + 1)
                                    .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
        object[key] = node_to_json(it->second, depth + 1);
      }
      return object;
    }
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      break;
  }
  return nullptr;
}

}  // namespace

YAML::Node load_yaml_file(const std::filesystem::path& path) {
  std::error_code ec;
  std::filesystem::file_status status = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(status)) {
    throw NotFoundError("configuration file not found: '" + path.string() + "'");
  }
  if (std::filesystem::is_directory(status)) {
    throw NotFoundError("cannot read configuration file '" + path.string() +
                        "': it is a directory");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    int err = errno;
    throw NotFoundError("cannot read configuration file '" + path.string() +
                        "': " + (err != 0 ? std::strerror(err) : "open failed"));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) {
    throw NotFoundError("cannot read configuration file '" + path.string() + "': read failed");
  }
  return load_yaml_string(text.str(), path.string());
}

YAML::Node load_yaml_string(const std::string& text, const std::string& source_name) {
  try {
    // First pass over the events: syntax errors and duplicate keys, in file order.
    std::istringstream events(text);
    YAML::Parser parser(events);
    DuplicateKeyChecker checker(source_name);
    parser.HandleNextDocument(checker);
    return YAML::Load(text);
  } catch (const YAML::Exception& e) {
    auto [line, column] = position_of(e.mark);
    throw ConfigError(source_name, line, column, "", e.msg);
  }
}

std::string yaml_to_json(const YAML::Node& node) {
  return node_to_json(node, 0).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> previous(b.size() + 1);
  std::vector<size_t> current(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) previous[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    current[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t substitution = previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      current[j] = std::min({previous[j] + 1, current[j - 1] + 1, substitution});
    }
    std::swap(previous, current);
  }
  return previous[b.size()];
}

std::optional<std::string> closest_match(std::string_view word,
                                         const std::vector<std::string>& candidates) {
  const size_t limit = std::max<size_t>(2, word.size() / 3);
  std::optional<std::string> best;
  size_t best_distance = limit + 1;
  for (const std::string& candidate : candidates) {
    size_t distance = edit_distance(word, candidate);
    if (distance < best_distance) {
      best_distance = distance;
      best = candidate;
    }
  }
  return best;
}

std::string describe_node(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Undefined:
      return "nothing";
    case YAML::NodeType::Null:
      return "null";
    case YAML::NodeType::Sequence:
      return "a sequence";
    case YAML::NodeType::Map:
      return "a mapping";
    case YAML::NodeType::Scalar:
      break;
  }
  std::string text = node.Scalar();
  size_t cut = std::min(text.find('\n'), kMaxDescribedLength);
  if (cut < text.size()) text = text.substr(0, cut) + "...";
  return "'" + text + "'";
}

std::string join_key_path(const std::string& parent, const std::string& key) {
  return parent.empty() ? key : parent + "." + key;
}

std::string index_key_path(const std::string& parent, size_t index) {
  return parent + "[" + std::to_string(index) + "]";
}

ConfigError error_at(const YAML::Node& node, const std::string& file, const std::string& key_path,
                     const std::string& message) {
  YAML::Mark mark = node.IsDefined() ? node.Mark() : YAML::Mark::null_mark();
  auto [line, column] = position_of(mark);
  return ConfigError(file, line, column, key_path, message);
}

void decode_value(const YAML::Node& node, const std::string& file, const std::string& key_path,
                  std::string* out) {
  if (!node.IsScalar()) fail_expected(node, file, key_path, "a string");
  *out = node.Scalar();
}

void decode_value(const YAML::Node& node, const std::string& file, const std::string& key_path,
                  bool* out) {
  if (!node.IsScalar() || !parse_bool(node.Scalar(), out)) {
    fail_expected(node, file, key_path, "a boolean (true or false)");
  }
}

void decode_value(const YAML::Node& node, const std::string& file, const std::string& key_path,
                  int64_t* out) {
  if (!node.IsScalar()) fail_expected(node, file, key_path, "an integer");
  switch (parse_int(node.Scalar(), out)) {
    case ParseResult::kOk:
      return;
    case ParseResult::kOutOfRange:
      fail_expected(node, file, key_path, "an integer", " (out of the 64-bit range)");
    case ParseResult::kInvalid:
      break;
  }
  fail_expected(node, file, key_path, "an integer");
}

void decode_value(const YAML::Node& node, const std::string& file, const std::string& key_path,
                  int32_t* out) {
  int64_t value = 0;
  decode_value(node, file, key_path, &value);
  if (value < std::numeric_limits<int32_t>::min() || value > std::numeric_limits<int32_t>::max()) {
    fail_expected(node, file, key_path, "an integer", " (out of the 32-bit range)");
  }
  *out = static_cast<int32_t>(value);
}

void decode_value(const YAML::Node& node, const std::string& file, const std::string& key_path,
                  double* out) {
  if (!node.IsScalar() || !parse_double(node.Scalar(), out)) {
    fail_expected(node, file, key_path, "a number");
  }
}

void decode_value(const YAML::Node& node, const std::string& file, const std::string& key_path,
                  std::vector<std::string>* out) {
  decode_list(node, file, key_path, "a list of strings", out);
}

void decode_value(const YAML::Node& node, const std::string& file, const std::string& key_path,
                  std::vector<int64_t>* out) {
  decode_list(node, file, key_path, "a list of integers", out);
}

void decode_value(const YAML::Node& node, const std::string& file, const std::string& key_path,
                  std::vector<double>* out) {
  decode_list(node, file, key_path, "a list of numbers", out);
}

void decode_value(const YAML::Node& node, const std::string& file, const std::string& key_path,
                  std::map<std::string, std::string>* out) {
  if (!node.IsMap()) fail_expected(node, file, key_path, "a mapping of strings");
  out->clear();
  for (auto it = node.begin(); it != node.end(); ++it) {
    if (!it->first.IsScalar()) fail_expected(it->first, file, key_path, "a string key");
    const std::string& key = it->first.Scalar();
    const std::string path = join_key_path(key_path, key);
    if (it->second.IsNull()) fail_expected(it->second, file, path, "a string", "", &it->first);
    std::string value;
    decode_value(it->second, file, path, &value);
    (*out)[key] = std::move(value);
  }
}

MapReader::MapReader(const YAML::Node& node, std::string file, std::string key_path)
    : node_(node), file_(std::move(file)), key_path_(std::move(key_path)) {
  if (!node_.IsMap()) {
    std::string got = node_.IsScalar() ? "a scalar " + describe_node(node_) : describe_node(node_);
    throw error_at(node_, file_, key_path_, "expected a mapping, got " + got);
  }
}

MapReader& MapReader::operator=(const MapReader& other) {
  if (this != &other) {
    node_.reset(other.node_);  // YAML::Node::operator= would overwrite the node's content
    file_ = other.file_;
    key_path_ = other.key_path_;
    known_ = other.known_;
  }
  return *this;
}

std::optional<std::pair<YAML::Node, YAML::Node>> MapReader::find(const std::string& key) const {
  for (auto it = node_.begin(); it != node_.end(); ++it) {
    if (it->first.IsScalar() && it->first.Scalar() == key) {
      return std::make_pair(it->first, it->second);
    }
  }
  return std::nullopt;
}

std::optional<YAML::Node> MapReader::node(const std::string& key) {
  allow_keys({key});
  std::optional<std::pair<YAML::Node, YAML::Node>> entry = find(key);
  if (!entry) return std::nullopt;
  return entry->second;
}

YAML::Node MapReader::required_node(const std::string& key) {
  std::optional<YAML::Node> value = node(key);
  if (!value) throw missing_key(key);
  return *value;
}

void MapReader::allow_keys(const std::vector<std::string>& keys) {
  for (const std::string& key : keys) {
    if (std::find(known_.begin(), known_.end(), key) == known_.end()) known_.push_back(key);
  }
}

MapReader MapReader::map(const std::string& key) {
  std::optional<YAML::Node> value = node(key);
  if (!value) throw missing_key(key);
  if (value->IsNull()) throw error(key, "expected a mapping, got null");
  return MapReader(*value, file_, child_path(key));
}

std::optional<MapReader> MapReader::optional_map(const std::string& key) {
  std::optional<YAML::Node> value = node(key);
  if (!value || value->IsNull()) return std::nullopt;
  return MapReader(*value, file_, child_path(key));
}

void MapReader::reject_unknown_keys() const {
  for (auto it = node_.begin(); it != node_.end(); ++it) {
    if (!it->first.IsScalar()) {
      throw error_at(it->first, file_, key_path_,
                     "keys must be strings, got " + describe_node(it->first));
    }
    const std::string& key = it->first.Scalar();
    if (std::find(known_.begin(), known_.end(), key) != known_.end()) continue;
    std::string message = "unknown key '" + key + "'";
    if (std::optional<std::string> suggestion = closest_match(key, known_)) {
      message += " (did you mean '" + *suggestion + "'?)";
    }
    if (known_.empty()) {
      message += "; no keys are allowed here";
    } else {
      message += "; known keys: ";
      for (size_t i = 0; i < known_.size(); ++i) {
        if (i > 0) message += ", ";
        message += known_[i];
      }
    }
    throw error_at(it->first, file_, child_path(key), message);
  }
}

std::vector<std::string> MapReader::unknown_keys() const {
  std::vector<std::string> out;
  for (auto it = node_.begin(); it != node_.end(); ++it) {
    if (!it->first.IsScalar()) continue;
    const std::string& key = it->first.Scalar();
    if (std::find(known_.begin(), known_.end(), key) == known_.end()) {
      out.push_back(child_path(key));
    }
  }
  return out;
}

bool MapReader::contains(const std::string& key) const { return find(key).has_value(); }

ConfigError MapReader::error(const std::string& key, const std::string& message) const {
  std::optional<std::pair<YAML::Node, YAML::Node>> entry = find(key);
  if (!entry) return error_at(node_, file_, child_path(key), message);
  return error_at(value_anchor(entry->first, entry->second), file_, child_path(key), message);
}

ConfigError MapReader::missing_key(const std::string& key) const {
  return error_at(node_, file_, key_path_, "missing required key '" + key + "'");
}

}  // namespace kiln::config
