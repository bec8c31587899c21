#include "msrun_ssh/events.h"

#include <errno.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cstring>

#include "msrun_ssh/error.h"
#include "msrun_ssh/output.h"

namespace msrun_ssh {

EventLog::EventLog(const std::string& path, Clock clock) : clock_(std::move(clock)) {
  if (!clock_) clock_ = [] { return std::chrono::system_clock::now(); };
  if (path == "-") {
    file_ = stdout;
    return;
  }
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0 || !(file_ = ::fdopen(fd, "a"))) {
    std::string why = std::strerror(errno);
    if (fd >= 0) ::close(fd);
    throw InputError(fmt::format("--events={}: cannot open: {}", path, why));
  }
  owned_ = true;
}

EventLog::~EventLog() {
  if (owned_) std::fclose(file_);
}

void EventLog::emit(std::string_view type, const nlohmann::json& fields) {
  nlohmann::json event = {
      {"version", kVersion}, {"time", format_timestamp(clock_())}, {"type", type}};
  for (const auto& [key, value] : fields.items()) event[key] = value;
  // Bytes that are not UTF-8 (a process's output) are replaced, never a reason to throw.
  std::string line = event.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  line += '\n';
  std::fwrite(line.data(), 1, line.size(), file_);
  std::fflush(file_);
}

nlohmann::json summary_json(const std::vector<SummaryRow>& rows) {
  nlohmann::json procs = nlohmann::json::array();
  nlohmann::json root = nullptr;
  int torn_down = 0;
  for (const SummaryRow& r : rows) {
    nlohmann::json p = {{"host", r.host},       {"process", r.process}, {"status", r.status},
                        {"seconds", r.seconds}, {"failed", r.failed},   {"torn_down", r.torn_down}};
    p["rank"] = rank_json(r.rank);
    if (r.torn_down) ++torn_down;
    if (r.root_cause) {
      root = p;
      root["traceback"] = r.traceback;
      root["last_lines"] = r.last_lines;
      if (!r.error_message.empty())
        root["error_file"] = {{"message", r.error_message}, {"timestamp", r.error_time}};
    }
    procs.push_back(std::move(p));
  }
  return {{"processes", procs}, {"root_cause", root}, {"torn_down", torn_down}};
}

}  // namespace msrun_ssh
