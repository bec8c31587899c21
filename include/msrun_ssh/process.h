// Transports whose channels are child processes of the launcher: each exec() forks and execs a
// program with pipes for its stdin, stdout and stderr, in a session (and process group) of its
// own, as sshd starts a command. ProcessTransport runs `/bin/sh -c COMMAND` on this machine (its
// "hosts" are all this machine: the tests of what runs on a host use it); SrunTransport runs each
// command as a Slurm job step on its host (`--transport srun`, docs/slurm.md).
//
// The events are the SSH pool's: data per stream as it comes, kExit with the exit status (128+N
// and the signal's name after signal N), then kClosed once the command has exited and both its
// stdout and stderr have ended.
#pragma once

#include <poll.h>
#include <sys/types.h>

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "msrun_ssh/hostfile.h"
#include "msrun_ssh/ssh.h"
#include "msrun_ssh/transport.h"

namespace msrun_ssh {

struct ProcessSettings {
  // When not empty, a command counts as started on its host only once its stdout begins with
  // this (which is removed): until then its stderr is held back, and a child that ends without it
  // never started (kOpenFailed, with the last line it printed on stderr). For a wrapper such as
  // srun, whose own failure to start the command looks like any exit status.
  std::string start_marker;
  // The child keeps the reading ends of its own stdout and stderr open (as descriptors it
  // inherits, never reads): when the launcher dies, the child's writes fill the pipe instead of
  // failing (srun would end its step on the SIGPIPE, before the watchdog's teardown).
  bool child_keeps_output_open = false;
};

class ProcessTransport : public HostTransport {
 public:
  explicit ProcessTransport(ProcessSettings settings = {});
  // Ends every child still running (kill "KILL", then SIGKILL) and reaps it.
  ~ProcessTransport() override;
  ProcessTransport(const ProcessTransport&) = delete;
  ProcessTransport& operator=(const ProcessTransport&) = delete;

  // Every host is this machine: always connected, nothing to warn about.
  std::vector<std::optional<ConnectFailure>> connect_all(
      const std::vector<int>& connections) override;
  const std::vector<ConnectWarning>& warnings() const override { return warnings_; }
  // Closes every stdin and kills every child still running (kill "KILL", again after 2 s, then
  // waits for it), reporting nothing more.
  void disconnect_all() override;

  // Starts the child at once; a fork or pipe failure reports kOpenFailed.
  ChannelId exec(size_t host, const std::string& command) override;
  void write(ChannelId channel, std::string_view data) override;
  void send_eof(ChannelId channel) override;
  size_t unsent(ChannelId channel) const override;
  // A child that has not shown its start marker yet is killed (its command never starts, it
  // reports kOpenFailed); without a start marker every command has started: nothing to do.
  void cancel(ChannelId channel) override;
  // Delivers `signal` to the command (deliver()); each further kill of the channel is counted.
  void kill(ChannelId channel, const char* signal) override;
  void no_more_channels() override {}
  void watch_fd(int fd) override { watched_.insert(fd); }
  void unwatch_fd(int fd) override { watched_.erase(fd); }
  // Kills the host's children (kill "KILL") and reports nothing more of them.
  void drop_host(size_t host) override;
  void poll(int timeout_ms, const EventHandler& handler) override;
  double now_ms() const override;

  // The channel's command has exited and its output has ended (or it never started).
  bool closed(ChannelId channel) const;
  // The pid of the channel's child (-1 when it could not be started).
  pid_t pid_of(ChannelId channel) const;

 protected:
  // The program and its arguments that run `command` on `host` (execvp: a name without a slash is
  // looked up on PATH). Default: /bin/sh -c COMMAND.
  virtual std::vector<std::string> argv(size_t host, const std::string& command) const;
  // Delivers signal `signal` ("KILL", "TERM": TransportEvent::signal's names) to the child `pid`
  // for the `nth` time on this channel (1, 2, ...). Default: to its process group (and to the
  // child itself, in case it has not called setsid yet).
  virtual void deliver(pid_t pid, const char* signal, int nth);
  // The exit status and signal name of a child that ended with wait status `raw`. Default: its
  // exit code, or 128+N and N's name after signal N.
  virtual void describe_exit(int raw, int& status, std::string& signal) const;

 private:
  struct Chan;
  enum class Polled;
  Chan* find(ChannelId channel);
  const Chan* find(ChannelId channel) const;
  void spawn(Chan& c, const std::vector<std::string>& args);
  void flush(Chan& c);
  void read_one(ChannelId id, Chan& c, bool is_err, const EventHandler& handler);
  void on_stdout(ChannelId id, Chan& c, std::string_view data, const EventHandler& handler);
  void collect(std::vector<pollfd>& fds, std::vector<std::pair<ChannelId, Polled>>& whose,
               bool& unnoticed_end) const;
  void reap(const EventHandler& handler);
  void settle(ChannelId id, Chan& c, const EventHandler& handler);
  void close_fds(Chan& c);

  ProcessSettings settings_;
  std::vector<ConnectWarning> warnings_;
  std::map<ChannelId, std::unique_ptr<Chan>> chans_;
  std::set<int> watched_;
  ChannelId next_ = 0;
};

// How srun starts a command on a host: the node name each host is for srun (the host's address:
// with --hostfile slurm, a node name of SLURM_JOB_NODELIST), the program ("srun", looked up on
// PATH), and phase one's bounds.
struct SrunSettings {
  std::vector<std::string> nodes;
  std::string program = "srun";
  double connect_timeout_s = 10;
  // As SshSettings::on_connect_progress.
  std::function<void(size_t host, bool ok)> on_connect_progress;
};

// What the srun transport writes first on a command's stdout (ProcessSettings::start_marker).
inline constexpr std::string_view kSrunStarted = "msrun-ssh-srun: started\n";

// The argv that runs `command` as a job step of one task on node `node`:
//   srun --nodes=1 --ntasks=1 --ntasks-per-node=1 --nodelist=NODE --overlap --cpu-bind=none
//        --kill-on-bad-exit=1 --unbuffered --quiet /bin/sh -c 'printf ...started\n' + COMMAND
std::vector<std::string> srun_argv(const std::string& program, const std::string& node,
                                   const std::string& command);

// The kind of a srun failure from what srun said (its last stderr line): a node that is not part
// of the allocation or is down is unreachable; srun that cannot run, anything else, is kOther.
ConnectError classify_srun_error(std::string_view message);

// Why `--transport srun` cannot work in this environment ("" when it can): no allocation
// (SLURM_JOB_ID unset) or no srun on PATH.
std::string srun_unavailable(const GetEnv& getenv);

// Inside a Slurm allocation, every command of a host is a job step on it: no SSH. A host is
// connected when a first step (`true`) ran there within the connect timeout. kill("KILL") sends
// srun SIGTERM, which makes srun SIGKILL every process of its step (and wait for their end);
// a second kill of the same channel SIGKILLs srun itself, whose shepherd then asks slurmctld to
// SIGKILL the step. Any other signal goes to srun, which forwards it (SIGTERM, SIGHUP and SIGQUIT
// become a SIGKILL of the step). An exit status above 128 names the signal 128+N stands for
// (srun reports a task killed by signal N as 128+N).
class SrunTransport : public ProcessTransport {
 public:
  explicit SrunTransport(SrunSettings settings);
  // Ends its steps as disconnect_all does (srun's way, not ProcessTransport's).
  ~SrunTransport() override;

  // Runs `true` as a step on every host at once, bounded by connect_timeout_s; the connection
  // counts are not used (steps need no connections).
  std::vector<std::optional<ConnectFailure>> connect_all(
      const std::vector<int>& connections) override;

 protected:
  std::vector<std::string> argv(size_t host, const std::string& command) const override;
  void deliver(pid_t pid, const char* signal, int nth) override;
  void describe_exit(int raw, int& status, std::string& signal) const override;

 private:
  SrunSettings srun_;
};

}  // namespace msrun_ssh
