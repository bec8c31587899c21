// The terminal's status row: the start-up progress of a run ("connecting 480/500 (failed 2)",
// "watchdogs ready ...", "started N/N") and, with --status_line, the running job's state, on the
// last row of a terminal (stderr), redrawn in place. It is never in the logs, never on a pipe or a
// file, and never when --quiet. Every other write to the terminal goes through write(): the row
// is erased first and drawn again after a complete line, so it never tears an output line.
// NO_COLOR is honoured by having no colour at all.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace msrun_ssh {

class ConsoleSink;

class StatusLine {
 public:
  // Draws on `fd` when `enabled` (see terminal_status_enabled). `width` 0: the terminal's width
  // (TIOCGWINSZ, measured at each show: the window may be resized), else 80; text longer than the
  // width is cut (a wrapped row could not be erased).
  StatusLine(int fd, bool enabled, size_t width = 0);
  ~StatusLine();
  StatusLine(const StatusLine&) = delete;
  StatusLine& operator=(const StatusLine&) = delete;

  bool enabled() const { return enabled_; }
  // Shows `text` (drawn at once when it differs from what is shown; "" is hide()).
  void show(std::string_view text);
  // Erases the row; nothing is shown until the next show().
  void hide();
  // Writes `data` to `fd` (the terminal's stdout or stderr, or anything else): the row is erased
  // first when shown, and drawn again when `data` ends a line. `droppable`: lines of the
  // processes, which the sink may drop when the console falls behind (see set_sink).
  void write(int fd, std::string_view data, bool droppable = false);
  // Every write, the row's too, goes through `sink` (null: written at once, blocking).
  void set_sink(ConsoleSink* sink) { sink_ = sink; }
  const std::string& text() const { return text_; }

 private:
  void draw();
  void erase();
  bool behind() const;  // the sink holds more than a row's worth of the console's backlog
  std::string cut(std::string_view text) const;  // to the width
  void put(int fd, std::string_view data, bool droppable);
  ConsoleSink* sink_ = nullptr;
  int fd_;
  bool enabled_;
  size_t width_;
  bool measure_;        // the width is the terminal's, measured at each show
  std::string text_;    // what the row shows (or showed last), cut to the width
  std::string wanted_;  // what it is to show, whole
  bool drawn_ = false;
};

// Whether the status row may be drawn on `fd`: a terminal, TERM not "dumb", not --quiet.
bool terminal_status_enabled(int fd, bool quiet);

// The start-up progress of a run, as text for the status row.
struct StartProgress {
  size_t hosts = 0;
  size_t processes = 0;
  enum class Phase { kConnecting, kWatchdogs, kStarted } phase = Phase::kConnecting;
  size_t done = 0;                   // hosts connected / watchdogs ready / processes started
  size_t failed = 0;                 // hosts that failed to connect
  double phase_seconds = 0;          // how long the phase has lasted
  std::vector<std::string> slowest;  // hosts of the phase not done yet, in host-file order

  // "connecting 12/500 (failed 1)", "watchdogs ready 480/500", "started 4000/4000"; after 3 s
  // in a phase, "; waiting for a, b, c (+N)" names up to three hosts not done yet.
  std::string text() const;
};

// Drives the status row through a start: phases, hosts done, the slowest named; redraws at most
// ten times a second (a phase's end and finish() at once).
class StartView {
 public:
  using Now = std::function<double()>;  // seconds, monotonic
  StartView(StatusLine& line, std::vector<std::string> hosts, size_t processes, Now now);

  // Begins a phase: nothing of it done yet.
  void phase(StartProgress::Phase phase);
  // In the phase, `host` is done (connected, watchdog ready) or failed to connect (`ok` false).
  void host_done(size_t host, bool ok);
  void processes_started(size_t n);
  // Redraws when due (the time spent, the slowest hosts).
  void tick();
  // Erases the row for good.
  void finish();
  bool finished() const { return finished_; }
  const StartProgress& progress() const { return progress_; }

 private:
  void draw(bool now);
  StatusLine& line_;
  std::vector<std::string> hosts_;
  std::vector<bool> done_;
  StartProgress progress_;
  Now now_;
  double phase_start_ = 0;
  double drawn_at_ = -1;
  bool finished_ = false;
};

// The running job, as text for --status_line: "running 7, exited 1, failed 0 | 12.3 KB/s |
// 01:02:03".
std::string running_status_text(size_t running, size_t exited, size_t failed, double bytes_per_s,
                                double elapsed_s);

}  // namespace msrun_ssh
