// The console (the launcher's stdout and stderr: a terminal, a pipe or a file) never slows, stalls
// or ends a job. A terminal stopped with Ctrl-S, a pager nobody scrolls (`| less`) or a slow link
// blocks write(); so the launcher's loop never writes to the console itself. It hands bytes to the
// sink, which queues them (bounded) and writes them from a thread of its own. When the console
// falls behind by more than the bound, whole lines of the processes' output are dropped (the logs
// have every one of them) and, once the console takes bytes again, one line on stderr says how
// many: "msrun-ssh: ... 123,456 lines not shown; the logs have them". The launcher's own messages
// are never dropped (they are few).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace msrun_ssh {

// What the sink does with bytes once queued; the default is write(2) until all is written.
// Tests hand in a writer that blocks or is slow.
using ConsoleWriteFn = std::function<void(int fd, std::string_view data)>;

class ConsoleSink {
 public:
  // At most `max_queued` bytes wait for the console; more process lines than that are dropped.
  explicit ConsoleSink(size_t max_queued = kDefaultMaxQueued, ConsoleWriteFn writer = {});
  ~ConsoleSink();  // stop()
  ConsoleSink(const ConsoleSink&) = delete;
  ConsoleSink& operator=(const ConsoleSink&) = delete;

  static constexpr size_t kDefaultMaxQueued = size_t{4} << 20;

  // Queues `data` for `fd`; never blocks on the console. `droppable`: lines of the processes'
  // output, dropped (counted by their newlines) when they would take the queue past its bound
  // while something waits in it (one write larger than the bound goes out when nothing does);
  // else always queued.
  void write(int fd, std::string_view data, bool droppable);
  // Waits until everything queued is written (the end of a run: nothing queued is lost); with
  // `timeout_ms` >= 0 at most that long. Whether all was written.
  bool drain(double timeout_ms = -1);
  // drain(), then ends the thread; later writes are written at once (blocking). Before fork().
  void stop();

  uint64_t dropped_lines() const;  // in all, since the start
  size_t queued_bytes() const;

 private:
  struct State;
  State* s_;
};

// The process's sink for its stdout and stderr (made at first use).
ConsoleSink& console_sink();

// "123,456": thousands separated by commas.
std::string group_thousands(uint64_t n);

}  // namespace msrun_ssh
