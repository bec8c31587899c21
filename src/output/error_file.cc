// The error files of torch ranks (output.h, ErrorFile): torch.distributed.elastic's own two
// layouts, read as its ProcessFailure reads them.
#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "msrun_ssh/base.h"
#include "msrun_ssh/output.h"

namespace msrun_ssh {
namespace {

// A timestamp written as a number or as a string of digits ("1764669600"); 0 when neither.
long long seconds_of(const nlohmann::json& v) {
  if (v.is_number_integer()) return v.get<long long>();
  if (!v.is_string()) return 0;
  try {
    size_t used = 0;
    const auto& s = v.get_ref<const std::string&>();
    long long n = std::stoll(s, &used);
    return used == s.size() ? n : 0;
  } catch (const std::exception&) {
    return 0;
  }
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  for (std::string_view line : split_lines(text)) lines.emplace_back(line);
  return lines;
}

}  // namespace

std::optional<ErrorFile> parse_error_file(std::string_view json) {
  nlohmann::json doc = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object() || !doc.contains("message")) return std::nullopt;
  const auto& message = doc["message"];
  ErrorFile file;
  if (message.is_string()) {  // {"message": "...", "timestamp": N}
    file.message = message.get<std::string>();
    if (doc.contains("timestamp")) file.timestamp = seconds_of(doc["timestamp"]);
    return file;
  }
  if (!message.is_object() || !message.contains("message") || !message["message"].is_string())
    return std::nullopt;
  file.message = message["message"].get<std::string>();
  if (message.contains("extraInfo") && message["extraInfo"].is_object()) {
    const auto& extra = message["extraInfo"];
    if (extra.contains("py_callstack") && extra["py_callstack"].is_string())
      file.traceback = lines_of(extra["py_callstack"].get<std::string>());
    if (extra.contains("timestamp")) file.timestamp = seconds_of(extra["timestamp"]);
  }
  return file;
}

void follow_error_files(std::vector<SummaryRow>& rows) {
  auto root = std::find_if(rows.begin(), rows.end(), [](const auto& r) { return r.root_cause; });
  if (root == rows.end() || root->error_time == 0) return;
  auto earliest = root;
  for (auto it = rows.begin(); it != rows.end(); ++it)
    if (it->failed && it->error_time > 0 && it->error_time < earliest->error_time) earliest = it;
  root->root_cause = false;
  earliest->root_cause = true;
}

std::string torchelastic_error(const std::vector<SummaryRow>& rows, long long now) {
  auto root = std::find_if(rows.begin(), rows.end(), [](const auto& r) { return r.root_cause; });
  if (root == rows.end()) return "";
  std::string callstack;
  for (const auto& line : root->traceback.empty() ? root->last_lines : root->traceback)
    callstack += line + "\n";
  nlohmann::json message;
  if (!root->error_message.empty()) {
    // The rank's file as torch's ErrorHandler.dump_error_file passes it on, exitcode added.
    message = {{"message", root->error_message},
               {"extraInfo",
                {{"py_callstack", callstack}, {"timestamp", std::to_string(root->error_time)}}},
               {"errorCode", root->exit_code}};
  } else {
    // As torch's @record writes the ChildFailedError of a root cause without an error file.
    message = {{"message", fmt::format("ChildFailedError: {} on {} failed: {}", root->process,
                                       root->host, root->status)},
               {"extraInfo", {{"py_callstack", callstack}, {"timestamp", std::to_string(now)}}}};
  }
  return nlohmann::json{{"message", message}}.dump(-1, ' ', false,
                                                   nlohmann::json::error_handler_t::replace);
}

}  // namespace msrun_ssh
