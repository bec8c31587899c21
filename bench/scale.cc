// The launcher at 1,000 to 10,000 hosts without SSH: the real command line, host file, planner,
// runner (its event loop, heartbeats, start, fail-fast and teardown logic) and output (the console
// and one log per rank) over a simulated transport whose hosts answer at once, so what is measured
// is the launcher's own cost per host. Each size runs in a child process of its own (its peak RSS
// is its own) and every repetition runs each size once, in rotated order.
//
// A simulated host plays the watchdog protocol of command.h (the ready line, an echo per heartbeat,
// the sweep on 'q' / 'k' / 'K', the done line) and its processes print --lines lines over --run_s
// seconds, then exit 0; kill() ends a process with 128+N. Nothing leaves the machine: the host
// file's addresses (198.18.0.0/15) are never connected to.
//
//   cmake --build build --target scale        # not part of `all`
//   build/bench/scale [--hosts 1000,4000,10000] [--ppn 8] [--reps 3] [--lines 10] [--run_s 2]
//                     [--json FILE] [--dir /dev/shm]
//
// Per size (medians over the repetitions): launcher CPU per host (user + system of the child,
// which includes the simulated hosts' small share), peak RSS and RSS per host, the time from
// Runner::run() to the last process's exec (start-to-all-running), the whole run, and the exit
// status (0 expected).
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <queue>
#include <stdexcept>
#include <string>
#include <vector>

#include "msrun_ssh/cli.h"
#include "msrun_ssh/command.h"
#include "msrun_ssh/hostfile.h"
#include "msrun_ssh/output.h"
#include "msrun_ssh/plan.h"
#include "msrun_ssh/runner.h"
#include "msrun_ssh/transport.h"

namespace {

namespace ms = msrun_ssh;
namespace fs = std::filesystem;

struct Settings {
  std::vector<int> hosts{1000, 4000, 10000};
  int ppn = 8;
  int reps = 3;
  int lines = 10;
  double run_s = 2;
  std::string json;
  // Where each run's host file and logs go. /dev/shm by default: on a disk, creating 80,000 log
  // files right after the last run deleted as many measures the file system (ext4 scans recently
  // deleted inodes on each creation), not the launcher.
  std::string dir = "/dev/shm";
};

double wall_ms() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

// Hosts that answer at once. Every command is a channel; events wait in a queue ordered by due
// time and are handed over by poll(), which sleeps (really) until the next one is due.
class SimTransport : public ms::Transport {
 public:
  SimTransport(size_t hosts, int lines, double run_s)
      : hosts_(hosts), lines_(lines), run_ms_(run_s * 1000) {}

  ms::ChannelId exec(size_t host, const std::string& command) override {
    auto id = static_cast<ms::ChannelId>(chans_.size());
    Chan c;
    c.host = host;
    c.watchdog = ms::watchdog_args_of(command).has_value();
    c.running = true;
    chans_.push_back(c);
    if (c.watchdog) {
      hosts_[host].watchdog = id;
      emit(id, 0, std::string(ms::watchdog_ready_line(4242, "")) + "\n");
    } else {
      hosts_[host].processes.push_back(id);
      last_process_exec_ms = wall_ms();
      ++process_execs;
      // One event at a time per process: its next line, then its exit.
      later(id, run_ms_ / (lines_ + 1), Ev::kLine, 0);
    }
    return id;
  }

  void write(ms::ChannelId id, std::string_view data) override {
    Chan& c = chans_.at(static_cast<size_t>(id));
    if (!c.watchdog || !c.running) return;
    for (char b : data) {
      if (b == ms::kBeat) {
        emit(id, 0, "h\n");
      } else if (b == ms::kQuit || b == ms::kTeardown || b == ms::kKillNow) {
        for (ms::ChannelId p : hosts_[c.host].processes) end(p, b == ms::kKillNow ? 137 : 143);
        emit(id, 0, std::string(ms::kWatchdogDone) + "\n");
        later(id, 0, Ev::kExit, 0);
        return;
      }
    }
  }
  void send_eof(ms::ChannelId) override {}
  void cancel(ms::ChannelId) override {}
  void kill(ms::ChannelId id, const char* signal) override {
    end(id, 128 + ms::signal_number(signal));
  }
  void no_more_channels() override {}
  void watch_fd(int) override {}
  void unwatch_fd(int) override {}
  void drop_host(size_t) override {}

  void poll(int timeout_ms, const ms::EventHandler& handler) override {
    double now = wall_ms();
    if (queue_.empty() || queue_.top().due > now) {
      double until = now + timeout_ms;
      if (!queue_.empty()) until = std::min(until, queue_.top().due);
      if (until > now) {
        auto ns = static_cast<long>((until - now) * 1e6);
        timespec ts{ns / 1000000000L, ns % 1000000000L};
        nanosleep(&ts, nullptr);
      }
      now = wall_ms();
    }
    while (!queue_.empty() && queue_.top().due <= now) {
      Ev e = queue_.top();
      queue_.pop();
      Chan& c = chans_[static_cast<size_t>(e.channel)];
      ms::TransportEvent t;
      t.channel = e.channel;
      t.host = c.host;
      if (e.kind == Ev::kData || e.kind == Ev::kLine) {
        if (c.closed) continue;
        t.kind = ms::TransportEvent::Kind::kData;
        t.data = e.kind == Ev::kData ? std::string_view(texts_[e.text]) : step_line(c.lines);
        if (e.kind == Ev::kLine && ++c.lines < lines_)
          later(e.channel, run_ms_ / (lines_ + 1), Ev::kLine, 0);
        else if (e.kind == Ev::kLine)
          later(e.channel, run_ms_ / (lines_ + 1), Ev::kExit, 0);
        handler(t);
      } else if (e.kind == Ev::kExit) {
        if (c.closed) continue;
        c.running = false;
        c.closed = true;
        t.kind = ms::TransportEvent::Kind::kExit;
        t.status = e.status;
        if (e.status > 128) t.signal = e.status == 137 ? "KILL" : "TERM";
        handler(t);
        t.kind = ms::TransportEvent::Kind::kClosed;
        t.status = 0;
        t.signal.clear();
        handler(t);
      }
    }
  }

  double now_ms() const override { return wall_ms(); }

  double last_process_exec_ms = 0;
  size_t process_execs = 0;

 private:
  struct Chan {
    size_t host = 0;
    int lines = 0;  // printed so far
    bool watchdog = false;
    bool running = false;
    bool closed = false;
  };

  // A process's line `i`: the same text in every process, as a training log's lines are alike.
  std::string_view step_line(int i) {
    if (steps_.empty())
      for (int k = 0; k < lines_; ++k)
        steps_.push_back(
            fmt::format("step {} loss 0.{:04d} lr 1e-4 throughput 1234.5 samples/s\n", k, k * 37));
    return steps_[static_cast<size_t>(i)];
  }
  struct Host {
    ms::ChannelId watchdog = -1;
    std::vector<ms::ChannelId> processes;
  };
  struct Ev {
    enum Kind { kData, kLine, kExit } kind = kData;
    double due = 0;
    uint64_t seq = 0;
    ms::ChannelId channel = -1;
    size_t text = 0;
    int status = 0;
    bool operator>(const Ev& o) const { return due != o.due ? due > o.due : seq > o.seq; }
  };

  // The texts are interned: a few distinct lines, each kept once.
  size_t intern(std::string text) {
    auto [it, added] = text_ids_.try_emplace(text, texts_.size());
    if (added) texts_.push_back(std::move(text));
    return it->second;
  }
  void emit(ms::ChannelId id, double after_ms, std::string text) {
    Ev e;
    e.kind = Ev::kData;
    e.due = wall_ms() + after_ms;
    e.seq = seq_++;
    e.channel = id;
    e.text = intern(std::move(text));
    queue_.push(e);
  }
  void later(ms::ChannelId id, double after_ms, Ev::Kind kind, int status) {
    Ev e;
    e.kind = kind;
    e.due = wall_ms() + after_ms;
    e.seq = seq_++;
    e.channel = id;
    e.status = status;
    queue_.push(e);
  }
  void end(ms::ChannelId id, int status) {
    Chan& c = chans_.at(static_cast<size_t>(id));
    if (!c.running) return;
    c.running = false;
    later(id, 0, Ev::kExit, status);
  }

  std::vector<Host> hosts_;
  int lines_;
  double run_ms_;
  std::vector<Chan> chans_;
  std::priority_queue<Ev, std::vector<Ev>, std::greater<>> queue_;
  uint64_t seq_ = 0;
  std::vector<std::string> texts_;
  std::map<std::string, size_t> text_ids_;
  std::vector<std::string> steps_;
};

struct Result {
  int hosts = 0;
  int status = -1;
  double cpu_s = 0;
  double maxrss_kb = 0;
  double all_running_s = 0;
  double total_s = 0;
};

// One run of `hosts` hosts in this process (the child): prints its result as one line.
int run_child(const Settings& s, int hosts, const std::string& dir) {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  std::string hostfile = dir + "/hosts.toml";
  {
    std::string text =
        fmt::format("[defaults]\nworkdir = \"/tmp\"\nlocal_worker_num = {}\n", s.ppn);
    for (int h = 0; h < hosts; ++h)
      text += fmt::format("[[hosts]]\naddress = \"198.{}.{}.{}\"\n", 18 + h / 65536, h / 256 % 256,
                          h % 256);
    FILE* f = std::fopen(hostfile.c_str(), "w");
    if (!f) throw std::runtime_error("cannot write " + hostfile);
    std::fputs(text.c_str(), f);
    std::fclose(f);
  }
  double started = wall_ms();
  ms::CliResult cli = ms::parse_args({"--hostfile", hostfile, "--log_dir", dir + "/logs",
                                      "--worker_num", std::to_string(hosts * s.ppn), "train.py"},
                                     [](const char* n) { return std::getenv(n); });
  ms::Options& options = cli.options;
  ms::Cluster cluster = ms::load_hostfile(options.hostfile);
  ms::Plan plan = ms::make_plan(options, cluster, [](const std::string& a) { return a; });
  SimTransport sim(plan.hosts.size(), s.lines, s.run_s);
  ms::OutputConfig oc;
  oc.log_dir = options.log_dir;
  int null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  oc.console_out = null;
  oc.console_err = null;
  ms::Output::make_log_dir(oc.log_dir);
  ms::Output out(oc);
  ms::Runner runner(plan, options, sim, out, -1, -1);
  double run_start = wall_ms();
  int status = runner.run();
  double end = wall_ms();
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  double cpu = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
               static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
  std::printf("RESULT %d %d %.4f %ld %.4f %.4f %zu\n", hosts, status, cpu, ru.ru_maxrss,
              (sim.last_process_exec_ms - run_start) / 1000, (end - started) / 1000,
              sim.process_execs);
  return 0;
}

Result run_size(const Settings& s, int hosts) {
  std::string tmpl = s.dir + "/msrun-ssh-scale-XXXXXX";
  if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed in " + s.dir);
  std::string dir = tmpl;
  int pipefd[2];
  if (pipe(pipefd) != 0) throw std::runtime_error("pipe failed");
  pid_t pid = fork();
  if (pid == 0) {
    ::close(pipefd[0]);
    dup2(pipefd[1], 1);
    int rc = 1;
    try {
      rc = run_child(s, hosts, dir);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "scale: %d hosts: %s\n", hosts, e.what());
    }
    std::fflush(stdout);
    _exit(rc);
  }
  ::close(pipefd[1]);
  std::string text;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(pipefd[0], buf, sizeof buf)) > 0) text.append(buf, static_cast<size_t>(n));
  ::close(pipefd[0]);
  int ws = 0;
  waitpid(pid, &ws, 0);
  fs::remove_all(dir);
  Result r;
  r.hosts = hosts;
  size_t at = text.find("RESULT ");
  long rss = 0;
  size_t execs = 0;
  if (at == std::string::npos ||
      std::sscanf(text.c_str() + at, "RESULT %d %d %lf %ld %lf %lf %zu", &r.hosts, &r.status,
                  &r.cpu_s, &rss, &r.all_running_s, &r.total_s, &execs) != 7)
    throw std::runtime_error(fmt::format("{} hosts: no result (child status {})", hosts, ws));
  r.maxrss_kb = static_cast<double>(rss);
  // The workers and the scheduler (msrun's contract: on the master, beside its workers).
  if (execs != static_cast<size_t>(hosts) * static_cast<size_t>(s.ppn) + 1)
    throw std::runtime_error(fmt::format("{} hosts: {} processes started", hosts, execs));
  return r;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty()      ? 0
         : v.size() % 2 ? v[v.size() / 2]
                        : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

std::vector<int> int_list(const std::string& s) {
  std::vector<int> v;
  size_t start = 0;
  while (start <= s.size()) {
    size_t comma = s.find(',', start);
    if (comma == std::string::npos) comma = s.size();
    v.push_back(std::stoi(s.substr(start, comma - start)));
    start = comma + 1;
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  Settings s;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--hosts")
      s.hosts = int_list(v);
    else if (k == "--ppn")
      s.ppn = std::stoi(v);
    else if (k == "--reps")
      s.reps = std::stoi(v);
    else if (k == "--lines")
      s.lines = std::stoi(v);
    else if (k == "--run_s")
      s.run_s = std::stod(v);
    else if (k == "--json")
      s.json = v;
    else if (k == "--dir")
      s.dir = v;
    else {
      std::fprintf(stderr, "scale: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  if (argc % 2 == 0) {
    std::fprintf(stderr, "scale: every option takes a value\n");
    return 2;
  }
  std::map<int, std::vector<Result>> runs;
  try {
    for (int rep = 0; rep < s.reps; ++rep)
      for (size_t k = 0; k < s.hosts.size(); ++k) {
        int hosts = s.hosts[(k + static_cast<size_t>(rep)) % s.hosts.size()];
        Result r = run_size(s, hosts);
        std::fprintf(stderr,
                     "rep %d: %d hosts: status %d, cpu %.2f s, rss %.1f MB, all running %.2f s\n",
                     rep, hosts, r.status, r.cpu_s, r.maxrss_kb / 1024, r.all_running_s);
        runs[hosts].push_back(r);
      }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "scale: %s\n", e.what());
    return 1;
  }
  std::printf(
      "| hosts × %d | launcher CPU, ms/host | peak RSS, MB | RSS, KB/host | start to all running, "
      "s "
      "| whole run, s | exit |\n|---|---|---|---|---|---|---|\n",
      s.ppn);
  std::string json = "[";
  for (int hosts : s.hosts) {
    std::vector<double> cpu, rss, running, total;
    int status = 0;
    for (const Result& r : runs[hosts]) {
      cpu.push_back(r.cpu_s * 1000 / hosts);
      rss.push_back(r.maxrss_kb);
      running.push_back(r.all_running_s);
      total.push_back(r.total_s);
      status = std::max(status, r.status);
    }
    std::printf("| %d | %.2f | %.1f | %.1f | %.2f | %.2f | %d |\n", hosts, median(cpu),
                median(rss) / 1024, median(rss) / hosts, median(running), median(total), status);
    json += fmt::format(
        "{}{{\"hosts\": {}, \"ppn\": {}, \"cpu_ms_per_host\": {:.3f}, \"maxrss_kb\": {:.0f}, "
        "\"all_running_s\": {:.3f}, \"total_s\": {:.3f}, \"status\": {}}}",
        json.size() > 1 ? ", " : "", hosts, s.ppn, median(cpu), median(rss), median(running),
        median(total), status);
  }
  json += "]\n";
  if (!s.json.empty()) {
    FILE* f = std::fopen(s.json.c_str(), "w");
    if (f) {
      std::fputs(json.c_str(), f);
      std::fclose(f);
    }
  }
  return 0;
}
