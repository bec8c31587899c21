#include "msrun_ssh/events.h"

#include <errno.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "msrun_ssh/console_sink.h"
#include "msrun_ssh/error.h"
#include "msrun_ssh/output.h"

namespace msrun_ssh {

EventLog::EventLog(const std::string& path, Clock clock, ConsoleSink* sink)
    : path_(path), clock_(std::move(clock)) {
  if (!clock_) clock_ = [] { return std::chrono::system_clock::now(); };
  if (path == "-") {
    sink_ = sink ? sink : &console_sink();
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
  if (sink_) {
    sink_->write(STDOUT_FILENO, line, false);  // never dropped, never waited for
    return;
  }
  // A line written in part (the disk filled in its middle) is cut off again, else the next event
  // would go on that line and both be unreadable; where it cannot be, the next starts a line.
  struct stat before {};
  const bool sized = ::fstat(::fileno(file_), &before) == 0;
  if (cut_line_) line.insert(0, 1, '\n');
  bool ok = std::fwrite(line.data(), 1, line.size(), file_) == line.size();
  ok = std::fflush(file_) == 0 && ok;
  if (ok) cut_line_ = false;
  if (ok) {
    if (missing_ > 0)
      std::fprintf(stderr,
                   "msrun-ssh: the events file %s is written again; %zu events are missing\n",
                   path_.c_str(), missing_);
    missing_ = 0;
    return;
  }
  // A full disk must not stop the job: said once when events start to go missing, counted.
  if (missing_++ == 0)
    std::fprintf(stderr, "msrun-ssh: warning: cannot write the events file %s: %s\n", path_.c_str(),
                 std::strerror(errno));
  std::clearerr(file_);
  struct stat after {};
  if (sized && ::fstat(::fileno(file_), &after) == 0 && after.st_size > before.st_size &&
      ::ftruncate(::fileno(file_), before.st_size) != 0)
    cut_line_ = true;
}

nlohmann::json log_gap_json(const LogGap& gap) {
  nlohmann::json j = {{"path", gap.path},
                      {"bytes_written", gap.written},
                      {"bytes_missing", gap.missing},
                      {"error", gap.error}};
  if (!gap.close_error.empty()) j["close_error"] = gap.close_error;
  return j;
}

nlohmann::json summary_json(const std::vector<SummaryRow>& rows) {
  nlohmann::json procs = nlohmann::json::array();
  nlohmann::json root = nullptr;
  nlohmann::json incomplete = nlohmann::json::array();
  int torn_down = 0;
  for (const SummaryRow& r : rows) {
    if (r.log_gap.missing > 0 || !r.log_gap.close_error.empty())
      incomplete.push_back(log_gap_json(r.log_gap));
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
  return {{"processes", procs},
          {"root_cause", root},
          {"torn_down", torn_down},
          {"incomplete_logs", incomplete}};
}

}  // namespace msrun_ssh
