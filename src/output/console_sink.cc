// The console sink (console_sink.h): a bounded queue and one writer thread.
#include "msrun_ssh/console_sink.h"

#include <fmt/format.h>
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>

#include "msrun_ssh/base.h"

namespace msrun_ssh {

// What waits for the console: bytes for one descriptor.
struct ConsoleChunk {
  int fd;
  std::string data;
};

struct ConsoleSink::State {
  size_t max_queued;
  ConsoleWriteFn writer;
  mutable std::mutex m;
  std::condition_variable work;  // something queued, or stopping
  std::condition_variable idle;  // a chunk was written
  std::deque<ConsoleChunk> queue;
  size_t queued = 0;
  bool writing = false;
  bool stopping = false;
  bool stopped = false;
  uint64_t dropped_total = 0;
  uint64_t dropped_unreported = 0;
  std::thread thread;

  void run() {
    std::unique_lock lock(m);
    while (true) {
      work.wait(lock, [&] { return !queue.empty() || stopping; });
      if (queue.empty()) return;
      ConsoleChunk c = std::move(queue.front());
      queue.pop_front();
      writing = true;
      lock.unlock();
      writer(c.fd, c.data);
      lock.lock();
      queued -= c.data.size();
      writing = false;
      idle.notify_all();
    }
  }

  // Under the lock.
  void enqueue(int fd, std::string_view data) {
    if (!queue.empty() && queue.back().fd == fd)
      queue.back().data.append(data);
    else
      queue.push_back({fd, std::string(data)});
    queued += data.size();
    work.notify_one();
  }

  // Under the lock: the line saying what was dropped, once the console takes bytes again.
  void report_dropped() {
    if (dropped_unreported == 0) return;
    enqueue(2, fmt::format("msrun-ssh: ... {} lines not shown (the console fell behind); the logs "
                           "have them\n",
                           group_thousands(std::exchange(dropped_unreported, 0))));
  }
};

ConsoleSink::ConsoleSink(size_t max_queued, ConsoleWriteFn writer) : s_(new State) {
  s_->max_queued = std::max<size_t>(max_queued, 1);
  s_->writer = writer ? std::move(writer) : ConsoleWriteFn(write_fully);
  // The thread takes no signal: they stay with the launcher's loop (signalfd), whatever the mask
  // is when the sink is made.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  s_->thread = std::thread([this] { s_->run(); });
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

ConsoleSink::~ConsoleSink() {
  stop();
  delete s_;
}

void ConsoleSink::write(int fd, std::string_view data, bool droppable) {
  if (data.empty()) return;
  std::unique_lock lock(s_->m);
  if (s_->stopped) {
    lock.unlock();
    s_->writer(fd, data);
    return;
  }
  // A write larger than the bound itself still goes out when nothing waits (in gather mode a
  // turn's lines come as one): the bound holds back a console that falls behind, not one that
  // keeps up.
  if (droppable && s_->queued > 0 && s_->queued + data.size() > s_->max_queued) {
    uint64_t lines = static_cast<uint64_t>(std::count(data.begin(), data.end(), '\n'));
    s_->dropped_total += lines;
    s_->dropped_unreported += lines;
    return;
  }
  // Room again (half the bound free): first the count of what was dropped.
  if (s_->queued <= s_->max_queued / 2) s_->report_dropped();
  s_->enqueue(fd, data);
}

bool ConsoleSink::drain(double timeout_ms) {
  std::unique_lock lock(s_->m);
  if (s_->stopped) return true;
  s_->report_dropped();
  auto done = [&] { return s_->queue.empty() && !s_->writing; };
  if (timeout_ms < 0) {
    s_->idle.wait(lock, done);
    return true;
  }
  return s_->idle.wait_for(lock, std::chrono::duration<double, std::milli>(timeout_ms), done);
}

void ConsoleSink::stop() {
  drain();
  {
    std::lock_guard lock(s_->m);
    if (s_->stopped) return;
    s_->stopping = true;
    s_->work.notify_all();
  }
  s_->thread.join();
  std::lock_guard lock(s_->m);
  s_->stopped = true;
}

uint64_t ConsoleSink::dropped_lines() const {
  std::lock_guard lock(s_->m);
  return s_->dropped_total;
}

size_t ConsoleSink::queued_bytes() const {
  std::lock_guard lock(s_->m);
  return s_->queued;
}

ConsoleSink& console_sink() {
  static ConsoleSink sink;
  return sink;
}

std::string group_thousands(uint64_t n) {
  std::string digits = std::to_string(n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

}  // namespace msrun_ssh
