// The fake clock under both fake transports (fake_transport.h, reply_transport.h): callbacks
// scheduled at times in milliseconds, run in time order (then in the order they were scheduled)
// as poll() moves the clock.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>

namespace msrun_ssh {

class FakeClock {
 protected:
  void schedule(double at_ms, std::function<void()> fn) {
    timeline_.emplace(std::make_pair(at_ms, seq_++), std::move(fn));
  }

  // What poll(timeout_ms) does to the clock: when something is due within the timeout, the clock
  // moves to it and runs everything due by then; else it moves to the end of the timeout (a
  // timeout of -1 with nothing scheduled would block forever: an error naming `who`).
  void advance(int timeout_ms, const char* who) {
    double limit = timeout_ms < 0 ? HUGE_VAL : now_ + timeout_ms;
    if (timeline_.empty() || timeline_.begin()->first.first > limit) {
      if (timeout_ms < 0)
        throw std::runtime_error(std::string(who) + ": poll(-1) would block forever");
      now_ = limit;
      return;
    }
    now_ = std::max(now_, timeline_.begin()->first.first);
    while (!timeline_.empty() && timeline_.begin()->first.first <= now_) {
      auto fn = std::move(timeline_.begin()->second);
      timeline_.erase(timeline_.begin());
      fn();
    }
  }

  double now_ = 0;

 private:
  std::map<std::pair<double, uint64_t>, std::function<void()>> timeline_;
  uint64_t seq_ = 0;
};

}  // namespace msrun_ssh
