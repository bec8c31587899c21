// The job's life cycle (SPEC §7) once every host is connected: start the watchdogs, start every
// process, relay output, and end the job the same way whatever happens — first failure, signal to
// the launcher, lost host — with a teardown on every host. Talks to hosts only through Transport,
// so tests drive it with a fake.
#pragma once

#include <string>
#include <vector>

#include "msrun_ssh/options.h"
#include "msrun_ssh/output.h"
#include "msrun_ssh/plan.h"
#include "msrun_ssh/transport.h"

namespace msrun_ssh {

class Runner {
 public:
  // `signal_fd`: a signalfd for SIGINT/SIGTERM/SIGHUP (or -1); `stdin_fd`: the launcher's stdin,
  // forwarded to the ranks of --tail_worker_log when it names some (or -1).
  Runner(const Plan& plan, const Options& options, Transport& transport, Output& output,
         int signal_fd = -1, int stdin_fd = -1);

  // Runs the attached job to its end; returns the exit status of SPEC §2.
  int run();

  // Reacts as if the launcher had received `signo` (what the signalfd delivers).
  void on_signal(int signo);

  // The host's own name as its watchdog reported it ("" before that).
  const std::string& reported_name(size_t host) const { return hosts_[host].name; }

  // One row per process, in plan order; valid after run().
  std::vector<SummaryRow> summary() const;

 private:
  struct Proc {
    size_t host = 0;
    const Process* spec = nullptr;
    ChannelId channel = -1;
    int out = -1;
    bool done = false;
    bool exited = false;
    int status = 0;
    std::string signal;
    double start_ms = 0;
    double end_ms = 0;
    std::string note;  // how it ended when not by itself
  };
  struct HostState {
    ChannelId watchdog = -1;
    bool ready = false;
    bool lost = false;
    bool watchdog_closed = false;
    double last_echo_ms = 0;
    std::string name;  // the host's own name (uname -n), from the watchdog's ready line
    LineFramer framer{4096};
  };

  bool start_watchdogs();
  void start_processes();
  void handle(const TransportEvent& e);
  void handle_watchdog(size_t host, const TransportEvent& e);
  void watchdog_line(size_t host, std::string_view line);
  void handle_process(size_t index, const TransportEvent& e);
  void finish_process(Proc& p, const std::string& note);
  void read_stdin();
  void read_signals();
  void beat();
  void check_heartbeats(double now);
  void lose_host(size_t host, const std::string& why);
  void fail(int status, const std::string& why);
  void teardown(char how);
  void kill_channels(bool watchdogs_too);
  void give_up();
  void send_all(char byte);
  bool processes_done() const;
  bool processes_ended() const;
  bool watchdogs_done() const;
  int timeout_ms(double now) const;
  const std::string& host_name(size_t host) const;

  const Plan& plan_;
  const Options& options_;
  Transport& t_;
  Output& out_;
  int signal_fd_;
  int stdin_fd_;
  std::vector<Proc> procs_;
  std::vector<HostState> hosts_;
  std::vector<int> proc_of_channel_;   // channel id -> proc index (-1: none)
  std::vector<int> host_of_watchdog_;  // channel id -> host index (-1: none)
  std::vector<ChannelId> stdin_targets_;
  int exit_code_ = -1;  // set once, by the first failure / signal / lost host
  bool tearing_down_ = false;
  bool killed_now_ = false;
  bool channels_killed_ = false;  // the open process channels got an SSH "signal" KILL
  bool quit_sent_ = false;
  double deadline_ms_ = 0;  // when waiting for the hosts stops (during a teardown / the end)
  double next_beat_ms_ = 0;
  double heartbeat_ms_;
};

// The attached or detached run of a whole job, on SSH: connects, starts, waits. Returns the exit
// status of SPEC §2. Defined with the SSH pool; declared for main().
int run_job(const Options& options, Plan& plan);

}  // namespace msrun_ssh
