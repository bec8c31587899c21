// The launch agent (agent.h): its frames and reader, and AgentTransport over real local processes
// (local_transport.h) running the real agent (src/remote/agent.sh + agent.pl) or stand-ins.
#include "msrun_ssh/agent.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "channel_recorder.h"
#include "local_transport.h"
#include "msrun_ssh/command.h"
#include "msrun_ssh/watch.h"
#include "test_util.h"

namespace msrun_ssh {
namespace {

using Kind = TransportEvent::Kind;

TEST(AgentFrame, RoundTripsThroughTheReaderCutAnywhereAfterTheRcNoise) {
  std::string stream = "Welcome to node1\nconda: base\n" + std::string(kAgentHello) +
                       agent_frame('o', 7, "hello\n") + agent_frame('x', 7, "143 TERM") +
                       agent_frame('c', 7) + agent_frame('e', 300000, std::string(70000, 'z'));
  for (size_t step : {size_t{1}, size_t{5}, size_t{9}, stream.size()}) {
    AgentReader reader;
    std::string noise;
    std::vector<AgentFrame> frames;
    for (size_t at = 0; at < stream.size(); at += step)
      reader.feed(
          std::string_view(stream).substr(at, step), [&](std::string_view n) { noise += n; },
          [&](AgentFrame&& f) { frames.push_back(std::move(f)); });
    SCOPED_TRACE(step);
    EXPECT_TRUE(reader.hello());
    EXPECT_FALSE(reader.broken());
    EXPECT_EQ(noise, "Welcome to node1\nconda: base\n");
    ASSERT_EQ(frames.size(), 4u);
    EXPECT_EQ(frames[0], (AgentFrame{'o', 7, "hello\n"}));
    EXPECT_EQ(frames[1], (AgentFrame{'x', 7, "143 TERM"}));
    EXPECT_EQ(frames[2], (AgentFrame{'c', 7, ""}));
    EXPECT_EQ(frames[3].id, 300000u);
    EXPECT_EQ(frames[3].payload.size(), 70000u);
  }
}

TEST(AgentFrame, AnOverlongLengthBreaksTheReader) {
  AgentReader reader;
  std::string head = agent_frame('o', 1, "");
  head[5] = '\x7f';  // length 0x7f000000
  int frames = 0;
  reader.feed(
      std::string(kAgentHello) + head + agent_frame('o', 1, "x"), [](std::string_view) {},
      [&](AgentFrame&&) { ++frames; });
  EXPECT_TRUE(reader.broken());
  EXPECT_EQ(frames, 0);
}

TEST(AgentFrame, RcNoiseWithoutHelloIsBounded) {
  AgentReader reader;
  for (int i = 0; i < 100; ++i)
    reader.feed(
        std::string(10000, 'n'), [](std::string_view) { FAIL(); }, [](AgentFrame&&) { FAIL(); });
  std::string noise;
  reader.feed(
      kAgentHello, [&](std::string_view n) { noise = n; }, [](AgentFrame&&) {});
  EXPECT_TRUE(reader.hello());
  EXPECT_LE(noise.size(), size_t{64} * 1024 + kAgentHello.size());
  EXPECT_GT(noise.size(), 60000u);
}

TEST(AgentFrame, ExitPayloads) {
  int status = -1;
  std::string signal;
  EXPECT_TRUE(parse_agent_exit("3", status, signal));
  EXPECT_EQ(status, 3);
  EXPECT_EQ(signal, "");
  EXPECT_TRUE(parse_agent_exit("137 KILL", status, signal));
  EXPECT_EQ(status, 137);
  EXPECT_EQ(signal, "KILL");
  for (const char* bad : {"", "x", "3 ", "-1", "256", "3x", " 3"})
    EXPECT_FALSE(parse_agent_exit(bad, status, signal)) << bad;
}

// Every test here runs its processes under a job id of its own ("job-N", N used by no other
// test): CI runs the unit tests in two shards side by side, and a watchdog's sweep ends every
// process on the machine that carries its job's marker, another test's too.
class AgentOverLocal : public ::testing::Test, public test::ChannelRecorder {
 protected:
  // Starts job `job`'s watchdog on host 0 of `t`, asks it to quit once ready and waits until it
  // and `swept` have closed; returns what the watchdog printed.
  std::string quit_watchdog(Transport& t, const std::string& job, ChannelId swept) {
    ChannelId dog = ready_watchdog(t, job, 10, 0.2);
    t.write(dog, std::string(1, kQuit));
    run_until(t, closed({dog, swept}));
    return seen[dog].out;
  }
  // Starts job `job`'s watchdog on host 0 of `t` (its silence limit and grace in seconds); returns
  // it once it has said that it is ready.
  ChannelId ready_watchdog(Transport& t, const std::string& job, double silence, double grace) {
    ChannelId dog = t.exec(0, watchdog_command(job, silence, grace));
    run_until(t, [&] { return seen[dog].out.find("ready") != std::string::npos; });
    return dog;
  }
  // Starts `script` (whose first line out is "up") under /bin/sh -c in / as a process of job
  // `job` on host 0 of `t`; returns it once it has said "up".
  ChannelId up_process(Transport& t, const std::string& job, const std::string& script) {
    Process p;
    p.workdir = "/";
    p.argv = {"/bin/sh", "-c", script};
    ChannelId ch = t.exec(0, process_command(p, job));
    run_until(t, [&] { return seen[ch].out == "up\n"; });
    return ch;
  }

  local::LocalTransport local;
};

// The pids whose environment holds MSRUN_SSH_JOB=`job`.
std::vector<pid_t> marked(const std::string& job) {
  std::vector<pid_t> out;
  std::string want = std::string("\0MSRUN_SSH_JOB=", 15) + job + '\0';
  std::error_code ec;  // a process may end while it is read: no exception
  for (std::filesystem::directory_iterator it("/proc", ec), end; !ec && it != end;
       it.increment(ec)) {
    std::string name = it->path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    if (('\0' + test::slurp(it->path() / "environ")).find(want) != std::string::npos)
      out.push_back(std::stoi(name));
  }
  return out;
}

// Whether a process runs whose command line is exactly `argv` (exec'd: not a shell or env before).
bool running(const std::vector<std::string>& argv) {
  std::string words;
  for (const auto& w : argv) words += w + '\0';
  std::error_code ec;
  for (std::filesystem::directory_iterator it("/proc", ec), end; !ec && it != end; it.increment(ec))
    if (test::slurp(it->path() / "cmdline") == words) return true;
  return false;
}

TEST_F(AgentOverLocal, RunsEveryCommandOfAHostThroughOneAgent) {
  AgentTransport t(local, 1, agent_command(30));
  ChannelId a = t.exec(0, "echo out; echo err >&2; exit 3");
  ChannelId b = t.exec(0, "kill -TERM $$");
  ChannelId c = t.exec(0, "read x; echo \"got $x\"");
  t.write(c, "line\n");  // given while the agent still starts
  t.send_eof(c);
  run_until(t, closed({a, b, c}));
  EXPECT_EQ(local.execs.size(), 1u) << "one agent, nothing else";
  EXPECT_EQ(seen[a].out, "out\n");
  EXPECT_EQ(seen[a].err, "err\n");
  EXPECT_EQ(seen[a].status, 3);
  EXPECT_EQ(seen[b].status, 143);
  EXPECT_EQ(seen[b].signal, "TERM");
  EXPECT_EQ(seen[c].out, "got line\n");
  EXPECT_EQ(seen[c].status, 0);
  // Once no command will come, the agent's stdin ends and the agent with it, quietly.
  t.no_more_channels();
  run_until(t, [&] { return local.closed(0); });
  EXPECT_TRUE(lost.empty());
}

TEST_F(AgentOverLocal, KillSignalsTheCommandsProcessGroupAndStdinFollows) {
  AgentTransport t(local, 1, agent_command(30));
  ChannelId a = t.exec(0, "sleep 30 & wait");
  ChannelId b = t.exec(0, "while read l; do echo \"<$l>\"; done");
  run_until(t, [&] { return !local.execs.empty(); });
  t.write(b, "one\n");
  run_until(t, [&] { return seen[b].out == "<one>\n"; });
  t.write(b, "two\n");
  t.send_eof(b);
  t.kill(a, "KILL");
  run_until(t, closed({a, b}));
  EXPECT_EQ(seen[a].status, 137);
  EXPECT_EQ(seen[a].signal, "KILL");
  EXPECT_EQ(seen[b].out, "<one>\n<two>\n");
  EXPECT_EQ(seen[b].status, 0);
}

TEST_F(AgentOverLocal, EachCommandLeadsASessionOfItsOwn) {
  AgentTransport t(local, 1, agent_command(30));
  // Field 6 of /proc/PID/stat is the session id; the agent's own is its login shell's.
  ChannelId a = t.exec(0, "s=$(cut -d' ' -f6 /proc/$$/stat); [ \"$s\" = $$ ] && echo leader");
  ChannelId b = t.exec(0, "s=$(cut -d' ' -f6 /proc/$$/stat); [ \"$s\" = $$ ] && echo leader");
  run_until(t, closed({a, b}));
  EXPECT_EQ(seen[a].out, "leader\n");
  EXPECT_EQ(seen[b].out, "leader\n");
}

// The user's Perl settings neither break the agent nor are lost for the commands, and its frames
// stay bytes whatever PERL_UNICODE says.
TEST_F(AgentOverLocal, TheUsersPerlSettingsReachTheCommandsUnchanged) {
  AgentTransport t(local, 1,
                   "export PERL5OPT=-MNo::Such::Module PERL5LIB='/a b/lib' PERL_UNICODE=SDA; "
                   "unset PERLLIB; " +
                       agent_command(30));
  ChannelId a = t.exec(0, "echo \"$PERL5OPT|$PERL5LIB|${PERLLIB-unset}\"; printf '\\377\\376'");
  run_until(t, closed({a}));
  EXPECT_EQ(seen[a].out, "-MNo::Such::Module|/a b/lib|unset\n\xff\xfe");
  EXPECT_EQ(seen[a].status, 0);
  EXPECT_EQ(local.execs.size(), 1u) << "the agent itself ran the command";
}

TEST_F(AgentOverLocal, LoginRcNoiseOnStdoutDoesNotDisturbTheFrames) {
  AgentTransport t(local, 1,
                   "echo 'Welcome!'; printf 'no newline'; echo warn >&2; " + agent_command(30));
  ChannelId a = t.exec(0, "printf 'x%.0s' $(seq 1 100000)");
  run_until(t, closed({a}));
  EXPECT_EQ(seen[a].out, std::string(100000, 'x'));
  EXPECT_EQ(seen[a].status, 0);
}

TEST_F(AgentOverLocal, WithoutPerlEveryCommandGetsAChannelOfItsOwn) {
  AgentTransport t(local, 1, "echo 'msrun-ssh-agent: no perl on this host' >&2; exit 97");
  ChannelId a = t.exec(0, "echo one");
  ChannelId b = t.exec(0, "cat");
  t.write(b, "two\n");
  t.send_eof(b);
  run_until(t, closed({a, b}));
  ChannelId c = t.exec(0, "echo three; exit 4");
  run_until(t, closed({c}));
  EXPECT_EQ(local.execs.size(), 4u);
  EXPECT_EQ(t.direct_hosts(), std::vector<size_t>{0});
  EXPECT_EQ(seen[a].out, "one\n");
  EXPECT_EQ(seen[b].out, "two\n");
  EXPECT_EQ(seen[c].out, "three\n");
  EXPECT_EQ(seen[c].status, 4);
}

TEST_F(AgentOverLocal, AHostRunDirectlyGetsAChannelPerCommandAndNoAgent) {
  AgentTransport t(local, 2, agent_command(30));
  t.run_directly(1);
  ChannelId a = t.exec(1, "echo one");
  ChannelId b = t.exec(1, "echo two");
  run_until(t, closed({a, b}));
  EXPECT_EQ(local.execs, (std::vector<std::string>{"echo one", "echo two"}));
  EXPECT_EQ(seen[b].out, "two\n");
  EXPECT_EQ(t.direct_hosts(), std::vector<size_t>{1});
}

TEST(UseAgent, AutoTakesTheAgentOnEveryHostAndTheOptionDecidesOtherwise) {
  EXPECT_TRUE(use_agent(std::nullopt));
  EXPECT_TRUE(use_agent(true));
  EXPECT_FALSE(use_agent(false));
}

TEST_F(AgentOverLocal, AnAgentThatFailsToStartFailsItsCommandsWithItsReason) {
  AgentTransport t(local, 2, "echo 'bash: conda: command not found' >&2; exit 1");
  ChannelId a = t.exec(1, "echo never");
  run_until(t, closed({a}));
  EXPECT_EQ(seen[a].out, "");
  EXPECT_EQ(seen[a].failed,
            "not started: the launch agent ended (exit 1): bash: conda: command not found");
  ChannelId b = t.exec(1, "echo never");  // the host's agent is gone: no new one
  run_until(t, closed({b}));
  EXPECT_NE(seen[b].failed, "");
  EXPECT_EQ(local.execs.size(), 1u);
}

TEST_F(AgentOverLocal, AnAgentThatDiesWhileCommandsRunLosesTheHost) {
  AgentTransport t(local, 1, agent_command(30));
  ChannelId a = t.exec(0, "echo started; cat >/dev/null");  // ends when its stdin does
  run_until(t, [&] { return seen[a].out == "started\n"; });
  ::kill(local.pid_of(0), SIGKILL);  // the agent (sh exec'd perl: same pid)
  run_until(t, [&] { return !lost.empty(); });
  EXPECT_EQ(lost[0].rfind("the launch agent ended", 0), 0u) << lost[0];
  // The runner drops a lost host; without that the agent's commands report their channels closed.
  run_until(t, closed({a}));
  EXPECT_EQ(seen[a].status, -1);
}

// The agent that dies was the job's watchdog there: its channel closes first, saying why, and the
// host stays: the runner's `stop` then runs on a channel of its own to sweep it (the agent's
// commands are gone with it).
TEST_F(AgentOverLocal, AnAgentThatWasTheWatchdogDiesAndItsHostTakesChannelsOfItsOwn) {
  AgentTransport t(local, 1, agent_command(30));
  ChannelId dog = t.exec(0, watchdog_command("job-8", 10, 0.2));
  ChannelId a = t.exec(0, "echo started; cat >/dev/null");
  run_until(t, [&] {
    return seen[a].out == "started\n" && seen[dog].out.find("ready") != std::string::npos;
  });
  ::kill(local.pid_of(0), SIGKILL);
  run_until(t, closed({dog, a}));
  EXPECT_TRUE(lost.empty()) << lost[0];
  EXPECT_EQ(closings, (std::vector<ChannelId>{dog, a}));
  EXPECT_EQ(seen[dog].err.rfind("the launch agent ended", 0), 0u) << seen[dog].err;
  ChannelId stop = t.exec(0, "echo swept");
  run_until(t, closed({stop}));
  EXPECT_EQ(seen[stop].out, "swept\n");
  EXPECT_EQ(local.execs.size(), 2u) << "the agent, then `stop` on a channel of its own";
}

// SIGTERM to the agent that is the job's watchdog (a batch system ending the job step): every
// process of the job is killed at once, a grandchild in a session of its own too, and the
// watchdog says so. A SIGHUP before it changes nothing, as watchdog.sh ignores it.
TEST_F(AgentOverLocal, SigtermToTheAgentKillsTheJobAtOnceAndAHangupChangesNothing) {
  AgentTransport t(local, 1, agent_command(30));
  ChannelId dog = ready_watchdog(t, "job-9", 10, 5);
  Process p;
  p.workdir = "/";
  p.argv = {"/bin/sh", "-c", "setsid sleep 41 & echo up; exec sleep 40"};
  ChannelId a = t.exec(0, process_command(p, "job-9"));
  // Both sleeps exec'd (the shell's fork and setsid's exec come and go before).
  run_until(t, [&] { return running({"sleep", "40"}) && running({"sleep", "41"}); });
  pid_t agent = local.pid_of(0);
  ::kill(agent, SIGHUP);
  t.write(dog, std::string(1, kBeat));
  run_until(t, [&] { return seen[dog].out.find("\nh\n") != std::string::npos; });
  ::kill(agent, SIGTERM);
  run_until(t, closed({dog, a}));
  EXPECT_NE(seen[dog].out.find("msrun-ssh-watchdog: terminated\n"), std::string::npos)
      << seen[dog].out;
  EXPECT_NE(seen[dog].out.find("SIGKILL sleep 41"), std::string::npos) << seen[dog].out;
  for (int i = 0; i < 100 && !marked("job-9").empty(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_TRUE(marked("job-9").empty()) << "a process of the job survived";
  for (pid_t left : marked("job-9")) ::kill(left, SIGKILL);
}

TEST_F(AgentOverLocal, CancellingTheLastCommandWaitingForAnAgentEndsItsLoginRc) {
  AgentTransport t(local, 1, "sleep 5; " + agent_command(30));
  ChannelId a = t.exec(0, "echo never");
  t.cancel(a);
  run_until(t, closed({a}));
  EXPECT_EQ(seen[a].failed, "not started: the job is being torn down");
  ASSERT_EQ(local.kills.size(), 1u);
  EXPECT_EQ(local.kills[0].second, "KILL");
}

TEST_F(AgentOverLocal, DroppingAHostSilencesIt) {
  AgentTransport t(local, 2, agent_command(30));
  ChannelId a = t.exec(0, "cat");
  ChannelId b = t.exec(1, "echo fine");
  run_until(t, closed({b}));
  t.drop_host(0);
  for (int i = 0; i < 10; ++i) t.poll(20, [&](const TransportEvent& e) { record(e); });
  EXPECT_FALSE(seen[a].closed);
  EXPECT_TRUE(lost.empty());
  EXPECT_EQ(local.dropped, std::vector<size_t>{0});
}

TEST_F(AgentOverLocal, AnIdleAgentWhoseLauncherIsSilentEndsItself) {
  AgentTransport t(local, 1, agent_command(0.3));
  ChannelId a = t.exec(0, "sleep 0.6");  // a command running keeps it, however silent we are
  run_until(t, closed({a}));
  double ended = local.now_ms();
  run_until(t, [&] { return local.closed(0); });
  EXPECT_GE(local.now_ms() - ended, 200);
  EXPECT_EQ(seen[a].status, 0);
  EXPECT_TRUE(lost.empty()) << "nothing of its ran any more";
}

TEST_F(AgentOverLocal, AnAgentWhoseLauncherIsThereWaitsPastItsIdleLimitForItsNextCommand) {
  // Its host waits for the others (a longer sync, a slower login rc elsewhere): the launcher's
  // no-op frames keep it for the commands still to come.
  AgentTransport t(local, 1, agent_command(0.3), 0.1);
  ChannelId a = t.exec(0, "true");
  run_until(t, closed({a}));
  run_for(t, 1000);
  EXPECT_FALSE(local.closed(0));
  ChannelId b = t.exec(0, "echo next");
  run_until(t, closed({b}));
  EXPECT_EQ(seen[b].out, "next\n") << seen[b].failed;
  EXPECT_TRUE(lost.empty());
}

// unsent() of a command counts its stdin bytes until the agent has them in the command's pipe:
// a sender that keeps it small (the sync, kInFlight) keeps the agent from holding a whole stream
// for a command that reads slowly (a workdir on a slow disk).
TEST_F(AgentOverLocal, StdinTheCommandHasNotTakenCountsAsUnsent) {
  AgentTransport t(local, 1, agent_command(30));
  ChannelId c = t.exec(0, "echo up; sleep 1; exec wc -c");
  run_until(t, [&] { return seen[c].out == "up\n"; });
  const std::string chunk(64 << 10, 'x');
  for (int i = 0; i < 64; ++i) t.write(c, chunk);  // 4 MiB
  run_for(t, 300);                                 // delivered; the command is still asleep
  EXPECT_GT(t.unsent(c), size_t{3} << 20);
  run_until(t, [&] { return t.unsent(c) == 0; });  // it reads: all taken
  t.send_eof(c);
  run_until(t, closed({c}));
  EXPECT_EQ(seen[c].out, "up\n4194304\n");
}

TEST_F(AgentOverLocal, NothingStartsOnceTheJobsWatchdogHasEnded) {
  // The watchdog swept its host for the last time (it lost the launcher): a spawn that reaches
  // the agent after that (held up by a cut link) must not run, with nothing left to end it.
  AgentTransport t(local, 1, agent_command(30));
  // The watchdog lives a moment: "before" reaches the agent (right behind it) while it runs, even
  // when the agent is slow to read (a loaded machine; CI under the sanitizers).
  ChannelId dog = t.exec(0, "exec sh -c 'sleep 0.5' msrun-ssh-watchdog");
  ChannelId before = t.exec(0, "echo before");
  run_until(t, closed({dog, before}));
  ChannelId after = t.exec(0, "echo after");
  run_until(t, closed({after}));
  EXPECT_EQ(seen[before].out, "before\n");
  EXPECT_EQ(seen[after].out, "");
  EXPECT_EQ(seen[after].failed, "the job's watchdog on this host has ended: nothing starts here");
  // `stop`'s program still runs: the launcher sends it to sweep the host in the watchdog's place
  // (a watchdog killed while the job ran), and it ends by itself.
  ChannelId stop = t.exec(0, "exec sh -c 'echo swept' msrun-ssh-stop job-1 10");
  run_until(t, closed({stop}));
  EXPECT_EQ(seen[stop].out, "swept\n");
  EXPECT_EQ(seen[stop].failed, "");
}

// The watchdog's and the sampler's programs go to the agent as views of their static text, not
// as a copy per host (it would wait in every host's queue at once), and run as sent.
// A process of the job goes as a P frame: the agent starts it itself, with no shell (a host pays
// one exec per process, not four). Other commands go as S frames, run with /bin/sh -c.
TEST_F(AgentOverLocal, AProcessOfTheJobStartsWithoutAShell) {
  AgentTransport t(local, 1, agent_command(30));
  Process p;
  p.workdir = "/";
  p.env = {{"GREETING", "hello there"}};
  p.argv = {"/bin/sh", "-c", "echo \"$GREETING from $PWD\"; cat"};
  std::string command = process_command(p, "job-1");
  ChannelId a = t.exec(0, command);
  ChannelId b = t.exec(0, "echo plain");
  run_until(t, closed({a, b}));
  EXPECT_EQ(seen[a].out, "hello there from /\n");  // cat read /dev/null
  EXPECT_EQ(seen[a].status, 0) << seen[a].err;
  EXPECT_EQ(seen[b].out, "plain\n");
  auto launch = process_launch_of(command);
  ASSERT_TRUE(launch);
  EXPECT_NE(
      local.written.find(agent_frame('P', static_cast<uint32_t>(a), agent_launch_payload(*launch))),
      std::string::npos);
  EXPECT_NE(local.written.find(agent_frame('S', static_cast<uint32_t>(b), "echo plain")),
            std::string::npos);
}

TEST_F(AgentOverLocal, TheWatchdogsAndSamplersProgramsAreSentWithoutACopy) {
  AgentTransport t(local, 1, agent_command(30));
  ChannelId sampler = t.exec(0, sampler_command("no-such-job", 0.1, "0"));
  t.send_eof(sampler);
  run_until(t, closed({sampler}));
  EXPECT_EQ(seen[sampler].status, 0) << seen[sampler].err;
  auto sample = parse_sample(seen[sampler].out.substr(0, seen[sampler].out.find('\n')));
  EXPECT_TRUE(sample) << seen[sampler].out;
  ChannelId dog = t.exec(0, watchdog_command("job-14", 10, 1));
  t.send_eof(dog);  // a launcher gone: its teardown finds nothing and it ends
  run_until(t, closed({dog}));
  EXPECT_NE(seen[dog].out.find("msrun-ssh-watchdog: ready"), std::string::npos) << seen[dog].err;
  auto sent_as_view = [&](std::string_view head) {
    return std::any_of(local.stable.begin(), local.stable.end(),
                       [&](std::string_view v) { return v.data() == head.data(); });
  };
  EXPECT_TRUE(sent_as_view(sampler_program()));
  EXPECT_TRUE(sent_as_view(watchdog_stack_site()));
  // The agent is the sampler itself: an M frame with its arguments, then its program.
  std::string sampler_args = std::string("no-such-job") + '\0' + "0.1" + '\0' + "0" + '\0';
  EXPECT_NE(local.written.find(agent_frame('M', static_cast<uint32_t>(sampler),
                                           sampler_args + std::string(sampler_program()))
                                   .substr(0, 9 + sampler_args.size())),
            std::string::npos);
  // The agent is the watchdog itself: a W frame with its arguments, no program to run.
  std::string words;
  for (const auto& word : watchdog_words(watchdog_args("job-14", 10, 1))) words += word + '\0';
  std::string head =
      agent_frame('W', static_cast<uint32_t>(dog), words + std::string(watchdog_stack_site()));
  EXPECT_NE(local.written.find(head.substr(0, 9 + words.size())), std::string::npos);
}

// Under the agent the watchdog's sweep reads environments only: every process of the job is the
// agent's, marked from its exec on. A command line that merely spells the marker is no process of
// the job there (over plain SSH it may be a login shell still in its rc, and is swept).
TEST_F(AgentOverLocal, TheWatchdogUnderTheAgentSweepsByEnvironmentOnly) {
  AgentTransport t(local, 1, agent_command(30));
  Process p;
  p.workdir = "/";
  p.argv = {"sh", "-c", "echo up; exec sleep 30"};
  ChannelId marked = t.exec(0, process_command(p, "job-2"));
  ChannelId spelled = t.exec(0, "exec sh -c 'echo up; sleep 30; :' \"'MSRUN_SSH_JOB=job-2'\"");
  run_until(t, [&] { return seen[marked].out == "up\n" && seen[spelled].out == "up\n"; });
  std::string said = quit_watchdog(t, "job-2", marked);
  EXPECT_EQ(seen[marked].status, 143) << said;
  EXPECT_FALSE(seen[spelled].closed) << said;
  t.kill(spelled, "KILL");
  run_until(t, closed({spelled}));
}

// The watchdog under the agent removes the job's stack-dump directory at its end, but not one of
// that name another user made (or that others may write in): a later attempt's name (ID-2) is
// predictable, and its tree's entries could be swapped for links while it is removed. It removed
// any directory of that name.
TEST_F(AgentOverLocal, TheWatchdogUnderTheAgentLeavesAStackDirectoryThatIsNotItsOwn) {
  test::TempDir tmp;
  // A job on an agent of its own (nothing starts on an agent once its job's watchdog ended).
  auto run_job = [&] {
    AgentTransport t(local, 1, "TMPDIR=" + tmp.path() + "; export TMPDIR; " + agent_command(30));
    quit_watchdog(t, "job-4", up_process(t, "job-4", "echo up; exec sleep 30"));
  };
  std::string dir = tmp.path() + "/msrun-ssh-stacks-job-4";
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(dir.c_str(), 0777), 0);  // others may write in it
  std::ofstream(dir + "/theirs") << "x";
  run_job();
  EXPECT_TRUE(std::filesystem::exists(dir + "/theirs"));
  if (::geteuid() == 0) {  // another user's, mode 0700
    ASSERT_EQ(::chmod(dir.c_str(), 0700), 0);
    ASSERT_EQ(::chown(dir.c_str(), 65534, 65534), 0);
    run_job();
    EXPECT_TRUE(std::filesystem::exists(dir + "/theirs"));
    ASSERT_EQ(::chown(dir.c_str(), 0, 0), 0);
  }
  // Its own, made by the watchdog: removed.
  std::filesystem::remove_all(dir);
  run_job();
  EXPECT_FALSE(std::filesystem::exists(dir));
}

// Between its fork and its exec a process of the job is a copy of the agent, unmarked. The
// watchdog's sweep ends every process the agent started for the job, marked or not (here one that
// dropped its marker), and no other unmarked process.
TEST_F(AgentOverLocal, TheWatchdogUnderTheAgentSweepsTheAgentsProcessesMarkedOrNot) {
  AgentTransport t(local, 1, agent_command(30));
  Process p;
  p.workdir = "/";
  p.argv = {"/bin/sh", "-c", "echo up; exec env -u MSRUN_SSH_JOB sleep 31"};
  ChannelId unmarked = t.exec(0, process_command(p, "job-3"));
  ChannelId other = t.exec(0, "echo up; exec sleep 32");
  run_until(t, [&] { return running({"sleep", "31"}) && running({"sleep", "32"}); });
  std::string said = quit_watchdog(t, "job-3", unmarked);
  EXPECT_EQ(seen[unmarked].status, 143) << said;
  EXPECT_NE(said.find("SIGTERM sleep 31"), std::string::npos) << said;
  EXPECT_FALSE(seen[other].closed) << said;
  t.kill(other, "KILL");
  run_until(t, closed({other}));
}

// The agent is the subreaper of what its processes leave: a process of the job that left a daemon
// (setsid in the background) and ended is no child of the agent any more, but the daemon is, and
// the watchdog's sweep finds and ends it.
TEST_F(AgentOverLocal, TheWatchdogUnderTheAgentSweepsWhatAnEndedProcessLeft) {
  AgentTransport t(local, 1, agent_command(30));
  Process p;
  p.workdir = "/";
  p.argv = {"/bin/sh", "-c", "setsid sleep 34 < /dev/null > /dev/null 2>&1 & echo up"};
  ChannelId left = t.exec(0, process_command(p, "job-11"));
  run_until(t, [&] { return seen[left].closed && running({"sleep", "34"}); });
  EXPECT_EQ(seen[left].status, 0);
  std::string said = quit_watchdog(t, "job-11", left);
  EXPECT_NE(said.find("SIGTERM sleep 34"), std::string::npos) << said;
  run_until(t, [] { return !running({"sleep", "34"}); });
}

// A process of the job outside the agent's tree (started with the job's environment by something
// else: a task srun started, a daemon's child) that ignores SIGTERM: the SIGTERM ends the agent's
// own process, and with no child left the sweep still reads the host once more and SIGKILLs it.
TEST_F(AgentOverLocal, TheWatchdogUnderTheAgentKillsAProcessOfTheJobOutsideItsTree) {
  pid_t outsider = fork();
  ASSERT_GE(outsider, 0);
  if (outsider == 0) {
    setsid();
    std::signal(SIGTERM, SIG_IGN);  // ignored across the exec
    char marker[] = "MSRUN_SSH_JOB=job-21";
    char* env[] = {marker, nullptr};
    execle("/bin/sleep", "sleep", "36", static_cast<char*>(nullptr), env);
    _exit(127);
  }
  test::Child child(outsider);  // whatever ends the test, the outsider ends too
  AgentTransport t(local, 1, agent_command(30));
  ChannelId mine = up_process(t, "job-21", "echo up; exec sleep 30");
  run_until(t, [&] { return running({"sleep", "36"}); });
  std::string said = quit_watchdog(t, "job-21", mine);
  EXPECT_EQ(seen[mine].status, 143) << said;
  EXPECT_NE(said.find(fmt::format("killed {} SIGTERM sleep 36", outsider)), std::string::npos)
      << said;
  EXPECT_NE(said.find(fmt::format("killed {} SIGKILL sleep 36", outsider)), std::string::npos)
      << said;
  int status = 0;
  for (int i = 0; i < 250 && child.pid() > 0; ++i) {
    if (::waitpid(outsider, &status, WNOHANG) == outsider) child.reaped();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(child.pid(), -1) << "the outsider still runs: " << said;
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "wait status " << status;
}

// strace's path ("" when it is not installed).
std::string strace_path() {
  std::string strace = test::shell_output("command -v strace");
  if (strace.ends_with('\n')) strace.pop_back();
  return strace;
}
constexpr const char* kNoStrace =
    "SKIPPED LOUDLY: no strace on this machine (apt-get install strace)";

// The agent under strace, which skips loudly without it.
class TracedAgent : public AgentOverLocal {
 protected:
  void SetUp() override {
    if (strace_.empty()) GTEST_SKIP() << kNoStrace;
  }
  // The agent's command under strace with its `options` (`-e trace=...`; `-f` to follow the
  // agent's children too; fault injection), the trace going to the fixture's file; with an idle
  // limit of 0.5 s the agent ends once the job is over.
  std::string agent(const std::string& options) const {
    return fmt::format("exec {} -q {} -o {} /bin/sh -c {}", strace_, options, file_,
                       shell_quote(agent_command(0.5)));
  }
  // What strace wrote, once the agent has exited.
  std::string trace_at_exit(Transport& t) {
    run_until(t, [&] { return test::slurp(file_).find("+++ exited") != std::string::npos; });
    return test::slurp(file_);
  }
  std::string strace_ = strace_path();
  test::TempDir dir_;
  std::string file_ = dir_.path() + "/strace.txt";
};

// Once the agent has no child left, nothing it started lives any more (it is their subreaper):
// the watchdog's sweep at the job's end reads no process's environment, whatever runs on the host.
TEST_F(TracedAgent, TheWatchdogUnderTheAgentReadsNoProcessOnceItHasNoChild) {
  AgentTransport t(local, 1, agent("-e trace=openat"));
  Process p;
  p.workdir = "/";
  p.argv = {"/bin/sh", "-c", "echo up"};
  ChannelId ended = t.exec(0, process_command(p, "job-12"));
  run_until(t, closed({ended}));
  std::string said = quit_watchdog(t, "job-12", ended);
  EXPECT_NE(said.find("msrun-ssh-watchdog: done"), std::string::npos) << said;
  std::string opened = trace_at_exit(t);
  EXPECT_NE(opened.find("/proc/self/exe"), std::string::npos) << opened;  // it traced the agent
  EXPECT_EQ(opened.find("/environ"), std::string::npos) << opened;
}

// A command the agent has reaped whose output is still open (it left a process holding it) is
// signalled as its process group only: its pid is no longer its own, and a kill of the bare pid
// could reach whatever process the system gave that pid to since.
TEST_F(TracedAgent, AReapedCommandIsSignalledAsItsGroupOnlyNeverByItsPid) {
  AgentTransport t(local, 1, agent("-e trace=kill"));
  ChannelId ch = t.exec(0, "setsid sleep 37 & echo $!");  // no job control: setsid execs at once
  run_until(t, [&] {  // reaped, and the sleep in a session of its own (past its exec)
    return seen[ch].status == 0 && seen[ch].out.ends_with('\n') && running({"sleep", "37"});
  });
  ASSERT_FALSE(seen[ch].closed) << "the sleep holds its output";
  t.kill(ch, "TERM");
  // The sleep, in a session of its own, is not signalled: it is ended here, which closes the
  // output.
  ::kill(std::stoi(seen[ch].out), SIGKILL);
  run_until(t, closed({ch}));
  std::string text = trace_at_exit(t);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(text, m, std::regex(R"(kill\(-([0-9]+), SIGTERM\))"))) << text;
  EXPECT_EQ(text.find("kill(" + m[1].str() + ", SIGTERM"), std::string::npos) << text;
}

// An agent waiting for its job makes no turn of its own: while a process sleeps for 4 s and the
// watchdog waits for its launcher, a select of the agent's ends by its time limit (a turn, 2 s at
// most) at most three times: twice in the 4 s, once more when the test, starved on a loaded
// machine, is slow to say quit after the end. One that ended every 0.25 s cost a host 170 µs of
// CPU each (some 16 here). The agent's idle end, its last select once the job is over, is no
// turn.
TEST_F(TracedAgent, AnAgentWaitingForItsJobMakesNoTurnOfItsOwn) {
  AgentTransport t(local, 1, agent("-e trace=select,pselect6"));
  ChannelId dog = ready_watchdog(t, "job-19", 30, 0.2);
  Process p;
  p.workdir = "/";
  p.argv = {"/bin/sleep", "4"};
  ChannelId ch = t.exec(0, process_command(p, "job-19"));
  run_until(t, closed({ch}));
  EXPECT_EQ(seen[ch].status, 0);
  t.write(dog, std::string(1, kQuit));
  run_until(t, closed({dog}));
  std::string text = trace_at_exit(t);
  size_t turns = 0;
  bool last_timed_out = false;  // the last select: the idle end's, when it timed out
  for (std::string_view line : split_lines(text))
    if (line.find("select") != std::string_view::npos) {
      last_timed_out = line.find("= 0 (Timeout)") != std::string_view::npos;
      turns += last_timed_out;
    }
  EXPECT_LE(turns - (last_timed_out ? 1 : 0), 3u) << text;
}

// What strace says the agent did while it started /bin/true (its select calls, the execve calls
// of every process; `inject`: strace's fault injection, "" for none): the trace's lines, the
// agent's pid (the traced command's), and the /bin/true child's status; `text`: the whole trace.
struct ExecTrace {
  std::vector<std::string> lines;
  std::string agent, child, text;
  int status = -1;
};

class AgentExecWait : public TracedAgent {
 protected:
  // The trace of one start into `out`, with strace's options `inject` ("" for none); /bin/true
  // must have started and ended with 0.
  void trace_a_start(const std::string& job, const std::string& inject, ExecTrace& out) {
    AgentTransport t(local, 1, agent("-f -e trace=execve,select,pselect6 " + inject));
    Process p;
    p.workdir = "/";
    p.argv = {"/bin/true"};
    ChannelId ch = t.exec(0, process_command(p, job));
    run_until(t, closed({ch}));
    out.status = seen[ch].status;
    std::istringstream in(trace_at_exit(t));
    // "PID  call(...)": strace pads short pids; one blank after the pid here.
    for (std::string line; std::getline(in, line);) {
      size_t pid_end = line.find(' ');
      size_t rest = line.find_first_not_of(' ', pid_end);
      if (pid_end != std::string::npos && rest != std::string::npos)
        line = line.substr(0, pid_end + 1) + line.substr(rest);
      out.lines.push_back(line);
      out.text += line + "\n";
    }
    if (!out.lines.empty()) out.agent = out.lines[0].substr(0, out.lines[0].find(' '));
    for (const auto& line : out.lines)
      if (line.find(" execve(\"/bin/true\"") != std::string::npos)
        out.child = line.substr(0, line.find(' '));
    EXPECT_EQ(out.status, 0) << out.text;
    ASSERT_FALSE(out.child.empty()) << out.text;
  }
  // The result of the agent's wait for its child's exec (its select on one descriptor, not its
  // stdin, for 0.5 s at most), and whether it came after the child's execve had begun; "" when the
  // agent made no such wait.
  static std::pair<std::string, bool> exec_wait(const ExecTrace& tr) {
    static const std::regex wait(
        R"(select6?\(\d+, \[[1-9]\d*\], NULL, NULL, \{tv_sec=0, tv_(usec=500000|nsec=500000000)\})");
    static const std::regex resumed(R"(<\.\.\. p?select6? resumed>)");
    size_t execve = tr.lines.size();
    for (size_t i = 0; i < tr.lines.size(); ++i)
      if (tr.lines[i].starts_with(tr.child + " execve(")) execve = std::min(execve, i);
    bool waiting = false;
    for (size_t i = 0; i < tr.lines.size(); ++i) {
      const std::string& line = tr.lines[i];
      if (!line.starts_with(tr.agent + " ")) continue;
      bool entry = std::regex_search(line, wait);
      if (entry && line.find("<unfinished") != std::string::npos) {
        waiting = true;
        continue;
      }
      if (entry || (waiting && std::regex_search(line, resumed)))
        return {line.substr(line.rfind(" = ") + 3), i > execve};
    }
    return {"", false};
  }
};

// After its fork the agent waits until its child has exec'd before it goes on: until then each
// page it wrote would be copied (the child still shares them all).
TEST_F(AgentExecWait, TheAgentGoesOnOnceItsChildHasExeced) {
  ExecTrace tr;
  ASSERT_NO_FATAL_FAILURE(trace_a_start("job-15", "", tr));
  auto [result, after_execve] = exec_wait(tr);
  EXPECT_TRUE(result.starts_with("1 ")) << result << "\n" << tr.text;  // the pipe's end: readable
  EXPECT_TRUE(after_execve) << tr.text;
}

// A child stuck before its exec (here strace holds the first execve of each process for 0.9 s)
// does not stop the agent: it waits 0.5 s at most, and the process still starts and ends well.
TEST_F(AgentExecWait, AChildSlowToExecStopsTheAgentHalfASecondAtMost) {
  ExecTrace tr;
  ASSERT_NO_FATAL_FAILURE(
      trace_a_start("job-16", "-e inject=execve:delay_enter=900000:when=1", tr));
  EXPECT_TRUE(exec_wait(tr).first.starts_with("0 (Timeout)")) << tr.text;
}

// Under the agent the agent is the watchdog: a heartbeat costs the host no process (`timeout`,
// `dd`, `grep` and `sh` on its PATH here only say that they ran). After its silence limit without
// a byte it takes the launcher for lost.
class WatchdogUnderTheAgent : public AgentOverLocal {
 protected:
  void SetUp() override {
    for (const char* tool : {"timeout", "dd", "grep", "sh", "perl"}) {
      std::string path = stubs_ + "/" + tool;
      std::ofstream(path) << "#!/bin/sh\necho " << tool << " >> " << stubs_
                          << "/ran\nexec /usr/bin/" << tool << " \"$@\"\n";
      chmod(path.c_str(), 0755);
    }
  }
  std::string agent() const {
    return "PATH=" + stubs_ + ":$PATH; export PATH; " + agent_command(30);
  }
  // How many times `tool` ran.
  int ran(const std::string& tool) const {
    std::istringstream in(test::slurp(stubs_ + "/ran"));
    int n = 0;
    for (std::string line; std::getline(in, line);) n += line == tool;
    return n;
  }
  int heartbeat_reads() const { return ran("timeout") + ran("dd"); }
  test::TempDir dir_;
  std::string stubs_ = dir_.path();
};

TEST_F(WatchdogUnderTheAgent, HeartbeatsCostNoProcessAndSilenceLosesTheLauncher) {
  AgentTransport t(local, 1, agent());
  ChannelId dog = ready_watchdog(t, "job-5", 1.0, 0.2);
  for (int i = 0; i < 4; ++i) {
    t.write(dog, std::string(1, kBeat));
    run_for(t, 400);  // 1.6 s in all: longer than the limit, but never silent for it
  }
  EXPECT_EQ(std::count(seen[dog].out.begin(), seen[dog].out.end(), '\n'), 5) << seen[dog].out;
  EXPECT_EQ(heartbeat_reads(), 0);
  double silent_from = t.now_ms();
  run_until(t, closed({dog}));
  EXPECT_GE(t.now_ms() - silent_from, 900);
  EXPECT_NE(seen[dog].out.find(kWatchdogLost), std::string::npos) << seen[dog].out;
}

// The end of the silence limit is a wake-up of its own: the launcher counts as lost just after
// the limit, not at the end of whatever turn the agent was waiting out.
TEST_F(WatchdogUnderTheAgent, TheSilenceLimitEndsOnTime) {
  AgentTransport t(local, 1, agent());
  ChannelId dog = ready_watchdog(t, "job-17", 1.0, 0.2);
  t.write(dog, std::string(1, kBeat));
  run_until(t, [&] { return std::count(seen[dog].out.begin(), seen[dog].out.end(), '\n') >= 2; });
  double heard = t.now_ms();  // the heartbeat's answer is back: the agent has read it
  run_until(t, [&] { return seen[dog].out.find(kWatchdogLost) != std::string::npos; });
  EXPECT_GE(t.now_ms() - heard, 900) << seen[dog].out;
  EXPECT_LT(t.now_ms() - heard, 1700) << seen[dog].out;  // a turn is 2 s at most
  run_until(t, closed({dog}));
}

// A process whose end closes no pipe (what it started holds its output) is seen to end by its
// SIGCHLD alone, at once: the agent's turns have no clock of their own to catch it.
TEST_F(WatchdogUnderTheAgent, AnEndThatClosesNoPipeIsSeenAtOnce) {
  AgentTransport t(local, 1, agent());
  ChannelId dog = ready_watchdog(t, "job-18", 10, 0.2);
  ChannelId ch = up_process(t, "job-18", "echo up; sleep 3 & exit 5");
  double up = t.now_ms();
  run_until(t, [&] { return seen[ch].status >= 0; });
  EXPECT_EQ(seen[ch].status, 5);
  EXPECT_LT(t.now_ms() - up, 1000) << "the end was seen after a turn's wait, not by its SIGCHLD";
  EXPECT_FALSE(seen[ch].closed) << "sleep still holds the output";
  t.write(dog, std::string(1, kQuit));
  run_until(t, closed({dog, ch}));
}

// A host runs no shell (the login shell execs perl itself: agent.sh; the agent is the watchdog),
// and a teardown's sweeps run no grep, also while a process of the job is still the agent's child.
TEST_F(WatchdogUnderTheAgent, AHostRunsNoShellAndASweepNoGrep) {
  AgentTransport t(local, 1, agent());
  ChannelId dog = ready_watchdog(t, "job-7", 10, 0.2);
  ChannelId stubborn =
      up_process(t, "job-7", "trap '' TERM; echo up; while :; do sleep 0.05; done");
  EXPECT_EQ(ran("grep"), 0);
  t.write(dog, std::string(1, kQuit));
  run_until(t, closed({dog, stubborn}));
  EXPECT_EQ(seen[stubborn].status, 137) << seen[dog].out;
  EXPECT_NE(seen[dog].out.find(" SIGTERM "), std::string::npos) << seen[dog].out;
  EXPECT_NE(seen[dog].out.find(" SIGKILL "), std::string::npos) << seen[dog].out;
  EXPECT_EQ(ran("sh"), 0);
  EXPECT_EQ(ran("grep"), 0) << seen[dog].out;
}

// The sampler runs inside the agent: the host starts no perl but the agent's own, the samples
// find the job's process by its rank, and a KILL ends the sampler, not the agent.
TEST_F(WatchdogUnderTheAgent, TheSamplerRunsInsideTheAgent) {
  AgentTransport t(local, 1, agent());
  Process p;
  p.env = {{"RANK_ID", "3"}};
  p.argv = {"/bin/sh", "-c", "echo up; exec sleep 30"};
  ChannelId rank = t.exec(0, process_command(p, "job-13"));
  run_until(t, [&] { return seen[rank].out == "up\n"; });
  ChannelId sampler = t.exec(0, sampler_command("job-13", 0.1, "3"));
  run_until(
      t, [&] { return std::count(seen[sampler].out.begin(), seen[sampler].out.end(), '\n') >= 3; });
  std::istringstream lines(seen[sampler].out);
  for (std::string line; std::getline(lines, line);) {
    auto sample = parse_sample(line);
    ASSERT_TRUE(sample) << line;
    ASSERT_EQ(sample->ranks.size(), 1u) << line;
    EXPECT_EQ(sample->ranks[0].rank, "3") << line;
  }
  t.kill(sampler, "KILL");
  run_until(t, closed({sampler}));
  EXPECT_EQ(seen[sampler].status, 137) << seen[sampler].err;
  EXPECT_FALSE(seen[rank].closed);
  EXPECT_EQ(ran("perl"), 1);  // the agent's start
  t.kill(rank, "KILL");
  run_until(t, closed({rank}));
  EXPECT_EQ(seen[rank].status, 137);
}

// A sample whose tool is slow holds the agent's loop past the silence limit (here nvidia-smi takes
// 1.5 s, every 5th sample, and the limit is 1 s): the heartbeats that came meanwhile are read
// before the launcher counts as lost.
TEST_F(WatchdogUnderTheAgent, HeartbeatsThatCameWhileASampleRanAreReadBeforeTheSilenceLimit) {
  std::string tool = stubs_ + "/nvidia-smi";
  // Each slow sample holds the agent 1.5 s, past the silence limit of 1 s; the heartbeats, every
  // 0.25 s, leave a loaded machine 0.75 s of slack before a late one is a real silence.
  std::ofstream(tool) << "#!/bin/sh\nsleep 1.5\necho 7\n";
  chmod(tool.c_str(), 0755);
  AgentTransport t(local, 1, agent());
  ChannelId dog = ready_watchdog(t, "job-19", 1, 0.2);
  ChannelId sampler = t.exec(0, sampler_command("job-19", 0.1, "0"));
  for (int i = 0; i < 28; ++i) {  // 7 s, never silent for 1 s: three or four slow samples
    t.write(dog, std::string(1, kBeat));
    run_for(t, 250);
  }
  EXPECT_EQ(seen[dog].out.find(kWatchdogLost), std::string::npos) << seen[dog].out;
  EXPECT_FALSE(seen[dog].closed) << seen[dog].out;
  EXPECT_GE(std::count(seen[sampler].out.begin(), seen[sampler].out.end(), '\n'), 8)
      << seen[sampler].out;
  t.kill(sampler, "KILL");
  t.write(dog, std::string(1, kQuit));
  run_until(t, closed({dog, sampler}));
}

// A sampler whose program dies ends with status 1 and why; the agent and its commands go on.
TEST_F(WatchdogUnderTheAgent, ASamplerThatDiesEndsAloneAndSaysWhy) {
  AgentTransport t(
      local, 1, "MSRUN_SSH_SAMPLER_ROOT=/no/such/root; export MSRUN_SSH_SAMPLER_ROOT; " + agent());
  ChannelId sampler = t.exec(0, sampler_command("job-10", 0.1, "0"));
  run_until(t, closed({sampler}));
  EXPECT_EQ(seen[sampler].status, 1);
  EXPECT_EQ(seen[sampler].err, "msrun-ssh-agent: the sampler failed: no /proc\n");
  ChannelId after = t.exec(0, "echo still here");
  run_until(t, closed({after}));
  EXPECT_EQ(seen[after].out, "still here\n");
}

TEST_F(WatchdogUnderTheAgent, APausedJobWaitsForItsLauncherWithoutLimit) {
  AgentTransport t(local, 1, agent());
  ChannelId dog = ready_watchdog(t, "job-6", 0.5, 0.2);
  t.write(dog, std::string(1, kSuspend));
  run_until(t, [&] { return seen[dog].out.find(kWatchdogPaused) != std::string::npos; });
  t.write(dog, std::string(1, kBeat));  // a heartbeat sent before the launcher stopped
  run_for(t, 1500);
  EXPECT_FALSE(seen[dog].closed) << seen[dog].out;
  t.write(dog, std::string(1, kResume));
  run_until(t, [&] { return seen[dog].out.find(kWatchdogResumed) != std::string::npos; });
  run_until(t, closed({dog}));  // silent again: lost
  EXPECT_NE(seen[dog].out.find(kWatchdogLost), std::string::npos) << seen[dog].out;
  EXPECT_EQ(heartbeat_reads(), 0);
}

}  // namespace
}  // namespace msrun_ssh
