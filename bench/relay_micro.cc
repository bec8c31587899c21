// The relay benchmark's output side without a cluster: the real Output (framing, per-rank logs, the
// console, --output gather, --timestamps) fed the relay suite's input (bench/bench.py, relay: a
// scheduler that prints nothing and 4 ranks that each print the same 100-byte lines), in the
// 64 KiB chunks the launch agent reads (src/remote/agent.pl, CHUNK), one chunk per rank per turn
// of the event loop, then flush() as the runner's loop does. The console goes to /dev/null (as in
// the relay), the logs to a temporary directory. The clock is a fake one that advances by
// --us_per_chunk per chunk (default: 64 KiB at the relay's 188 MB/s), so what the gatherer holds
// does not depend on the machine's speed. Every repetition runs each mode once, in rotated order
// (paired); the table gives the median per mode of the thread's CPU time per line and the median
// of the paired differences against plain.
//
//   cmake -S . -B build-rel -DCMAKE_BUILD_TYPE=RelWithDebInfo
//   cmake --build build-rel --target relay_micro      # not part of `all`
//   build-rel/bench/relay_micro [--reps 9] [--lines 200000] [--modes plain,gather,timestamps]
//                               [--us_per_chunk 350] [--no_logs] [--distinct]
// --distinct: line i of every rank reads "step i xxx...", so lines are identical across ranks but
// not from one line to the next (the relay's lines are all the same).
// Two builds before and after a change: bench/relay_micro_ab.sh.
#include <fcntl.h>
#include <fmt/format.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "msrun_ssh/output.h"

namespace {

namespace ms = msrun_ssh;

constexpr size_t kChunk = 65536;
constexpr int kRanks = 4;

struct Settings {
  int reps = 9;
  size_t lines = 200000;  // per rank
  std::vector<std::string> modes{"plain", "gather", "timestamps"};
  double us_per_chunk = 65536 / 188.4;
  bool logs = true;
  bool distinct = false;  // line i says "step i": identical across ranks, new from line to line
};

double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// One run of one mode: the seconds of CPU the output side took for every line of every rank.
double run_once(const Settings& s, const std::string& mode, const std::string& data,
                const std::string& log_dir) {
  ms::OutputConfig config;
  config.log_dir = log_dir;
  config.console_out = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  config.console_err = config.console_out;
  config.gather = mode == "gather" || mode == "gather+timestamps";
  config.timestamps = mode == "timestamps" || mode == "gather+timestamps";
  auto now = std::chrono::system_clock::time_point(std::chrono::hours(24 * 365 * 56));
  config.clock = [&now] { return now; };
  const auto step = std::chrono::duration_cast<std::chrono::system_clock::duration>(
      std::chrono::duration<double, std::micro>(s.us_per_chunk));
  double start = thread_cpu_s();
  {
    ms::Output out(config);
    out.add_process("sched@node0", s.logs ? "scheduler.log" : "", true, -1, "node0");
    std::vector<int> procs;
    for (int r = 0; r < kRanks; ++r) {
      std::string host = fmt::format("node{}", r);
      procs.push_back(out.add_process(ms::process_prefix(r, host),
                                      s.logs ? fmt::format("worker_{}.log", r) : "", true, r,
                                      host));
    }
    for (size_t at = 0; at < data.size(); at += kChunk) {
      std::string_view chunk = std::string_view(data).substr(at, kChunk);
      for (int p : procs) {
        out.data(p, false, chunk);
        now += step;
      }
      out.flush();
    }
    for (int p : procs) out.finish(p);
    out.drain();
  }
  double cpu = thread_cpu_s() - start;
  ::close(config.console_out);
  return cpu;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= list.size()) {
    size_t comma = std::min(list.find(',', start), list.size());
    out.push_back(list.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

Settings parse(int argc, char** argv) {
  Settings s;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return argv[++i];
    };
    if (a == "--reps")
      s.reps = std::stoi(value());
    else if (a == "--lines")
      s.lines = std::stoul(value());
    else if (a == "--modes")
      s.modes = split(value());
    else if (a == "--us_per_chunk")
      s.us_per_chunk = std::stod(value());
    else if (a == "--no_logs")
      s.logs = false;
    else if (a == "--distinct")
      s.distinct = true;
    else
      throw std::invalid_argument("unknown option " + a);
  }
  return s;
}

void report(const Settings& s, const std::map<std::string, std::vector<double>>& cpu) {
  const double lines = static_cast<double>(s.lines) * kRanks;
  const std::vector<double>& base = cpu.at(s.modes.front());
  fmt::print("{:<18} {:>9} {:>12} {:>14} {:>9}\n", "mode", "ns/line", "Mlines/s",
             "vs " + s.modes.front(), "MB/s");
  for (const auto& mode : s.modes) {
    const std::vector<double>& v = cpu.at(mode);
    std::vector<double> diff;
    for (size_t i = 0; i < v.size(); ++i) diff.push_back((v[i] - base[i]) / lines * 1e9);
    double ns = median(v) / lines * 1e9;
    fmt::print("{:<18} {:>9.1f} {:>12.2f} {:>+11.1f} ns {:>9.0f}\n", mode, ns, 1e3 / ns,
               median(diff), 100.0 / ns * 1e3);
  }
}

}  // namespace

int main(int argc, char** argv) try {
  Settings s = parse(argc, argv);
  std::string data;
  data.reserve(100 * s.lines);
  for (size_t i = 0; i < s.lines; ++i) {
    std::string line = s.distinct ? fmt::format("step {:>10} ", i) : "";
    data += line + std::string(99 - line.size(), 'x') + '\n';
  }
  std::string tmpl = (std::filesystem::temp_directory_path() / "relay_micro.XXXXXX").string();
  if (!::mkdtemp(tmpl.data())) throw std::runtime_error(std::strerror(errno));
  std::map<std::string, std::vector<double>> cpu;
  for (int rep = 0; rep < s.reps; ++rep)
    for (size_t k = 0; k < s.modes.size(); ++k) {
      const std::string& mode = s.modes[(k + static_cast<size_t>(rep)) % s.modes.size()];
      cpu[mode].push_back(run_once(s, mode, data, tmpl));
    }
  std::filesystem::remove_all(tmpl);
  fmt::print("{} ranks x {} {} lines of 100 bytes, {} KiB chunks, {} reps, median thread CPU{}\n",
             kRanks, s.lines, s.distinct ? "distinct" : "identical", kChunk / 1024, s.reps,
             s.logs ? ", logs written" : ", no logs");
  report(s, cpu);
  return 0;
} catch (const std::exception& e) {
  fmt::print(stderr, "relay_micro: {}\n", e.what());
  return 2;
}
