// What transport tests record of a Transport's events: per channel its output, exit and close,
// per host why it was lost; and a loop that polls until a condition holds.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "msrun_ssh/transport.h"

namespace msrun_ssh::test {

// What one channel saw.
struct Seen {
  std::string out, err;
  int status = -1;
  std::string signal, failed;
  bool closed = false;
};

class ChannelRecorder {
 public:
  void record(const TransportEvent& e) {
    using Kind = TransportEvent::Kind;
    if (e.kind == Kind::kHostLost) {
      lost[e.host] = std::string(e.data);
      return;
    }
    Seen& s = seen[e.channel];
    if (e.kind == Kind::kData) (e.is_stderr ? s.err : s.out) += e.data;
    if (e.kind == Kind::kExit) {
      s.status = e.status;
      s.signal = e.signal;
    }
    if (e.kind == Kind::kOpenFailed) s.failed = std::string(e.data);
    if (e.kind == Kind::kClosed || e.kind == Kind::kOpenFailed) {
      s.closed = true;
      closings.push_back(e.channel);
    }
  }
  // Polls `t`, recording every event, until `done` or `limit_ms`; the test fails on the limit.
  void run_until(Transport& t, const std::function<bool()>& done, double limit_ms = 10000) {
    double end = t.now_ms() + limit_ms;
    while (!done() && t.now_ms() < end) t.poll(50, [&](const TransportEvent& e) { record(e); });
    ASSERT_TRUE(done()) << "timed out";
  }
  // Polls `t` for `ms`, recording every event.
  void run_for(Transport& t, double ms) {
    double end = t.now_ms() + ms;
    while (t.now_ms() < end) t.poll(50, [&](const TransportEvent& e) { record(e); });
  }
  // Whether every one of `ids` has closed (or failed to open).
  std::function<bool()> closed(const std::vector<ChannelId>& ids) {
    return [this, ids] {
      for (ChannelId id : ids)
        if (!seen[id].closed) return false;
      return true;
    };
  }

  std::map<ChannelId, Seen> seen;
  std::vector<ChannelId> closings;  // in the order they came
  std::map<size_t, std::string> lost;
};

}  // namespace msrun_ssh::test
