// --events FILE: the job's life as JSON Lines, one object per line, for machines (dashboards,
// schedulers, tests). The schema is docs/events.md; it only grows: a field or type is never
// removed or changed in meaning without raising kVersion.
#pragma once

#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace msrun_ssh {

class ConsoleSink;

class EventLog {
 public:
  static constexpr int kVersion = 1;
  using Clock = std::function<std::chrono::system_clock::time_point()>;

  // Appends to `path` ("-": the launcher's stdout, through `sink`, default console_sink(), so that
  // a stopped terminal or a pager nobody scrolls never holds up the launcher's loop, and events
  // keep their place among the console's lines), created 0600. Throws InputError naming the file
  // when it cannot be opened. `clock` gives each event's time (default: the system clock).
  explicit EventLog(const std::string& path, Clock clock = {}, ConsoleSink* sink = nullptr);
  ~EventLog();
  EventLog(const EventLog&) = delete;
  EventLog& operator=(const EventLog&) = delete;

  // Writes {"version":1,"time":"<ISO 8601 UTC ms>","type":TYPE, ...fields} and flushes it, so a
  // reader following the file sees each event when it happens. An event that cannot be written
  // (a full disk) is counted; the first such one, and the first written again, are said on stderr.
  void emit(std::string_view type, const nlohmann::json& fields = nlohmann::json::object());

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
  bool owned_ = false;
  ConsoleSink* sink_ = nullptr;  // for "-"
  Clock clock_;
  size_t missing_ = 0;     // events not written since the last one that was
  bool cut_line_ = false;  // the file ends in part of a line that could not be cut off
};

struct SummaryRow;
struct LogGap;

// The end-of-job summary as data: every process (host, process, rank, status, seconds, failed,
// ended by the teardown), the root cause (with its traceback or last lines), the number of
// processes the teardown ended and the logs that miss bytes ("incomplete_logs", log_gap_json).
// The "summary" event and <log_dir>/summary.json carry it.
nlohmann::json summary_json(const std::vector<SummaryRow>& rows);

// A log the launcher could not write all of (output.h): path, bytes_written, bytes_missing, error;
// also the "log_write_error" event's fields.
nlohmann::json log_gap_json(const LogGap& gap);

// A process's "rank" field: a worker's global rank, null for the scheduler (rank < 0).
inline nlohmann::json rank_json(int rank) {
  return rank >= 0 ? nlohmann::json(rank) : nlohmann::json(nullptr);
}

// For rooms that may run without an event log: emits when `log` is set.
inline void emit_event(EventLog* log, std::string_view type,
                       const nlohmann::json& fields = nlohmann::json::object()) {
  if (log) log->emit(type, fields);
}

}  // namespace msrun_ssh
