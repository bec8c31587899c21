// Cluster acceptance: `msrun-ssh check` asks every host, concurrently, whether a job
// planned from the same options would start there, and prints one verdict per host and check.
//
// What it costs each host: one SSH connection (a host that fails to connect does not stop the
// others) and at most three commands.
//  1. one probe (probe_command): a POSIX sh script (src/remote/check_probe.sh) that prints
//     `key=value` lines about the host (clock first, then OS, CPUs, NUMA, devices, workdir, disk,
//     script checksum, python and imports, route to the master); parse_probe() reads them and
//     evaluate_probe() turns them into verdicts. Every external program in it runs under `timeout`,
//     and the only file it creates (an empty `.msrun-ssh-check.PID` in the workdir) is removed at
//     once.
//  2. on the master only, at the same time: a temporary TCP listener on 0.0.0.0:master_port
//     (listener_command: src/remote/python.sh, listen.sh, listen.py), bounded by its own deadline
//     and ended as soon as its stdin closes.
//  3. once it listens, on every host: one connection attempt to MASTER_IP:master_port
//     (connect_command: src/remote/python.sh, connect.sh, connect.py), bounded by
//     --connect_timeout.
//
// Checks, in column order, and their rules (pass / warn / fail; "skip" when not applicable):
//   reachable      TCP + SSH banner. fail: refused, no route, timed out, name not resolved.
//   authenticated  fail: key refused, identity file unreadable, timed out during authentication.
//   host_key       fail: unknown key (the detail gives the ssh-keyscan line to type), changed key.
//                  warn: accepted without verification (accept-new added it, or =no).
//                  A host that fails to connect gets these three from connect_all's failure and
//                  every other check "skip".
//   os             pass, with /etc/os-release's PRETTY_NAME and `uname -srm` (information).
//   cpus           Cpus_allowed_list of a remote shell vs the processes planned on the host.
//                  fail: manual bind_core CPUs outside the allowed set, or --bind_core=True with
//                  fewer CPUs than processes. warn: fewer CPUs than processes; list unreadable.
//   numa           NUMA nodes and their CPUs. fail: manual bind_numa names an absent node.
//                  warn: NUMA binding asked for but no node visible.
//   devices        `npu-smi info -l` / `nvidia-smi -L` vs workers. fail: the tool fails, or fewer
//                  devices than the highest physical device id needs. warn: no tool / no device.
//   python         interpreter of the run (--python, else the host's `python`, else python3):
//                  path and version. fail: missing or broken (warn only when the TASK_SCRIPT
//                  given does not need python and no --import is asked for). warn: its version
//                  differs from the one most hosts have.
//   import:MODULE  one per --import: `import MODULE` in the workdir, with the host's env.
//   script         TASK_SCRIPT (when it is a file: ends in .py or contains '/') exists, relative
//                  to the workdir on the host, with the SHA-256 of the launcher's copy (relative
//                  to the launcher's cwd). Without a launcher copy (a run does not need one) the
//                  checksum most hosts have is the reference. fail: missing, unreadable, differs.
//                  skip: no TASK_SCRIPT, a program name (python, pytest, ...), workdir unusable.
//   workdir        cd + create and remove a file. fail: missing, not a directory, not writable.
//   clock          remote `date +%s.%N` vs the middle of the launcher's request/answer interval.
//                  warn: |offset| > 0.5 s. fail: > 5 s.
//   disk           free space in the workdir (df -Pk). warn: below 1 GiB or unknown.
//   master_port    master: the port is free (fail: "in use"). Every host: MASTER_IP:PORT accepts
//                  a connection (fail: refused / timed out). skip on all hosts when the master
//                  cannot run the test (not connected, port in use, no python: warn on it).
//   sync           with --sync only: whether the synced directory on the host is the launcher's
//                  (sync.h, compared as a sync would, nothing written). pass: in sync. warn: N
//                  paths differ. fail: cannot compare (no python3, DEST not a directory, ...).
//   route          `ip route get MASTER_IP`: the interface (and source address) each host uses to
//                  reach the master. fail: no route. warn: no `ip` command.
//   stacks         what `msrun-ssh stack` gets there (stacks.h): Python stacks when the run's
//                  interpreter works, native ones when gdb and timeout are installed and ptrace
//                  lets this user attach (kernel.yama.ptrace_scope 0; 1 or 2 for root only).
//                  pass: Python stacks (value "python+gdb" or "python"). warn: no Python stacks
//                  (then native ones, or the /proc state only).
//
//   net, allreduce  with --net and --net=collective (see their sections below).
//
// Nothing is left on a host: the temporary file is removed at once, the listener ends on EOF of
// its stdin (also when the launcher dies: sshd closes the channel) or at its own deadline, and
// every probe step runs under `timeout` (at most 60 s for one --import), so even after the
// launcher is killed mid-check every remote process ends within its step's bound.
//
// Exit status: 0 when no check failed — warnings and skips do not fail a check run (a cluster
// without NPUs/GPUs, for instance, warns on "devices" and still passes) —, 1 when any check failed
// (unreachable hosts included), 2 for usage errors (bad --import names among them).
//
// Everything but check_cluster() is a pure function: the unit tests (tests/unit/check_test.cc)
// feed them probe outputs and expectations directly.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "msrun_ssh/hostfile.h"
#include "msrun_ssh/options.h"
#include "msrun_ssh/plan.h"
#include "msrun_ssh/ssh.h"
#include "msrun_ssh/transport.h"

namespace msrun_ssh {

enum class CheckStatus { kPass, kWarn, kFail, kSkip };

// "pass", "warn", "fail", "skip".
const char* status_name(CheckStatus status);

struct CheckResult {
  std::string name;  // "reachable", "import:numpy", ... (see check_names)
  CheckStatus status = CheckStatus::kSkip;
  std::string detail;  // one line: the reason, or what was found
  std::string value;   // short text for a passing cell of the table ("3.11.7", "eth0"); may be ""
};

struct HostReport {
  std::string address;  // host_key: with its port when another entry shares the address
  int node_rank = 0;
  bool is_master = false;
  std::vector<CheckResult> checks;  // in check_names() order

  // The check of that name, or nullptr.
  CheckResult* find(std::string_view name);
  const CheckResult* find(std::string_view name) const;
  // Sets (or adds) a check.
  void set(std::string_view name, CheckStatus status, std::string detail, std::string value = "");
};

// ---- the network test (--net) --------------------------------------------------------------

// One direction of one tested pair: `from` sent to `to` (plan indexes). `gbps` is what the
// receiving side counted (bytes x 8 / seconds from its first byte to the sender's end); absent
// when the test of the pair failed (`error` says why). `rtt_ms` is the pair's median ping.
struct NetLink {
  size_t from = 0;
  size_t to = 0;
  std::optional<double> gbps;
  double rtt_ms = 0;
  std::string error;
};

struct NetReport {
  std::vector<size_t> tested;      // plan indexes of the hosts measured
  std::vector<std::string> where;  // per plan host: the interface or address it was tested on
  std::vector<NetLink> links;
  double median_gbps = 0;  // over every measured link
  double median_rtt_ms = 0;
  double min_ratio = 0.5;
  double seconds = 0;  // wall time of the whole test
  size_t rounds = 0;
  size_t retested = 0;  // slow pairs measured a second time (their better figures are kept)
};

// What the collective smoke test (--net=collective, below) found.
struct CollectiveResult {
  bool ran = false;            // false: not run, `cause` says why
  int status = 0;              // the job's exit status (error.h)
  double seconds = 0;          // the launcher's wall time of the whole job, connecting included
  std::string cause;           // what ended the job ("" when it passed)
  std::string failed_process;  // "rank 1 on ADDR": the first failure ("" if none)
  // The root cause's host (the first failure); without one, every host with a failed process.
  std::vector<std::string> failed_hosts;
  std::vector<std::string> last_lines;  // the first failure's last lines
  std::map<int, double> rank_seconds;   // rank -> its "seconds=" (start to sum)
  std::string log_dir;                  // its logs, kept when it failed ("" once removed)
};

// ---- the node test (--perf) -----------------------------------------------------------------

struct CheckReport;
struct HostExpectation;

// One directory's throughput on one host (src/remote/perf.py): writing then fsync, reading back
// from the disk (the page cache dropped); `error` instead when it could not be measured.
struct DiskRate {
  std::string path;
  std::optional<double> write_mbps;
  std::optional<double> read_mbps;
  std::string error;
};

// One accelerator as nvidia-smi or npu-smi reports it; what a tool does not report is absent.
struct AccelDevice {
  std::string id;      // nvidia: the index; npu: "NPU/CHIP"
  std::string name;    // "NVIDIA A100-SXM4-80GB", "910B3"
  std::string health;  // npu-smi's Health ("OK", "Warning", "Alarm", "Critical"); "" for nvidia
  std::optional<double> temp_c;
  std::optional<double> util_pct;  // GPU or AICore utilisation before the job starts
  std::optional<double> sm_mhz;
  std::optional<double> max_sm_mhz;
  std::optional<long> ecc_uncorrected;  // volatile uncorrected ECC errors
  bool hw_slowdown = false;             // nvidia: clocks held down by the hardware
  std::vector<std::string> processes;   // npu: "PID NAME" of processes already on it
};

// What one host measured (parse_perf).
struct HostPerf {
  std::string error;             // the test did not run or answer: why ("" when it measured)
  int cpus = 0;                  // CPUs the job's processes may run on
  std::string kernel;            // "numpy" or "python": the unit of cpu_each
  std::vector<double> cpu_each;  // per allowed CPU (at most 64): kernel runs per second
  double mem_gbps = 0;           // one process copying a 32 MiB buffer
  std::vector<DiskRate> disks;   // the workdir first, then each --perf_path
  std::string accel_tool;        // "nvidia-smi", "npu-smi", or "" when neither is installed
  std::string accel_error;       // the tool failed or printed nothing it could read
  std::vector<AccelDevice> accel;
  double cpu_median() const;  // the upper median of cpu_each (0 when none)
};

struct PerfReport {
  std::vector<std::optional<HostPerf>> hosts;  // per plan host; nullopt: not connected
  double min_ratio = 0.5;
  double seconds = 0;   // wall time of the whole test
  size_t retested = 0;  // hosts found slow and measured once more (their better figures kept)
  // Upper medians over the hosts measured (CPU: per kernel, hosts of another kernel are not
  // compared); disks per path.
  std::map<std::string, double> median_cpu;
  double median_mem_gbps = 0;
  std::map<std::string, std::pair<double, double>> median_disk;  // path -> (write, read) MB/s
};

// The node test of one host: python.sh + perf.py, `seconds` per measurement, `paths` the
// directories to time (the workdir first), within 6 x `seconds` + 60 s.
std::string perf_command(const std::string& python, double seconds,
                         const std::vector<std::string>& paths);
// perf.py's JSON line; `trouble` (batch_trouble) when it gave none.
HostPerf parse_perf(const std::string& output, const std::string& trouble);
// `nvidia-smi --query-gpu=index,name,temperature.gpu,utilization.gpu,clocks.sm,clocks.max.sm,
// ecc.errors.uncorrected.volatile.total,clocks_throttle_reasons.hw_slowdown
// --format=csv,noheader,nounits` and `npu-smi info` (its tables of devices and processes). A line
// that cannot be read sets `error` and is skipped.
std::vector<AccelDevice> parse_nvidia_smi(std::string_view csv, std::string& error);
std::vector<AccelDevice> parse_npu_smi(std::string_view text, std::string& error);

// Verdicts (the "perf" check of each measured host; medians as in PerfReport):
//   fail  the host's CPU (the upper median of its per-CPU rates), its memory copy rate, or a
//         path's write or read rate is below --perf_min_ratio x the median of the hosts (named:
//         "CPU at 0.12 k/s per CPU: below 0.5 x the median 0.45 k/s"); an accelerator whose
//         health is not OK or that has uncorrected ECC errors; a path it could not write.
//   warn  an accelerator at 85 C or more, busy (10% or more) or with processes before the job,
//         or held down by the hardware; the accelerator tool failed.
//   pass  otherwise, with the host's per-CPU rate as the value.
void evaluate_perf(PerfReport& perf, CheckReport& report);

// Runs the node test on every host of `hosts` at once (plan indexes) and evaluates it; a host
// found slow is measured once more (alone with the other slow ones) and keeps its better figures.
PerfReport run_perf_test(Transport& transport, const std::vector<size_t>& hosts,
                         const std::vector<HostExpectation>& expectations, const Options& options,
                         CheckReport& report);

// The terminal form: one line per host with every figure, the medians first.
std::string format_perf(const PerfReport& perf, const CheckReport& report);

struct CheckReport {
  std::string master;  // "198.18.1.10:8118"
  std::vector<HostReport> hosts;
  std::optional<PerfReport> perf;              // with --perf
  std::optional<NetReport> net;                // with --net
  std::optional<CollectiveResult> collective;  // with --net=collective
};

// The checks in column order; one "import:MODULE" per --import.
std::vector<std::string> check_names(const std::vector<std::string>& imports);

// A report where every host has every check, all "skip" with `detail`.
CheckReport empty_report(const Plan& plan, const std::vector<std::string>& imports,
                         const std::string& detail);

// Throws InputError unless every --import is a dotted Python module name.
void validate_imports(const std::vector<std::string>& imports);

// ---- connection -----------------------------------------------------------------------------

// Turns one of SshPool::connect_all's failures into the reachable / authenticated / host_key
// verdicts (in that order), by the step its kind belongs to: that one fails with the reason, the
// steps before it pass, what was never attempted is "skip".
std::vector<CheckResult> classify_connect_failure(const ConnectFailure& failure);
// The same for host `host` of a pool whose connect warnings are `warnings`: a host that failed to
// authenticate after its key was accepted unverified (or added) says so, not "verified".
std::vector<CheckResult> classify_connect_failure(const ConnectFailure& failure, size_t host,
                                                  const std::vector<ConnectWarning>& warnings);

// The three verdicts of host `host`, which connected; `warnings` are SshPool::warnings() (a host
// key warning for that host turns host_key into a warning with its message).
std::vector<CheckResult> connected_checks(size_t host, const std::vector<ConnectWarning>& warnings);

// ---- the probe ------------------------------------------------------------------------------

// What the plan expects of one host: the inputs of the probe and of its evaluation.
struct HostExpectation {
  std::string address;
  bool is_master = false;
  int processes = 0;  // planned on the host, scheduler included
  int workers = 0;
  std::vector<int> device_ids;   // physical ids the workers drive (from their bind keys)
  std::vector<int> manual_cpus;  // union of the processes' manual bind_core CPUs
  std::vector<int> manual_numa;  // union of the processes' manual bind_numa nodes
  bool auto_bind_core = false;
  bool auto_bind_numa = false;
  EnvList env;         // the host's env and --env (what every process gets from the user)
  std::string python;  // interpreter of the run
  bool python_required = true;
  std::vector<std::string> imports;
  std::string script;       // TASK_SCRIPT as given when it is a file, else ""
  std::string script_note;  // why there is no script to check ("no TASK_SCRIPT", ...)
  std::string workdir;
  std::string master_ip;
  int master_port = 0;
};

// Builds the expectation of plan host `h` (pure).
HostExpectation expectation_for(const Plan& plan, size_t h, const Options& options);

// The shell command that runs the probe on the host (sent as the SSH exec request).
std::string probe_command(const HostExpectation& expectation);

// Key/value lines of a probe's stdout, in order; a key may repeat ("numa", "import_ok"). Lines
// without '=' and anything after a NUL are ignored; a trailing '\r' is dropped.
struct ProbeFacts {
  std::vector<std::pair<std::string, std::string>> values;
  bool has(std::string_view key) const;
  std::string get(std::string_view key) const;  // first value, or ""
  std::vector<std::string> all(std::string_view key) const;
};
ProbeFacts parse_probe(std::string_view output);

// The launcher's wall clock (seconds since the epoch) when the probe was requested and when its
// clock line arrived: the remote clock was read somewhere between.
struct ClockSample {
  double sent = 0;
  double received = 0;
};

// Parses `date +%s.%N` output ("1700000000.123456789"; busybox may print "1700000000.%N" or
// "1700000000.N": whole seconds then). Returns nullopt when it is not a time.
std::optional<double> parse_remote_time(std::string_view text, bool* whole_seconds = nullptr);

// Verdicts of every probe check (os ... route, without master_port and script) from the facts.
// A probe that did not finish (no "end" line) fails every check it could not decide.
std::vector<CheckResult> evaluate_probe(const HostExpectation& expectation, const ProbeFacts& facts,
                                        const ClockSample& clock);

// The script check on every host at once. `local_sha` is the launcher copy's SHA-256 (nullopt:
// `local_error` says why there is none); `facts[i]` is host i's probe (nullptr: not probed).
std::vector<CheckResult> script_checks(const std::vector<HostExpectation>& expectations,
                                       const std::vector<const ProbeFacts*>& facts,
                                       const std::optional<std::string>& local_sha,
                                       const std::string& local_error);

// Cross-host comparisons done once every host answered: a python version that differs from the
// majority becomes a warning.
void compare_hosts(CheckReport& report);

// ---- the master port ------------------------------------------------------------------------

// The temporary listener on the master: prints "listening" once bound to 0.0.0.0:PORT, or
// "in_use REASON" (exit 3) when bind fails, or "no_python" (exit 4); accepts and closes
// connections until its stdin closes or `limit_s` passes, then prints "accepted N".
std::string listener_command(const std::string& python, int port, double limit_s);

// One connection attempt to IP:PORT: prints "reach=ok" or "reach=fail REASON" (or
// "reach=untested REASON" without python and bash).
std::string connect_command(const std::string& python, const std::string& ip, int port,
                            double timeout_s);

// The master_port verdict of one host from its connect command's output (nullopt: no answer).
CheckResult port_result(const std::string& master, const std::optional<std::string>& output,
                        bool is_master);

// ---- rendering ------------------------------------------------------------------------------

struct CheckTally {
  int hosts = 0, passed = 0, failed = 0, warnings = 0, skipped = 0;
};
CheckTally tally(const CheckReport& report);

// "check: 3 hosts, 42 passed, 1 failed, 2 warnings" (", 5 skipped" when any were).
std::string summary_line(const CheckReport& report);

// The terminal form: summary line, a hosts × checks table (passing cells show their value or
// "ok", others WARN / FAIL / -), then the reasons of every failed and warning cell.
std::string format_table(const CheckReport& report, bool color);

// The --json form: {"summary": {...}, "master": ..., "hosts": {ADDRESS: {"node_rank", "master",
// "checks": {NAME: {"status", "detail", "value"}}}}}, keys in report order.
std::string format_json(const CheckReport& report);

// 0 when no check failed, else 1.
int check_exit_code(const CheckReport& report);

// ---- on the connected hosts -----------------------------------------------------------------

// Runs the probe on every host of `connected` (plan indexes, which are also the hosts of
// `transport`) and the master-port test (the listener on the master, then one connection test
// from each host) in one batch (batch.h); then sets those hosts' probe checks and master_port in
// `report` and facts[h] to host h's parsed probe (`facts` has one entry per plan host). What has
// not answered after 150 s (+60 s per --import) is killed and fails the checks it could not
// decide. `expectations` has one entry per plan host; `master` is the plan index of the master.
void check_connected_hosts(Transport& transport, const std::vector<size_t>& connected,
                           const std::vector<HostExpectation>& expectations, const Options& options,
                           size_t master, CheckReport& report, std::vector<ProbeFacts>& facts);

// ---- the network test (--net) --------------------------------------------------------------
//
// `check --net` measures TCP bandwidth (both directions) and round-trip time between pairs of
// hosts, over the address each host uses to reach the master (the "src" of its route to it), or
// the address of the interface GLOO_SOCKET_IFNAME / HCCL_SOCKET_IFNAME / NCCL_SOCKET_IFNAME
// names in the host's env (the first set, a plain name). The pairs are tested in rounds, each a
// matching (no host in two pairs at once): all pairs (N-1 rounds, the circle method) or a ring
// (2 rounds, 3 for an odd N). Each side is src/remote/net.py under python.sh: the server binds a
// free port (port 0) of its address, serves one client and ends; every step is bounded by
// --net_seconds and `timeout`, and the server also ends on EOF of its stdin.
//
// Verdicts (the "net" check of each tested host; M is the median over every measured link):
//   fail  the host's median sending rate, or its median receiving rate, is below
//         --net_min_ratio x M (upper medians: one slow partner of two does not fail a host);
//         a slow link that neither end's median explains fails both ends ("link A -> B");
//         a pair whose test failed fails both ends with the reason.
//   warn  the host's median RTT is above 2 x the median RTT + 1 ms.
//   pass  otherwise, with the host's median rate as the value.
// A pair with a direction below --net_min_ratio x the median of the first pass is measured once
// more (in rounds of its own) and keeps its better figures: a moment of load does not fail a
// host; a slow link stays slow.

// The rounds for n hosts (indexes 0..n-1): each a list of pairs (server, client).
std::vector<std::vector<std::pair<size_t, size_t>>> net_rounds(size_t n, NetPairs pairs);

// The interface named by the host's GLOO/HCCL/NCCL_SOCKET_IFNAME ("" if none or not a plain name):
// its name, or NAME* for NCCL's and HCCL's prefix of names (a value without '=': the first
// interface whose name begins so).
std::string net_interface(const EnvList& env);

// The server side's BIND argument for net.py ("if:NAME", "if:PREFIX*" or "addr:IP"), from the
// host's env and its probe's route to the master; "" when neither tells an address.
std::string net_bind(const HostExpectation& expectation, const ProbeFacts& facts);

// The two sides of one pair (python.sh + net.py).
std::string net_server_command(const std::string& python, const std::string& bind, double seconds);
std::string net_client_command(const std::string& python, const std::string& ip, int port,
                               double seconds);

// The two links of one pair from the client's output (server/client are plan indexes).
std::vector<NetLink> parse_net_client(size_t server, size_t client, const std::string& output,
                                      const std::string& trouble);

// Fills medians and sets the "net" check of every tested host in `report` (rules above); hosts
// not tested get "skip" with `untested[h]` as the reason when it is not "".
void evaluate_net(NetReport& net, CheckReport& report, const std::vector<std::string>& untested);

// Runs every round on `transport` (hosts are plan indexes) and returns the links measured.
NetReport run_net_test(Transport& transport, const std::vector<size_t>& hosts,
                       const std::vector<std::string>& binds,
                       const std::vector<HostExpectation>& expectations, const Options& options);

// The terminal form: the median, the rounds and the time taken, then every link, one per line.
std::string format_net(const NetReport& net, const CheckReport& report);

// ---- the collective smoke test (--net=collective) -------------------------------------------
//
// After every other check (the check's own connections closed), `check --net=collective` starts
// a job through the run's own launch path (run_job of runner.h, through a JobLauncher): the plan
// of the real run — hosts, ranks, contract, environment, binding, workdir — with every process
// running `PYTHON -c ALLREDUCE LIMIT` (src/remote/allreduce.py; PYTHON is the interpreter of the
// run, which must be the same on every host), LIMIT = 3 x --connect_timeout + 20 s, --timeout =
// LIMIT + 15 s, no restarts, no --events, no --tail_worker_log, its console and logs in a fresh
// directory under $TMPDIR (else /tmp), removed when it passed. With msrun's contract the
// scheduler sums the workers' vectors on MS_SCHED_PORT; with torchrun's, rank 0 on MASTER_PORT.
// The run's teardown guarantees apply as to any run. Verdicts, the "allreduce" check of every
// host:
//   pass  the job ended with status 0; the value is its wall time ("1.4 s").
//   fail  the hosts of the processes that failed (the first failure's host first): what ended
//         the job, that process's last lines and where its logs are; every host when no process
//         failed (the job did not start, a host was lost, a time limit).
//   skip  not run (a host not connected, different interpreters, --sim_level); in a failed run,
//         the hosts where nothing failed.

// The job of the smoke test, or why there is none (`skip`).
struct CollectiveJob {
  Options options;
  Plan plan;
  std::string skip;  // "" when it can run
};
CollectiveJob collective_job(const Options& options, const Plan& plan,
                             const std::vector<HostExpectation>& expectations,
                             const std::string& log_dir);

// The result from what the job left: its exit status and wall time, and its --events stream
// (docs/events.md): the last `summary` names the failure, `start_failed` why nothing ran, and
// each rank's `process_started` its log, whose "allreduce ok rank=R world=W seconds=S" line (the
// job's own output, read with `read_log(LOG)`) gives rank_seconds. Nothing reads the console.
CollectiveResult collective_result(int status, double seconds, const std::string& events,
                                   const std::function<std::string(const std::string&)>& read_log);

// Sets the "allreduce" check of every host of `report` from `result` (rules above).
void evaluate_collective(const CollectiveResult& result, CheckReport& report);

// Starts a job of check's own: runs `plan` with `options`, its console (the processes' lines,
// the launcher's messages and summary) written to the file `console`; returns its exit status.
// The CLI passes run_job_quietly (runner.h).
using JobLauncher = std::function<int(const Options&, Plan&, const std::string& console)>;

// The smoke test, when every host connected (`all_connected`), through `launch`: sets
// report.collective and the "allreduce" checks.
void check_collective(const Options& options, const Plan& plan,
                      const std::vector<HostExpectation>& expectations, bool all_connected,
                      const JobLauncher& launch, CheckReport& report);

// ---- the whole command ----------------------------------------------------------------------

// Runs every check on every host of `plan` and prints the table (or JSON with --json) to stdout.
// Returns the exit status above. Throws InputError for bad --import names (before connecting).
// `launch` starts the job of --net=collective.
int check_cluster(const Options& options, const Cluster& cluster, Plan& plan,
                  const JobLauncher& launch);

}  // namespace msrun_ssh
