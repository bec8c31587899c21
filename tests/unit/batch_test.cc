// The batch runner (src/transport/batch.cc) against ReplyTransport: scripted replies, a fake clock
// (ms), no SSH and no sleeping.
#include "msrun_ssh/batch.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "reply_transport.h"

namespace msrun_ssh {
namespace {

using fake::Reply;
using fake::ReplyTransport;

Reply says(const std::string& out, double exit_at = 0.01, int status = 0) {
  return Reply{.output = {{0.001, out}}, .exit_at = exit_at, .status = status};
}

TEST(Batch, EveryHostAnswers) {
  ReplyTransport t;
  t.on("uname", says("node0\n"), 0);
  t.on("uname", says("node1\n"), 1);
  t.on("uname", says("node2\n"), 2);
  auto r = run_batch(t, {0, 1, 2}, "uname -n", 5);
  ASSERT_EQ(r.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(r[i].host, i);
    EXPECT_EQ(r[i].out, "node" + std::to_string(i) + "\n");
    EXPECT_EQ(r[i].status, 0);
    EXPECT_TRUE(r[i].closed);
    EXPECT_EQ(r[i].failure, BatchFailure::kNone);
  }
  EXPECT_EQ(t.now_ms(), 10);  // no waiting once every command closed
  EXPECT_TRUE(t.kills.empty());
  EXPECT_EQ(exited_output(r),
            (std::vector<std::optional<std::string>>{"node0\n", "node1\n", "node2\n"}));
}

TEST(Batch, OneHostFails) {
  ReplyTransport t;
  Reply boom = says("half\n", 0.02, 3);
  boom.errors = {{0.005, "boom\n"}};
  t.on("probe", boom, 1);
  t.on("probe", Reply{.open_error = "administratively prohibited"}, 2);
  t.on("probe", says("ok\n"));  // host 0
  auto r = run_batch(t, {{0, "probe"}, {1, "probe"}, {2, "probe"}}, 5);
  EXPECT_EQ(r[0].status, 0);
  EXPECT_EQ(r[1].status, 3);
  EXPECT_EQ(r[1].out, "half\n");
  EXPECT_EQ(r[1].err, "boom\n");
  EXPECT_EQ(r[1].failure, BatchFailure::kNone);
  EXPECT_FALSE(r[2].status.has_value());
  EXPECT_TRUE(r[2].closed);
  EXPECT_EQ(r[2].failure, BatchFailure::kOpenFailed);
  EXPECT_EQ(r[2].why, "administratively prohibited");
  // An exit status counts, whatever it is; no status, no output.
  auto out = exited_output(r);
  EXPECT_EQ(out[1], "half\n");
  EXPECT_FALSE(out[2].has_value());
  EXPECT_EQ(t.now_ms(), 20);
}

TEST(Batch, AHostThatNeverAnswersIsKilledAtTheDeadline) {
  ReplyTransport t;
  t.on("probe", says("started\n", -1), 1);  // runs for ever
  t.on("probe", says("ok\n"));
  auto r = run_batch(t, {0, 1}, "probe", 2.5);
  EXPECT_EQ(t.now_ms(), 2500);
  EXPECT_EQ(r[0].status, 0);
  EXPECT_EQ(r[0].failure, BatchFailure::kNone);
  EXPECT_EQ(r[1].failure, BatchFailure::kTimedOut);
  EXPECT_FALSE(r[1].closed);
  EXPECT_FALSE(r[1].status.has_value());  // the kill's end is not recorded
  EXPECT_EQ(r[1].out, "started\n");
  ASSERT_EQ(t.kills.size(), 1u);
  EXPECT_EQ(t.kills[0].channel, 1);
  EXPECT_EQ(t.kills[0].signal, "KILL");
  EXPECT_EQ(t.kills[0].at_ms, 2500);
  EXPECT_FALSE(exited_output(r)[1].has_value());
}

TEST(Batch, OutputOfSeveralHostsIsKeptApart) {
  ReplyTransport t;
  t.on("cat",
       Reply{.output = {{0.001, "a1 "}, {0.003, "a2\n"}},
             .errors = {{0.002, "ea\n"}},
             .exit_at = 0.005},
       0);
  t.on("cat",
       Reply{.output = {{0.002, "b1 "}, {0.004, "b2\n"}},
             .errors = {{0.001, "eb\n"}},
             .exit_at = 0.006},
       1);
  auto r = run_batch(t, {0, 1}, "cat", 1);
  EXPECT_EQ(r[0].out, "a1 a2\n");
  EXPECT_EQ(r[0].err, "ea\n");
  EXPECT_EQ(r[1].out, "b1 b2\n");
  EXPECT_EQ(r[1].err, "eb\n");
}

TEST(Batch, ALostHostIsNamedOnItsCommands) {
  ReplyTransport t;
  t.on("probe", says("part", -1), 1);
  t.on("probe", says("ok\n", 0.01));
  t.lose(1, 0.5, "connection reset by peer");
  auto r = run_batch(t, {0, 1}, "probe", 5);
  EXPECT_EQ(t.now_ms(), 500);
  EXPECT_EQ(r[0].failure, BatchFailure::kNone);
  EXPECT_EQ(r[1].failure, BatchFailure::kHostLost);
  EXPECT_EQ(r[1].why, "connection reset by peer");
  EXPECT_TRUE(r[1].closed);
  EXPECT_EQ(r[1].out, "part");
  EXPECT_TRUE(t.kills.empty());
}

TEST(Batch, TheCallerFeedsStdinStartsMoreAndStopsEarly) {
  ReplyTransport t;
  t.on("ask", Reply{.output = {{0.001, "question\n"}},
                    .exit_at = 0.002,
                    .until_eof = true,
                    .after_eof = {{0.001, "answered\n"}}});
  t.on("later", says("late\n", 0.003));
  t.on("forever", says("", -1));
  std::vector<size_t> asked;
  Batch b(t, [&](size_t i, const TransportEvent& e) {
    if (e.kind == TransportEvent::Kind::kData && b.result(i).out == "question\n")
      asked.push_back(i);
  });
  size_t ask = b.start(0, "ask");
  size_t forever = b.start(1, "forever");
  size_t later = 0;
  b.wait(60000, [&] {
    for (size_t i : asked) {
      b.write(i, "yes\n");
      b.send_eof(i);
      later = b.start(1, "later");
    }
    asked.clear();
    // Only the endless one left: stop waiting for it.
    return !(b.open() == 1 && t.now_ms() >= 1000);
  });
  EXPECT_EQ(t.channel(0).written, "yes\n");
  EXPECT_EQ(t.channel(0).eof_ms, 1);
  EXPECT_EQ(b.result(ask).out, "question\nanswered\n");
  EXPECT_EQ(b.result(ask).status, 0);
  EXPECT_EQ(b.result(later).out, "late\n");
  EXPECT_EQ(b.result(forever).failure, BatchFailure::kTimedOut);
  // The waits were at most a second each: the stop came at 1 s, not at the deadline.
  EXPECT_EQ(t.now_ms(), 1004);
  EXPECT_EQ(b.open(), 0u);
}

// wait_or_tell: a stop asked for (a signal to the launcher) tells each command still open a last
// word on its stdin (stop.sh's 'K') and gives it a last, shorter wait; the others are not told.
TEST(Batch, AWaitCutShortTellsTheOpenCommandsAndWaitsALittleMore) {
  ReplyTransport t;
  t.on("stop", says("done\n", 0.5), 1);
  t.on("stop", Reply{.exit_at = -1, .after_line = {{0.2, "killed\n"}}}, 2);
  t.on("stop", says("", -1));
  Batch b(t);
  size_t slow = b.start(0, "stop");
  size_t quick = b.start(1, "stop");
  size_t told = b.start(2, "stop");
  EXPECT_TRUE(b.wait_or_tell(
      60000, [&] { return t.now_ms() < 2000; }, "K\n", 3000));
  double asked = 2500;  // woken at least once a second: after 1 and 500 ms, 1500 and 2500
  EXPECT_EQ(t.channel(0).written, "K\n");
  EXPECT_EQ(t.channel(1).written, "");  // closed already: not told
  EXPECT_EQ(t.channel(2).written, "K\n");
  EXPECT_EQ(b.result(quick).out, "done\n");
  EXPECT_EQ(b.result(told).out, "killed\n");
  EXPECT_EQ(b.result(slow).failure, BatchFailure::kTimedOut);
  EXPECT_EQ(t.now_ms(), asked + 3000);
  ASSERT_EQ(t.kills.size(), 2u);  // the one told that ran on, and the one that never answered
  EXPECT_EQ(t.kills[0].at_ms, asked + 3000);
}

// The last wait never goes past the deadline; a deadline that passed tells nobody; without a
// keep_waiting the wait is wait()'s.
TEST(Batch, TheLastWordKeepsTheDeadline) {
  ReplyTransport t;
  t.on("stop", says("", -1));
  Batch b(t);
  b.start(0, "stop");
  EXPECT_TRUE(b.wait_or_tell(
      2600, [&] { return t.now_ms() < 2000; }, "K", 3000));
  EXPECT_EQ(t.now_ms(), 2600);
  EXPECT_EQ(t.channel(0).written, "K");
  Batch late(t);
  late.start(0, "stop");
  EXPECT_FALSE(late.wait_or_tell(
      t.now_ms(), [] { return false; }, "K", 3000));
  EXPECT_EQ(t.now_ms(), 2600);
  EXPECT_EQ(t.channel(1).written, "");
  Batch plain(t);
  plain.start(0, "stop");
  EXPECT_FALSE(plain.wait_or_tell(t.now_ms() + 5000, nullptr, "K", 3000));
  EXPECT_EQ(t.now_ms(), 7600);
  EXPECT_EQ(t.channel(2).written, "");
  EXPECT_EQ(t.kills.size(), 3u);
}

// run_batch gives up when its caller's keep_waiting says so (a signal), not at the deadline.
TEST(Batch, RunBatchStopsWhenTheCallerSaysSo) {
  ReplyTransport t;
  t.on("probe", says("", -1));
  auto r = run_batch(t, {0, 1}, "probe", 60, [&] { return t.now_ms() < 1500; });
  EXPECT_GE(t.now_ms(), 1500);
  EXPECT_LT(t.now_ms(), 2100);
  EXPECT_EQ(r[0].failure, BatchFailure::kTimedOut);
  EXPECT_EQ(t.kills.size(), 2u);
}

TEST(Batch, ADroppedHostsCommandsAreLostAndClosedTheOthersGoOn) {
  ReplyTransport t;
  t.on("work", Reply{.exit_at = -1}, 1);  // host 1 never answers
  t.on("work", says("done\n", 0.5), 0);
  Batch b(t);
  b.start(0, "work");
  b.start(1, "work");
  b.start(1, "work more");
  EXPECT_EQ(b.open_hosts(), (std::vector<size_t>{0, 1}));
  b.drop_host(1, "no TCP acknowledgement for 10 s");
  EXPECT_EQ(b.open_hosts(), (std::vector<size_t>{0}));
  EXPECT_EQ(b.open(), 1u);
  EXPECT_EQ(t.drops, (std::vector<size_t>{1}));
  b.wait(t.now_ms() + 5000);
  EXPECT_EQ(b.result(0).out, "done\n");
  for (size_t i : {1, 2}) {
    EXPECT_TRUE(b.result(i).closed);
    EXPECT_EQ(b.result(i).failure, BatchFailure::kHostLost);
    EXPECT_EQ(b.result(i).why, "no TCP acknowledgement for 10 s");
  }
  EXPECT_TRUE(t.kills.empty()) << "a dropped host's commands are not killed: it would not answer";
}

TEST(Batch, TroubleSaysWhyACommandGaveNoCompleteAnswer) {
  BatchResult r;
  EXPECT_EQ(batch_trouble(r, "late"), "closed without an answer");
  r.err = "warming up\nno such file\n \n";
  EXPECT_EQ(batch_trouble(r, "late"), "no such file");
  r.status = 2;
  EXPECT_EQ(batch_trouble(r, "late"), "exited with status 2: no such file");
  r.err.clear();
  EXPECT_EQ(batch_trouble(r, "late"), "exited with status 2");
  r.failure = BatchFailure::kTimedOut;
  EXPECT_EQ(batch_trouble(r, "late"), "late");
  r.failure = BatchFailure::kHostLost;
  r.why = "reset";
  EXPECT_EQ(batch_trouble(r, "late"), "connection lost: reset");
  r.failure = BatchFailure::kOpenFailed;
  r.why = "channel refused";
  EXPECT_EQ(batch_trouble(r, "late"), "channel refused");
}

}  // namespace
}  // namespace msrun_ssh
