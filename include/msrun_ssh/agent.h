// The launch agent: one channel per host carries every command of a job there.
//
// Over plain SSH each command is a channel of its own, and sshd runs each through the user's
// login shell, so a host with P processes pays its login rc (conda init, module load, ...) P+1
// times. AgentTransport starts one agent per host instead (src/remote/agent.sh + agent.pl: the
// login rc once, then perl), and the agent starts the commands it is given with /bin/sh -c (a
// process of the job without a shell: agent_launch_payload), each in a session of its own as
// sshd would, and carries their stdin, output, exit status and end as frames over its channel. The
// runner does not see the difference: AgentTransport is a Transport whose channels are the agent's
// commands. The job's watchdog (watchdog_command) is the agent itself, on a channel of the agent
// like any command (W frame): a host runs no process for it, and its sweeps read /proc without a
// grep. So is the job's sampler (sampler_command, M frame): the agent compiles sampler.pl's
// program and takes its samples on its own loop, with no fork and no Perl start.
//
// A host without perl (the agent exits 97 before its hello) gets a channel per command, as
// without the agent. An agent that ends while commands of its host still run makes the host
// lost (kHostLost), unless it was the job's watchdog there: then the watchdog's channel closes
// first (with the agent's trouble on its stderr), and later commands for the host get channels of
// their own, so that the runner's `stop` sweeps the host in the watchdog's place over the same
// connection. An agent whose launcher is gone (its stdin ended) tears the job down there as its
// watchdog, then exits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "msrun_ssh/command.h"
#include "msrun_ssh/transport.h"

namespace msrun_ssh {

// What the agent writes before its first frame, on a line of its own: the bytes before it are
// whatever the login rc printed.
inline constexpr std::string_view kAgentHello = "\nmsrun-ssh-agent 1\n";
// The agent's exit status when the host has no perl.
inline constexpr int kAgentNoPerl = 97;
// A frame's payload is at most this long; a longer length means a garbled stream.
inline constexpr uint32_t kAgentMaxPayload = 1u << 24;

struct AgentFrame {
  char op = 0;
  uint32_t id = 0;
  std::string payload;
  bool operator==(const AgentFrame&) const = default;
};

// One frame: op, id and payload length (big endian, 32 bits each but the op), payload.
std::string agent_frame(char op, uint32_t id, std::string_view payload = {});

// Reads the agent's stdout as it arrives, in chunks cut anywhere: first the login rc's noise up
// to kAgentHello, then frames. Each complete frame goes to on_frame; noise (at most 64 KiB of it
// is kept) goes to on_noise once the hello is found. After a frame longer than kAgentMaxPayload
// the reader is broken() and ignores the rest.
class AgentReader {
 public:
  using FrameHandler = std::function<void(AgentFrame&&)>;
  using NoiseHandler = std::function<void(std::string_view)>;
  void feed(std::string_view data, const NoiseHandler& on_noise, const FrameHandler& on_frame);
  bool hello() const { return hello_; }
  bool broken() const { return broken_; }

 private:
  void frames(const FrameHandler& on_frame);
  std::string buf_;
  bool hello_ = false;
  bool broken_ = false;
  size_t noise_dropped_ = 0;
};

// Whether a host runs its commands through an agent: as --agent says (`option`); auto (unset) is
// every host, whatever its process count: the agent makes the host pay its login rc once, and its
// start (perl with no module loaded) costs about what the watchdog's own channel costs sshd
// (docs/benchmarks.md).
inline bool use_agent(std::optional<bool> option) { return option.value_or(true); }

// The command that starts the agent on a host: `exec sh -c AGENT_SH msrun-ssh-agent LOADER IDLE`,
// where LOADER is a one-line Perl program that reads agent_program() from stdin and runs it. The
// program (about 15 KB) goes over the channel's stdin, not in the exec request: a big request (or
// packet) grows libssh's session buffers for the session's life, about 11 KB per host more for a
// 7 KB request (bench/libssh_floor.cc with FLOOR_PAD). AgentTransport writes it to every agent
// it starts, right after the exec (a stand-in command in a test reads no stdin). With no command
// running and no byte from the launcher for `idle_s` seconds (a host cut off before its watchdog
// started: nothing else would end the agent), the agent exits.
std::string agent_command(double idle_s);
std::string_view agent_program();

// The payload of a P frame, a process the agent starts itself (command.h, ProcessLaunch): NUL
// separated, the workdir, the flags ("s": the stack-dump step, "n": stdin from /dev/null), the
// number of environment words, those words, then argv.
std::string agent_launch_payload(const ProcessLaunch& launch);

// The exit status and signal name (empty when none) of an agent's x frame ("143 TERM", "3"); false
// when the payload is not one.
bool parse_agent_exit(std::string_view payload, int& status, std::string& signal);

class AgentTransport : public Transport {
 public:
  // `inner` carries the agents (an SshPool); `hosts` is the number of hosts it knows; `command`
  // starts an agent (agent_command, or a stand-in in tests). With `keep_alive_s` > 0, every agent
  // that is up and not yet the job's watchdog gets a no-op frame (N) that often: an agent whose
  // host waits for the others (a longer sync, a slower login rc elsewhere) is not idle to its
  // idle limit, which is for a launcher cut off from it.
  AgentTransport(Transport& inner, size_t hosts, std::string command, double keep_alive_s = 0);

  ChannelId exec(size_t host, const std::string& command) override;
  void write(ChannelId channel, std::string_view data) override;
  void send_eof(ChannelId channel) override;
  size_t unsent(ChannelId channel) const override;
  void cancel(ChannelId channel) override;
  void kill(ChannelId channel, const char* signal) override;
  void no_more_channels() override;
  void watch_fd(int fd) override { inner_.watch_fd(fd); }
  void unwatch_fd(int fd) override { inner_.unwatch_fd(fd); }
  void drop_host(size_t host) override;
  Liveness tcp_liveness(size_t host, double within_ms) const override {
    return inner_.tcp_liveness(host, within_ms);
  }
  std::optional<ServerAlive> server_alive(size_t host) const override {
    return inner_.server_alive(host);
  }
  std::optional<double> tcp_ack_age_ms(size_t host) const override {
    return inner_.tcp_ack_age_ms(host);
  }
  void poll(int timeout_ms, const EventHandler& handler) override;
  double now_ms() const override { return inner_.now_ms(); }

  // From now on, commands for `host` get channels of their own (no agent there). Before its first
  // exec().
  void run_directly(size_t host) {
    if (hosts_[host].mode == Mode::kIdle) hosts_[host].mode = Mode::kDirect;
  }
  // Hosts whose commands run on channels of their own (run_directly, or no perl there).
  std::vector<size_t> direct_hosts() const;

 private:
  enum class Mode { kIdle, kStarting, kReady, kDirect, kGone };
  enum class State { kQueued, kAgent, kDirect, kDone };
  struct Host {
    Mode mode = Mode::kIdle;
    ChannelId agent = -1;
    ChannelId watchdog = -1;  // the job's watchdog: the agent itself (W frame)
    AgentReader reader;
    std::vector<ChannelId> queued;  // (a deque takes 0.6 KB per host even when empty)
    std::string last_stderr;
    int exit_status = -1;
    size_t open = 0;
    bool dropped = false;
    bool eof_sent = false;
  };
  struct Chan {
    size_t host = 0;
    std::shared_ptr<const std::string> command;  // until sent
    State state = State::kQueued;
    ChannelId real = -1;
    std::string stdin_buf;
    uint64_t untaken = 0;  // stdin bytes sent to the agent and not yet said taken (a frames)
    bool eof = false;
  };
  struct Pending {
    TransportEvent event;
    std::string data;
  };

  void on_inner(const TransportEvent& e, const EventHandler& handler);
  void on_agent(size_t host, const TransportEvent& e, const EventHandler& handler);
  void on_frame(size_t host, AgentFrame&& f, const EventHandler& handler);
  void release_queued(size_t host, Mode mode);
  void agent_ended(size_t host, const EventHandler& handler);
  void send_to_agent(size_t host, ChannelId id, Chan& c);
  void finish(ChannelId id);
  void maybe_end(size_t host);
  void unqueue(ChannelId id, const std::string& why);
  std::string agent_trouble(const Host& h) const;
  void keep_alive(int& timeout_ms);

  Transport& inner_;
  std::string command_;
  std::shared_ptr<const std::string> last_command_;  // exec(): shared by equal commands
  std::vector<Host> hosts_;
  std::vector<Chan> chans_;                   // a channel's id is its index
  std::map<ChannelId, size_t> agent_host_;    // agent channel -> host
  std::map<ChannelId, ChannelId> direct_of_;  // real channel -> ours, for direct hosts
  std::deque<Pending> pending_;
  bool no_more_ = false;
  double keep_alive_ms_ = 0;       // 0: none
  double next_keep_alive_ms_ = 0;  // inner_.now_ms() of the next round of N frames
};

}  // namespace msrun_ssh
