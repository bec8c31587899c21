// The acceptance checks (src/check/): probe parsing and verdicts, connection classification,
// script checksums, the master-port commands, and the table / JSON rendering. Everything here is
// pure except the *Locally tests, which run the generated shell commands under the local /bin/sh
// (no SSH) to prove that the scripts themselves work.
#include "msrun_ssh/check.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "msrun_ssh/base.h"
#include "msrun_ssh/command.h"
#include "msrun_ssh/error.h"
#include "reply_transport.h"
#include "test_util.h"

namespace msrun_ssh {
namespace {

using fake::Reply;
using fake::ReplyTransport;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// ---- helpers ------------------------------------------------------------------------------

HostExpectation expectation() {
  HostExpectation e;
  e.address = "198.18.1.11";
  e.processes = 3;
  e.workers = 2;
  e.device_ids = {0, 1};
  e.python = "python3";
  e.workdir = "/data/job";
  e.master_ip = "198.18.1.10";
  e.master_port = 8118;
  return e;
}

// A healthy host's probe output, with a login script's noise in front.
const char* kHealthy =
    "Welcome to node1!\n"
    "sync=1\n"
    "clock=1700000000.250000000\n"
    "os=Debian GNU/Linux 12 (bookworm)\n"
    "kernel=Linux 6.1.0-18-amd64 x86_64\n"
    "cpus_allowed=0-23\n"
    "numa=0 0-11\n"
    "numa=1 12-23\n"
    "numa_nodes=2\n"
    "npu=0 8\n"
    "devices_probed=1\n"
    "workdir=writable\n"
    "disk_kb=104857600\n"
    "python_path=/usr/bin/python3\n"
    "python_version=3.11.2\n"
    "route=198.18.1.10 dev eth0 src 198.18.1.11 uid 0\n"
    "stack_gdb=/usr/bin/gdb\n"
    "ptrace_scope=1\n"
    "uid=0\n"
    "end=ok\n";

const ClockSample kClock{1700000000.2, 1700000000.3};

std::map<std::string, CheckResult> by_name(const std::vector<CheckResult>& results) {
  std::map<std::string, CheckResult> out;
  for (const auto& r : results) out[r.name] = r;
  return out;
}

std::map<std::string, CheckResult> evaluate(const HostExpectation& e, const std::string& output,
                                            const ClockSample& clock = kClock) {
  return by_name(evaluate_probe(e, parse_probe(output), clock));
}

// The healthy output with one line replaced (or removed when `line` is empty).
std::string with(const std::string& key, const std::string& line,
                 const std::string& text = kHealthy) {
  std::string out;
  bool done = false;
  for (size_t pos = 0; pos < text.size();) {
    size_t nl = text.find('\n', pos);
    std::string l = text.substr(pos, nl - pos);
    pos = nl + 1;
    if (l.rfind(key + "=", 0) == 0) {
      if (!done && !line.empty()) out += line + "\n";
      done = true;
      continue;
    }
    out += l + "\n";
  }
  if (!done && !line.empty()) out.insert(out.rfind("end=ok"), line + "\n");
  return out;
}

// The stdout of `command` under /bin/sh with `input` on its stdin.
std::string run_sh(const std::string& command, const std::string& input = "\n") {
  test::TempDir tmp;
  std::string in = tmp.write("in", input);
  return test::shell_output("/bin/sh -c " + shell_quote(command) + " <" + in + " 2>/dev/null");
}

bool have(const char* program) {
  return std::system(fmt::format("command -v {} >/dev/null 2>&1", program).c_str()) == 0;
}

// A TCP socket listening on 127.0.0.1 at a free port.
struct Listening {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  int port = 0;
  Listening() {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    listen(fd, 8);
    socklen_t len = sizeof a;
    getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
  }
  ~Listening() { close(fd); }
};

// ---- SHA-256 ------------------------------------------------------------------------------

TEST(Check, Sha256KnownVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Check, Sha256FileMatchesMemoryAndNamesMissingFiles) {
  test::TempDir tmp;
  std::string data(200000, 'x');
  data += "tail";
  std::string path = tmp.write("data", data);
  std::string error;
  EXPECT_EQ(sha256_file(path, error), sha256_hex(data));
  std::filesystem::remove(path);
  EXPECT_EQ(sha256_file(path, error), std::nullopt);
  EXPECT_EQ(error, std::string("cannot open ") + path + ": No such file or directory");
}

// ---- parsing ------------------------------------------------------------------------------

TEST(Check, ParseProbeKeepsOrderRepeatsAndEqualsInValues) {
  ProbeFacts f = parse_probe(
      "a=1\r\nnoise without equals\nb=x=y\nnuma=0 0-3\nnuma=1 4-7\n=bad\n"
      "Bad Key=1\nPATH=/usr/bin\nlast=no newline");
  EXPECT_EQ(f.get("a"), "1");
  EXPECT_EQ(f.get("b"), "x=y");
  EXPECT_EQ(f.all("numa"), (std::vector<std::string>{"0 0-3", "1 4-7"}));
  EXPECT_FALSE(f.has("PATH"));  // not a probe key: login-script noise
  EXPECT_FALSE(f.has("Bad Key"));
  EXPECT_EQ(f.get("last"), "no newline");
  EXPECT_EQ(f.get("absent"), "");
  EXPECT_EQ(f.values.size(), 5u);
}

TEST(Check, ParseProbeStopsAtNul) {
  std::string text = std::string("a=1\n") + '\0' + "b=2\n";
  EXPECT_FALSE(parse_probe(text).has("b"));
}

TEST(Check, ParseRemoteTime) {
  bool whole = true;
  EXPECT_DOUBLE_EQ(*parse_remote_time("1700000000.250000000", &whole), 1700000000.25);
  EXPECT_FALSE(whole);
  EXPECT_DOUBLE_EQ(*parse_remote_time("1700000000,5", &whole), 1700000000.5);  // de_DE bash
  EXPECT_DOUBLE_EQ(*parse_remote_time("1700000000.%N", &whole), 1700000000);   // busybox
  EXPECT_TRUE(whole);
  EXPECT_DOUBLE_EQ(*parse_remote_time("1700000000", &whole), 1700000000);
  EXPECT_EQ(parse_remote_time(""), std::nullopt);
  EXPECT_EQ(parse_remote_time("date: invalid"), std::nullopt);
  EXPECT_EQ(parse_remote_time("-5.0"), std::nullopt);
}

// ---- expectations from the plan -------------------------------------------------------------

Plan small_plan(Options& o, std::vector<Host> hosts) {
  Cluster c;
  c.path = "h.toml";
  c.hosts = std::move(hosts);
  o.job_id = "job";
  o.launcher_cwd = "/home/u";
  return make_plan(o, c, [](const std::string& n) { return n == "a" ? "198.18.1.10" : ""; });
}

Host plain_host(const std::string& address, int workers) {
  Host h = test::host(address, workers);
  h.workdir = "/w/" + address;
  return h;
}

TEST(Check, ExpectationFollowsThePlan) {
  Options o;
  o.command = Command::kCheck;
  o.task_script = "train.py";
  o.imports = {"numpy"};
  o.env = {{"B", "from-cli"}};
  Host a = plain_host("a", 2);
  a.env = {{"A", "1"}, {"B", "host"}};
  a.python = "/opt/py/bin/python";
  a.env.emplace_back("ASCEND_RT_VISIBLE_DEVICES", "4,5");
  Host b = plain_host("b", 1);
  Plan p = small_plan(o, {a, b});
  HostExpectation e = expectation_for(p, 0, o);
  EXPECT_TRUE(e.is_master);
  EXPECT_EQ(e.processes, 3);
  EXPECT_EQ(e.workers, 2);
  EXPECT_EQ(e.device_ids, (std::vector<int>{4, 5}));
  EXPECT_EQ(e.python, "/opt/py/bin/python");
  EXPECT_EQ(e.env, (EnvList{{"A", "1"}, {"B", "from-cli"}, {"ASCEND_RT_VISIBLE_DEVICES", "4,5"}}));
  EXPECT_EQ(e.script, "train.py");
  EXPECT_EQ(e.workdir, "/w/a");
  EXPECT_EQ(e.master_ip, "198.18.1.10");
  EXPECT_EQ(e.imports, (std::vector<std::string>{"numpy"}));
  HostExpectation f = expectation_for(p, 1, o);
  EXPECT_FALSE(f.is_master);
  EXPECT_EQ(f.processes, 1);
  EXPECT_EQ(f.python, "python3");
  o.python = "/usr/bin/python3.11";
  EXPECT_EQ(expectation_for(p, 0, o).python, "/usr/bin/python3.11");
}

TEST(Check, ExpectationScriptRules) {
  Options o;
  o.command = Command::kCheck;
  Plan p;
  auto expect = [&](const std::string& script, const std::string& file, bool python_required) {
    o.task_script = script;
    p = small_plan(o, {plain_host("a", 1)});
    HostExpectation e = expectation_for(p, 0, o);
    EXPECT_EQ(e.script, file) << script;
    EXPECT_EQ(e.python_required, python_required) << script;
    if (file.empty()) {
      EXPECT_FALSE(e.script_note.empty()) << script;
    }
  };
  expect("", "", true);       // `check` without TASK_SCRIPT
  expect("true", "", false);  // a program like any other
  expect("train.py", "train.py", true);
  expect("/abs/train.py", "/abs/train.py", true);
  expect("./run.sh", "./run.sh", false);
  expect("hostname", "", false);
  expect("pytest", "", true);
  o.imports = {"numpy"};
  expect("./run.sh", "./run.sh", true);
}

TEST(Check, ExpectationCarriesManualAndAutoBinding) {
  Options o;
  o.command = Command::kCheck;
  o.task_script = "t.py";
  o.bind_core = parse_bind_core(R"({"scheduler": ["0"], "device0": ["1-2"], "device1": ["3"]})",
                                "--bind_core");
  o.bind_numa = parse_bind_numa(R"({"device0": 0, "device1": [1]})", "--bind_numa");
  Plan p = small_plan(o, {plain_host("a", 2)});
  HostExpectation e = expectation_for(p, 0, o);
  EXPECT_EQ(e.manual_cpus, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(e.manual_numa, (std::vector<int>{0, 1}));
  EXPECT_FALSE(e.auto_bind_core);
  o.bind_core = parse_bind_core("True", "--bind_core");
  o.bind_numa = parse_bind_numa("True", "--bind_numa");
  p = small_plan(o, {plain_host("a", 2)});
  e = expectation_for(p, 0, o);
  EXPECT_TRUE(e.auto_bind_core);
  EXPECT_TRUE(e.auto_bind_numa);
  EXPECT_TRUE(e.manual_cpus.empty());
}

// ---- verdicts -----------------------------------------------------------------------------

TEST(Check, HealthyProbePassesEverything) {
  HostExpectation e = expectation();
  e.imports = {"numpy"};
  auto r = evaluate(e, with("import_ok", "import_ok=numpy"));
  std::vector<std::string> names;
  for (const auto& c : evaluate_probe(e, parse_probe(with("import_ok", "import_ok=numpy")), kClock))
    names.push_back(c.name);
  EXPECT_EQ(names,
            (std::vector<std::string>{"os", "cpus", "numa", "devices", "python", "import:numpy",
                                      "workdir", "clock", "disk", "route", "stacks"}));
  for (const auto& [name, c] : r)
    EXPECT_EQ(c.status, CheckStatus::kPass) << name << ": " << c.detail;
  const std::map<std::string, std::string> details = {
      {"os", "Debian GNU/Linux 12 (bookworm); Linux 6.1.0-18-amd64 x86_64"},
      {"cpus", "0-23 (24 CPUs) for 3 processes"},
      {"numa", "2 nodes: 0 (0-11), 1 (12-23)"},
      {"devices", "8 NPUs for 2 workers"},
      {"python", "/usr/bin/python3 3.11.2"},
      {"workdir", "/data/job is writable"},
      {"disk", "100.0 GiB free in /data/job"},
      {"clock", "+0.000 s (±0.050 s) from the launcher's clock"},
      {"route", "to 198.18.1.10 via eth0 (source 198.18.1.11)"}};
  for (const auto& [name, detail] : details) EXPECT_EQ(r[name].detail, detail) << name;
  EXPECT_EQ(r["os"].value, "6.1.0-18-amd64");
  EXPECT_EQ(r["python"].value, "3.11.2");
  EXPECT_EQ(r["route"].value, "eth0");
}

TEST(Check, CpusAgainstProcessesAndManualBinding) {
  HostExpectation e = expectation();
  e.processes = 4;
  auto r = evaluate(e, with("cpus_allowed", "cpus_allowed=0-2"));
  EXPECT_EQ(r["cpus"].status, CheckStatus::kWarn);
  EXPECT_EQ(r["cpus"].detail, "only 3 allowed CPUs (0-2) for 4 processes");
  e.auto_bind_core = true;
  r = evaluate(e, with("cpus_allowed", "cpus_allowed=0-2"));
  EXPECT_EQ(r["cpus"].status, CheckStatus::kFail);
  EXPECT_THAT(r["cpus"].detail, HasSubstr("cannot be split among 4 processes"));
  e = expectation();
  e.manual_cpus = {0, 1, 30, 31};
  r = evaluate(e, kHealthy);
  EXPECT_EQ(r["cpus"].status, CheckStatus::kFail);
  EXPECT_EQ(r["cpus"].detail, "bind_core CPUs 30-31 are not allowed here (allowed: 0-23)");
  r = evaluate(expectation(), with("cpus_allowed", "cpus_allowed="));
  EXPECT_EQ(r["cpus"].status, CheckStatus::kWarn);
  r = evaluate(expectation(), with("cpus_allowed", "cpus_allowed=zz"));
  EXPECT_EQ(r["cpus"].status, CheckStatus::kWarn);
}

TEST(Check, NumaNodes) {
  HostExpectation e = expectation();
  std::string none = with("numa_nodes", "numa_nodes=0", with("numa", ""));
  ASSERT_EQ(none.find("numa="), std::string::npos);
  auto r = evaluate(e, none);
  EXPECT_EQ(r["numa"].status, CheckStatus::kPass);
  EXPECT_THAT(r["numa"].detail, StartsWith("no NUMA information"));
  e.auto_bind_numa = true;
  EXPECT_EQ(evaluate(e, none)["numa"].status, CheckStatus::kWarn);
  e = expectation();
  e.manual_numa = {0, 3};
  r = evaluate(e, kHealthy);
  EXPECT_EQ(r["numa"].status, CheckStatus::kFail);
  EXPECT_EQ(r["numa"].detail, "bind_numa names node(s) 3 that do not exist here (nodes: 0,1)");
  EXPECT_EQ(evaluate(e, none)["numa"].status, CheckStatus::kFail);
}

// A host without numactl (minimal images) passed check's numa column, and the run then stopped
// there: "binding needs numactl, which is not installed there".
TEST(Check, TheBindingToolMustBeInstalled) {
  HostExpectation e = expectation();
  std::string no_numactl = with("bind_tools", "bind_tools=taskset ");
  EXPECT_EQ(evaluate(e, no_numactl)["numa"].status, CheckStatus::kPass);  // nothing bound
  e.auto_bind_numa = true;
  auto r = evaluate(e, no_numactl);
  EXPECT_EQ(r["numa"].status, CheckStatus::kFail);
  EXPECT_EQ(r["numa"].detail, "binding needs numactl, which is not installed here");
  EXPECT_EQ(r["cpus"].status, CheckStatus::kPass);
  EXPECT_EQ(evaluate(e, with("bind_tools", "bind_tools=taskset numactl "))["numa"].status,
            CheckStatus::kPass);
  e = expectation();
  e.auto_bind_core = true;
  r = evaluate(e, with("bind_tools", "bind_tools="));
  EXPECT_EQ(r["cpus"].status, CheckStatus::kFail);
  EXPECT_EQ(r["cpus"].detail, "binding needs taskset, which is not installed here");
  EXPECT_EQ(evaluate(e, no_numactl)["cpus"].status, CheckStatus::kPass);
}

TEST(Check, DevicesAgainstWorkers) {
  HostExpectation e = expectation();
  auto r = evaluate(e, with("npu", ""));
  EXPECT_EQ(r["devices"].status, CheckStatus::kWarn);
  EXPECT_EQ(r["devices"].detail, "no npu-smi or nvidia-smi here: no device found for 2 workers");
  EXPECT_EQ(evaluate(e, with("npu", "npu=0 0"))["devices"].status, CheckStatus::kWarn);
  r = evaluate(e, with("npu", "npu=0 1"));
  EXPECT_EQ(r["devices"].status, CheckStatus::kFail);
  EXPECT_EQ(r["devices"].detail, "2 workers need device ids 0,1 but npu-smi info -l lists 1 NPU");
  e.device_ids = {4, 5};  // ASCEND_RT_VISIBLE_DEVICES=4,5 needs at least 6 devices
  EXPECT_EQ(evaluate(e, with("npu", "npu=0 4"))["devices"].status, CheckStatus::kFail);
  EXPECT_EQ(evaluate(e, with("npu", "npu=0 8"))["devices"].status, CheckStatus::kPass);
  r = evaluate(expectation(), with("npu", "npu=9 0\nnpu_error=dcmi module initialize failed"));
  EXPECT_EQ(r["devices"].status, CheckStatus::kFail);
  EXPECT_EQ(r["devices"].detail, "npu-smi info -l failed (exit 9): dcmi module initialize failed");
  r = evaluate(expectation(), with("npu", "gpu=0 2"));
  EXPECT_EQ(r["devices"].status, CheckStatus::kPass);
  EXPECT_EQ(r["devices"].value, "2 GPU");
  e = expectation();
  e.workers = 0;
  e.device_ids.clear();
  EXPECT_EQ(evaluate(e, with("npu", ""))["devices"].status, CheckStatus::kPass);
}

TEST(Check, PythonAndImports) {
  HostExpectation e = expectation();
  e.imports = {"numpy", "torch"};
  std::string out = with("python_version",
                         "python_version=3.11.2\nimport_ok=numpy\n"
                         "import_fail=torch ModuleNotFoundError: No module named 'torch'");
  auto r = evaluate(e, out);
  EXPECT_EQ(r["import:numpy"].status, CheckStatus::kPass);
  EXPECT_EQ(r["import:torch"].status, CheckStatus::kFail);
  EXPECT_EQ(r["import:torch"].detail, "import torch: ModuleNotFoundError: No module named 'torch'");
  // No interpreter: python fails, the imports are skipped.
  std::string none = with("python_path", "python_path=", with("python_version", ""));
  r = evaluate(e, none);
  EXPECT_EQ(r["python"].status, CheckStatus::kFail);
  EXPECT_THAT(r["python"].detail, StartsWith("python3 not found on the PATH"));
  EXPECT_EQ(r["import:numpy"].status, CheckStatus::kSkip);
  e.imports.clear();
  e.python_required = false;
  EXPECT_EQ(evaluate(e, none)["python"].status, CheckStatus::kWarn);
  r = evaluate(expectation(), with("python_version", "python_error=exit 1: bad interpreter"));
  EXPECT_EQ(r["python"].status, CheckStatus::kFail);
  EXPECT_EQ(r["python"].detail, "python3 (/usr/bin/python3) does not run: exit 1: bad interpreter");
}

TEST(Check, WorkdirAndDisk) {
  HostExpectation e = expectation();
  auto r = evaluate(e, with("workdir", "workdir=unwritable Read-only file system"));
  EXPECT_EQ(r["workdir"].status, CheckStatus::kFail);
  EXPECT_EQ(r["workdir"].detail, "cannot create a file in /data/job: Read-only file system");
  EXPECT_EQ(r["disk"].status, CheckStatus::kPass);
  r = evaluate(e, with("workdir", "workdir=missing"));
  EXPECT_EQ(r["workdir"].status, CheckStatus::kFail);
  EXPECT_THAT(r["workdir"].detail, StartsWith("/data/job does not exist"));
  EXPECT_EQ(r["disk"].status, CheckStatus::kSkip);
  EXPECT_EQ(evaluate(e, with("workdir", "workdir=notdir"))["workdir"].detail,
            "/data/job is not a directory");
  EXPECT_EQ(evaluate(e, with("workdir", "workdir=noaccess"))["workdir"].status, CheckStatus::kFail);
  r = evaluate(e, with("disk_kb", "disk_kb=524288"));
  EXPECT_EQ(r["disk"].status, CheckStatus::kWarn);
  EXPECT_EQ(r["disk"].detail, "only 512.0 MiB free in /data/job (below 1 GiB)");
  EXPECT_EQ(evaluate(e, with("disk_kb", "disk_kb="))["disk"].status, CheckStatus::kWarn);
}

TEST(Check, ClockThresholds) {
  HostExpectation e = expectation();
  auto at = [&](const std::string& remote) {
    return evaluate(e, with("clock", "clock=" + remote))["clock"];
  };
  EXPECT_EQ(at("1700000000.6").status, CheckStatus::kPass);  // +0.35 s
  EXPECT_EQ(at("1700000000.9").status, CheckStatus::kWarn);  // +0.65 s
  EXPECT_EQ(at("1699999999.0").status, CheckStatus::kWarn);  // -1.25 s
  EXPECT_EQ(at("1700000006.0").status, CheckStatus::kFail);  // +5.75 s
  EXPECT_EQ(at("1699999990.0").status, CheckStatus::kFail);
  EXPECT_EQ(at("1700000006.0").detail,
            "+5.750 s (±0.050 s) from the launcher's clock: more than 5 s");
  EXPECT_EQ(at("1700000000.%N").detail, "-0.250 s (±1.050 s) from the launcher's clock");
  EXPECT_EQ(at("garbage").status, CheckStatus::kWarn);
  // The clock line never came back: the probe was cut short.
  EXPECT_EQ(evaluate(e, kHealthy, ClockSample{1, 0})["clock"].status, CheckStatus::kFail);
}

TEST(Check, RouteToTheMaster) {
  HostExpectation e = expectation();
  auto r = evaluate(e, with("route", "route=local 198.18.1.10 dev lo src 198.18.1.10 uid 0"));
  EXPECT_EQ(r["route"].status, CheckStatus::kPass);
  EXPECT_EQ(r["route"].value, "local");
  r = evaluate(e, with("route", "route=10.1.0.1 via 10.0.0.254 dev ib0 src 10.0.0.5 uid 0"));
  EXPECT_EQ(r["route"].detail, "to 198.18.1.10 via ib0 (source 10.0.0.5), gateway 10.0.0.254");
  r = evaluate(e, with("route", "route=RTNETLINK answers: Network is unreachable"));
  EXPECT_EQ(r["route"].status, CheckStatus::kFail);
  EXPECT_EQ(r["route"].detail,
            "no route to the master 198.18.1.10: RTNETLINK answers: Network is unreachable");
  r = evaluate(e, with("route", "route_error=no ip command"));
  EXPECT_EQ(r["route"].status, CheckStatus::kWarn);
}

TEST(Check, StacksSayWhatStackDumpsWillShow) {
  HostExpectation e = expectation();
  auto r = evaluate(e, kHealthy);
  EXPECT_EQ(r["stacks"].status, CheckStatus::kPass);
  EXPECT_EQ(r["stacks"].value, "python+gdb");
  EXPECT_EQ(r["stacks"].detail,
            "Python stacks (faulthandler on SIGUSR2); native stacks (/usr/bin/gdb)");
  r = evaluate(e, with("stack_gdb", "stack_gdb="));
  EXPECT_EQ(r["stacks"].status, CheckStatus::kPass);
  EXPECT_EQ(r["stacks"].value, "python");
  EXPECT_EQ(r["stacks"].detail,
            "Python stacks (faulthandler on SIGUSR2); no native stacks: gdb (with timeout) is not "
            "installed");
  // Yama lets only root attach to processes that are not its children (scope 1, 2); nobody at 3.
  r = evaluate(e, with("uid", "uid=1000"));
  EXPECT_EQ(r["stacks"].value, "python");
  EXPECT_THAT(r["stacks"].detail, HasSubstr("gdb may not attach (kernel.yama.ptrace_scope=1)"));
  r = evaluate(e, with("ptrace_scope", "ptrace_scope=3"));
  EXPECT_EQ(r["stacks"].value, "python");
  r = evaluate(e, with("uid", "uid=1000", with("ptrace_scope", "ptrace_scope=")));
  EXPECT_EQ(r["stacks"].value, "python+gdb");
  // Without the interpreter: native stacks, else the /proc state only.
  r = evaluate(e, with("python_version", "", with("python_path", "python_path=")));
  EXPECT_EQ(r["stacks"].status, CheckStatus::kWarn);
  EXPECT_EQ(r["stacks"].detail,
            "no Python stacks (no working python3); native stacks (/usr/bin/gdb)");
  r = evaluate(e, with("stack_gdb", "stack_gdb=", with("python_path", "python_path=")));
  EXPECT_EQ(r["stacks"].status, CheckStatus::kWarn);
  EXPECT_EQ(r["stacks"].detail,
            "no Python stacks (no working python3); no native stacks: gdb (with timeout) is not "
            "installed; stack shows the /proc state only");
  // A probe cut off before these lines.
  r = evaluate(e, with("stack_gdb", ""));
  EXPECT_EQ(r["stacks"].status, CheckStatus::kFail);
}

TEST(Check, TruncatedProbeFailsWhatItCouldNotDecide) {
  HostExpectation e = expectation();
  e.imports = {"numpy"};
  std::string text = kHealthy;
  text = text.substr(0, text.find("workdir="));
  ProbeFacts f = parse_probe(text);
  f.values.emplace_back("probe_error", "the probe ended early: no answer within 150 s");
  auto r = by_name(evaluate_probe(e, f, kClock));
  EXPECT_EQ(r["os"].status, CheckStatus::kPass);
  EXPECT_EQ(r["devices"].status, CheckStatus::kPass);
  for (const char* n : {"workdir", "disk", "python", "import:numpy", "route"}) {
    EXPECT_EQ(r[n].status, CheckStatus::kFail) << n;
    EXPECT_EQ(r[n].detail, "the probe ended early: no answer within 150 s") << n;
  }
  // Nothing at all came back.
  r = evaluate(e, "");
  for (const auto& [name, c] : r) EXPECT_EQ(c.status, CheckStatus::kFail) << name;
}

// ---- script checksums ---------------------------------------------------------------------

TEST(Check, ScriptAgainstTheLauncherCopy) {
  std::vector<HostExpectation> es(4, expectation());
  for (auto& e : es) e.script = "train.py";
  ProbeFacts same = parse_probe("workdir=writable\nscript_sha256=aaaa1111\n");
  ProbeFacts other = parse_probe("workdir=writable\nscript_sha256=bbbb2222\n");
  ProbeFacts gone = parse_probe("workdir=writable\nscript=missing\n");
  ProbeFacts nowd = parse_probe("workdir=missing\n");
  auto r = script_checks(es, {&same, &other, &gone, &nowd}, std::string("aaaa1111"), "");
  EXPECT_EQ(r[0].status, CheckStatus::kPass);
  EXPECT_EQ(r[0].detail, "train.py in /data/job: sha256 aaaa1111 same as the launcher's copy");
  EXPECT_EQ(r[1].status, CheckStatus::kFail);
  EXPECT_EQ(r[1].detail,
            "train.py in /data/job: sha256 bbbb2222 differs from the launcher's aaaa1111");
  EXPECT_EQ(r[2].status, CheckStatus::kFail);
  EXPECT_EQ(r[2].detail, "train.py in /data/job not found");
  EXPECT_EQ(r[3].status, CheckStatus::kSkip);
}

TEST(Check, ScriptWithoutLauncherCopyUsesTheMajority) {
  std::vector<HostExpectation> es(3, expectation());
  for (auto& e : es) e.script = "/opt/job/train.py";
  ProbeFacts a = parse_probe("script_sha256=aaaa\n");
  ProbeFacts b = parse_probe("script_sha256=bbbb\n");
  auto r = script_checks(es, {&a, &b, &a}, std::nullopt, "cannot open /opt/job/train.py: gone");
  EXPECT_EQ(r[0].status, CheckStatus::kPass);
  EXPECT_THAT(r[0].detail, HasSubstr("2 of 3 hosts; no launcher copy"));
  EXPECT_EQ(r[1].status, CheckStatus::kFail);
  EXPECT_EQ(r[1].detail,
            "/opt/job/train.py: sha256 bbbb differs from aaaa on 2 other hosts (no launcher copy)");
  EXPECT_EQ(r[2].status, CheckStatus::kPass);
}

TEST(Check, ScriptSkippedWithoutAFile) {
  std::vector<HostExpectation> es(2, expectation());
  es[0].script_note = "no TASK_SCRIPT given";
  ProbeFacts f = parse_probe("end=ok\n");
  auto r = script_checks(es, {&f, nullptr}, std::nullopt, "");
  EXPECT_EQ(r[0].status, CheckStatus::kSkip);
  EXPECT_EQ(r[0].detail, "no TASK_SCRIPT given");
  EXPECT_EQ(r[1].status, CheckStatus::kSkip);
}

TEST(Check, PythonVersionMismatchWarns) {
  CheckReport report;
  for (const char* v : {"3.11.2", "3.11.2", "3.9.18"}) {
    HostReport h;
    h.address = v;
    h.set("python", CheckStatus::kPass, "/usr/bin/python3 " + std::string(v), v);
    report.hosts.push_back(h);
  }
  compare_hosts(report);
  EXPECT_EQ(report.hosts[0].find("python")->status, CheckStatus::kPass);
  EXPECT_EQ(report.hosts[2].find("python")->status, CheckStatus::kWarn);
  EXPECT_EQ(report.hosts[2].find("python")->detail,
            "/usr/bin/python3 3.9.18: differs from 3.11.2 on 2 of 3 hosts");
}

// ---- connections --------------------------------------------------------------------------

std::vector<CheckStatus> statuses(const std::vector<CheckResult>& r) {
  std::vector<CheckStatus> out;
  for (const auto& c : r) out.push_back(c.status);
  return out;
}

TEST(Check, ConnectFailuresLandOnTheRightCheck) {
  using S = CheckStatus;
  using E = ConnectError;
  auto unknown = classify_connect_failure(
      {E::kHostKeyUnknown,
       "unknown host key (not in /c/known_hosts); after checking it, add it with: ssh-keyscan -p "
       "22 198.18.1.12 >> /c/known_hosts"});
  EXPECT_EQ(statuses(unknown), (std::vector<S>{S::kPass, S::kSkip, S::kFail}));
  EXPECT_EQ(unknown[0].name, "reachable");
  EXPECT_EQ(unknown[2].name, "host_key");
  EXPECT_THAT(unknown[2].detail, HasSubstr("ssh-keyscan -p 22 198.18.1.12 >> /c/known_hosts"));
  EXPECT_EQ(statuses(classify_connect_failure(
                {E::kHostKeyChanged, "host key CHANGED (does not match x)"})),
            (std::vector<S>{S::kPass, S::kSkip, S::kFail}));
  EXPECT_EQ(statuses(classify_connect_failure({E::kHostKeyUnverifiable, "cannot add its key"})),
            (std::vector<S>{S::kPass, S::kSkip, S::kFail}));
  EXPECT_EQ(statuses(classify_connect_failure(
                {E::kAuthDenied, "authentication denied (publickey) for user root"})),
            (std::vector<S>{S::kPass, S::kFail, S::kPass}));
  EXPECT_EQ(statuses(classify_connect_failure(
                {E::kAuthTimedOut, "timed out after 5 s (during authentication)"})),
            (std::vector<S>{S::kPass, S::kFail, S::kPass}));
  auto identity =
      classify_connect_failure({E::kIdentityUnreadable, "cannot load identity file /k"});
  EXPECT_EQ(statuses(identity), (std::vector<S>{S::kPass, S::kFail, S::kPass}));
  EXPECT_EQ(identity[1].detail, "cannot load identity file /k");
  // libssh's own words are classified by the pool (classify_libssh_error).
  auto refused =
      classify_connect_failure({classify_libssh_error("Connection refused"), "Connection refused"});
  EXPECT_EQ(statuses(refused), (std::vector<S>{S::kFail, S::kSkip, S::kSkip}));
  EXPECT_EQ(refused[0].detail, "Connection refused");
  EXPECT_EQ(statuses(classify_connect_failure({E::kTimedOut, "timed out after 5 s (no answer)"})),
            (std::vector<S>{S::kFail, S::kSkip, S::kSkip}));
  EXPECT_EQ(statuses(classify_connect_failure({E::kUnreachable, "No route to host"})),
            (std::vector<S>{S::kFail, S::kSkip, S::kSkip}));
  EXPECT_EQ(statuses(classify_connect_failure({E::kOther, "cannot parse ssh config /c"})),
            (std::vector<S>{S::kFail, S::kSkip, S::kSkip}));
}

TEST(Check, ConnectedHostsWarnOnUnverifiedKeys) {
  std::vector<ConnectWarning> warnings = {
      {1, ConnectWarningKind::kHostKeyAdded, "new host key added to /k"},
      {2, ConnectWarningKind::kHostKeyNotVerified, "host key NOT verified (not in /k)"}};
  auto ok = connected_checks(0, warnings);
  EXPECT_EQ(statuses(ok), (std::vector<CheckStatus>(3, CheckStatus::kPass)));
  auto warned = connected_checks(1, warnings);
  EXPECT_EQ(warned[2].status, CheckStatus::kWarn);
  EXPECT_EQ(warned[2].detail, "new host key added to /k");
  EXPECT_EQ(connected_checks(2, warnings)[2].detail, "host key NOT verified (not in /k)");
}

TEST(Check, AHostDeniedAfterAnUnverifiedKeyDoesNotCallItVerified) {
  std::vector<ConnectWarning> warnings = {
      {2, ConnectWarningKind::kHostKeyNotVerified, "host key NOT verified (not in /k)"}};
  ConnectFailure denied{ConnectError::kAuthDenied, "authentication denied (publickey)"};
  auto unverified = classify_connect_failure(denied, 2, warnings);
  EXPECT_EQ(unverified[1].status, CheckStatus::kFail);
  EXPECT_EQ(unverified[2].status, CheckStatus::kWarn);
  EXPECT_EQ(unverified[2].detail, "host key NOT verified (not in /k)");
  auto verified = classify_connect_failure(denied, 0, warnings);
  EXPECT_EQ(verified[2].status, CheckStatus::kPass);
  EXPECT_EQ(verified[2].detail, "host key verified (known_hosts)");
}

// ---- the master port ----------------------------------------------------------------------

TEST(Check, PortResults) {
  auto r = port_result("198.18.1.10:8118", std::string("reach=ok\n"), false);
  EXPECT_EQ(r.status, CheckStatus::kPass);
  EXPECT_EQ(r.detail, "198.18.1.10:8118 accepts connections");
  r = port_result("198.18.1.10:8118", std::string("reach=ok\n"), true);
  EXPECT_EQ(r.detail, "port free on the master; 198.18.1.10:8118 accepts connections");
  r = port_result("198.18.1.10:8118", std::string("reach=fail Connection refused\n"), false);
  EXPECT_EQ(r.status, CheckStatus::kFail);
  EXPECT_EQ(r.detail, "cannot connect to 198.18.1.10:8118: Connection refused");
  r = port_result("m:1", std::string("reach=untested no python or bash on this host\n"), false);
  EXPECT_EQ(r.status, CheckStatus::kWarn);
  EXPECT_EQ(port_result("m:1", std::nullopt, false).status, CheckStatus::kFail);
}

TEST(Check, ListenerRunsLocally) {
  if (!have("python3")) GTEST_SKIP() << "no python3";
  int port;
  {
    Listening probe;
    port = probe.port;
  }
  // stdin at EOF: the listener binds, says so, and ends at once. Its time limits (here and below)
  // are generous: python3's start alone can take seconds on a loaded machine.
  std::string out = run_sh(listener_command("no-such-python", port, 30), "");
  EXPECT_EQ(out, "listening\naccepted 0\n");
  Listening busy;
  EXPECT_EQ(run_sh(listener_command("python3", busy.port, 30), ""),
            "in_use Address already in use\n");
}

TEST(Check, ConnectCommandRunsLocally) {
  if (!have("python3")) GTEST_SKIP() << "no python3";
  Listening open;
  EXPECT_EQ(run_sh(connect_command("python3", "127.0.0.1", open.port, 30)), "reach=ok\n");
  int closed;
  {
    Listening gone;
    closed = gone.port;
  }
  EXPECT_EQ(run_sh(connect_command("python3", "127.0.0.1", closed, 30)),
            "reach=fail Connection refused\n");
}

// ---- the probe script itself ----------------------------------------------------------------

TEST(Check, ProbeRunsLocally) {
  if (!have("python3")) GTEST_SKIP() << "no python3";
  test::TempDir tmp;
  const std::string& wd = tmp.path();
  std::ofstream(wd + "/job's script.py") << "print('hi')\n";
  std::ofstream(wd + "/localmod.py") << "X = 1\n";
  HostExpectation e = expectation();
  e.workdir = wd;
  e.script = "job's script.py";
  e.imports = {"localmod", "no_such_module_xyz", "os.path"};
  e.env = {{"CHECK_TEST", "a b'c"}};
  e.master_ip = "127.0.0.1";
  std::string out = run_sh(probe_command(e));
  ProbeFacts f = parse_probe(out);
  EXPECT_EQ(f.get("end"), "ok") << out;
  EXPECT_EQ(f.get("sync"), "1");
  EXPECT_TRUE(parse_remote_time(f.get("clock")).has_value()) << f.get("clock");
  EXPECT_EQ(f.get("workdir"), "writable");
  std::string error;
  EXPECT_EQ(f.get("script_sha256"), sha256_file(wd + "/job's script.py", error));
  EXPECT_EQ(f.all("import_ok"), (std::vector<std::string>{"localmod", "os.path"}));
  EXPECT_THAT(f.get("import_fail"), StartsWith("no_such_module_xyz ModuleNotFoundError"));
  EXPECT_FALSE(f.get("python_version").empty());
  EXPECT_FALSE(f.get("cpus_allowed").empty());
  EXPECT_TRUE(f.has("numa_nodes"));
  EXPECT_FALSE(f.get("disk_kb").empty());
  // The probe leaves nothing behind in the workdir.
  EXPECT_EQ(std::system(("test $(ls -A '" + wd + "' | wc -l) -eq 2").c_str()), 0);
  // A workdir below a regular file.
  e.workdir = wd + "/localmod.py/sub";
  e.imports.clear();
  f = parse_probe(run_sh(probe_command(e)));
  EXPECT_EQ(f.get("workdir"), "missing");
  EXPECT_EQ(f.get("end"), "ok");
}

TEST(Check, ProbeCommandQuotesEveryWord) {
  HostExpectation e = expectation();
  e.workdir = "/w/$(touch x)";
  e.env = {{"A", "`id`"}};
  e.imports = {"numpy"};
  std::string cmd = probe_command(e);
  EXPECT_THAT(cmd, StartsWith("exec 'env' '--' 'A=`id`' '/bin/sh' '-c' '"));
  EXPECT_THAT(cmd,
              HasSubstr("'msrun-ssh-check' '/w/$(touch x)' 'python3' '' '198.18.1.10' 'numpy'"));
}

// ---- imports and names --------------------------------------------------------------------

TEST(Check, ValidateImports) {
  validate_imports({"numpy", "mindspore.nn", "_private", "a1.b2"});
  for (const char* bad : {"", "1abc", "a..b", "a.", ".a", "a-b", "a b", "os;rm"})
    EXPECT_THAT(test::error_of([&] { validate_imports({bad}); }),
                StartsWith(std::string("--import=") + bad + ": not a Python module"));
}

TEST(Check, CheckNamesInColumnOrder) {
  EXPECT_EQ(
      check_names({"numpy"}),
      (std::vector<std::string>{"reachable", "authenticated", "host_key", "os", "cpus", "numa",
                                "devices", "python", "import:numpy", "script", "workdir", "clock",
                                "disk", "master_port", "route", "stacks"}));
}

// ---- rendering ----------------------------------------------------------------------------

CheckReport sample_report() {
  CheckReport r;
  r.master = "198.18.1.10:8118";
  HostReport a;
  a.address = "198.18.1.10";
  a.is_master = true;
  a.set("reachable", CheckStatus::kPass, "the SSH server answered");
  a.set("python", CheckStatus::kPass, "/usr/bin/python3 3.11.2", "3.11.2");
  a.set("master_port", CheckStatus::kFail,
        "port 8118 in use on the master: Address already in use");
  HostReport b;
  b.address = "198.18.1.11";
  b.node_rank = 1;
  b.set("reachable", CheckStatus::kPass, "the SSH server answered");
  b.set("python", CheckStatus::kWarn, "3.9.1: differs", "3.9.1");
  b.set("master_port", CheckStatus::kSkip, "not tested");
  r.hosts = {a, b};
  return r;
}

TEST(Check, SummaryLine) {
  CheckReport r = sample_report();
  EXPECT_EQ(summary_line(r), "check: 2 hosts, 3 passed, 1 failed, 1 warning, 1 skipped");
  CheckTally t = tally(r);
  EXPECT_EQ(t.hosts, 2);
  EXPECT_EQ(t.passed, 3);
  r.hosts[1].set("master_port", CheckStatus::kPass, "ok");
  r.hosts[1].set("python", CheckStatus::kWarn, "x");
  r.hosts[1].set("os", CheckStatus::kWarn, "y");
  EXPECT_EQ(summary_line(r), "check: 2 hosts, 4 passed, 1 failed, 2 warnings");
}

TEST(Check, TableLayout) {
  EXPECT_EQ(format_table(sample_report(), false),
            "check: 2 hosts, 3 passed, 1 failed, 1 warning, 1 skipped\n"
            "\n"
            "host          reach  python  port\n"
            "198.18.1.10*  ok     3.11.2  FAIL\n"
            "198.18.1.11   ok     WARN    -\n"
            "* master, scheduler at 198.18.1.10:8118\n"
            "\n"
            "failed:\n"
            "  198.18.1.10  master_port: port 8118 in use on the master: Address already in use\n"
            "\n"
            "warnings:\n"
            "  198.18.1.11  python: 3.9.1: differs\n");
}

TEST(Check, TableColorsOnlyProblems) {
  std::string t = format_table(sample_report(), true);
  EXPECT_THAT(t, HasSubstr("\x1b[1;31mFAIL\x1b[0m"));
  EXPECT_THAT(t, HasSubstr("\x1b[33mWARN\x1b[0m"));
  // Padding is computed on the visible text: the row still lines up.
  EXPECT_THAT(t, HasSubstr("198.18.1.11   ok     \x1b[33mWARN\x1b[0m    -\n"));
}

TEST(Check, TableTruncatesLongValues) {
  CheckReport r = sample_report();
  r.hosts[0].set("os", CheckStatus::kPass, "d", "6.18.44-very-long-kernel-name");
  EXPECT_THAT(format_table(r, false), HasSubstr("6.18.44-very-~"));
}

TEST(Check, JsonDocument) {
  nlohmann::json doc = nlohmann::json::parse(format_json(sample_report()));
  EXPECT_EQ(doc["summary"]["hosts"], 2);
  EXPECT_EQ(doc["summary"]["failed"], 1);
  EXPECT_EQ(doc["summary"]["ok"], false);
  EXPECT_EQ(doc["master"], "198.18.1.10:8118");
  auto& m = doc["hosts"]["198.18.1.10"];
  EXPECT_EQ(m["master"], true);
  EXPECT_EQ(m["node_rank"], 0);
  EXPECT_EQ(m["checks"]["master_port"]["status"], "fail");
  EXPECT_EQ(m["checks"]["python"]["value"], "3.11.2");
  EXPECT_EQ(doc["hosts"]["198.18.1.11"]["checks"]["master_port"]["status"], "skip");
  // Hosts keep the report's order.
  EXPECT_EQ(doc["hosts"].begin().key(), "198.18.1.10");
}

TEST(Check, JsonSurvivesInvalidUtf8) {
  CheckReport r = sample_report();
  r.hosts[0].set("os", CheckStatus::kPass, std::string("bad \xff byte"));
  nlohmann::json doc = nlohmann::json::parse(format_json(r));
  EXPECT_EQ(doc["hosts"]["198.18.1.10"]["checks"]["os"]["detail"], "bad \xef\xbf\xbd byte");
}

TEST(Check, ExitCodeIgnoresWarningsAndSkips) {
  CheckReport r = sample_report();
  EXPECT_EQ(check_exit_code(r), 1);
  r.hosts[0].set("master_port", CheckStatus::kPass, "ok");
  EXPECT_EQ(check_exit_code(r), 0);  // one warning and one skip remain
}

TEST(Check, EmptyReportHasEveryCheckSkipped) {
  Options o;
  o.command = Command::kCheck;
  Plan p = small_plan(o, {plain_host("a", 1), plain_host("b", 2)});
  CheckReport r = empty_report(p, {"numpy"}, "not connected");
  ASSERT_EQ(r.hosts.size(), 2u);
  EXPECT_EQ(r.master, "198.18.1.10:8118");
  EXPECT_TRUE(r.hosts[0].is_master);
  EXPECT_EQ(r.hosts[1].node_rank, 1);
  EXPECT_EQ(r.hosts[1].checks.size(), check_names({"numpy"}).size());
  EXPECT_EQ(r.hosts[1].find("import:numpy")->status, CheckStatus::kSkip);
}

// Two entries on one address are two hosts of the report, each named with its port as the run
// names them: the collective check's failed hosts (the run's names) find theirs, and the JSON
// keeps both.
TEST(Check, EntriesOnOneAddressAreReportedApart) {
  Options o;
  o.command = Command::kCheck;
  Host first = plain_host("a", 1), second = plain_host("a", 1);
  first.port = 2202;
  second.port = 2203;
  Plan p = small_plan(o, {first, second, plain_host("b", 1)});
  CheckReport r = empty_report(p, {}, "not connected");
  ASSERT_EQ(r.hosts.size(), 3u);
  EXPECT_EQ(r.hosts[0].address, "a:2202");
  EXPECT_EQ(r.hosts[1].address, "a:2203");
  EXPECT_EQ(r.hosts[2].address, "b");
  EXPECT_EQ(expectation_for(p, 1, o).address, "a:2203");
  nlohmann::json j = nlohmann::json::parse(format_json(r));
  EXPECT_TRUE(j["hosts"].contains("a:2202") && j["hosts"].contains("a:2203")) << j.dump();
  CollectiveResult failed;
  failed.ran = true;
  failed.status = 1;
  failed.cause = "rank 1 on a:2203 failed: exit 1";
  failed.failed_hosts = {"a:2203"};
  evaluate_collective(failed, r);
  EXPECT_EQ(r.hosts[1].find("allreduce")->status, CheckStatus::kFail);
  EXPECT_EQ(r.hosts[0].find("allreduce")->status, CheckStatus::kSkip);
  EXPECT_EQ(check_exit_code(r), 1);
}

// ---- the session on connected hosts (ReplyTransport: scripted replies, a fake clock) --------

struct RemoteChecks {
  Options options;
  Plan plan;
  std::vector<HostExpectation> es;
  CheckReport report;
  std::vector<ProbeFacts> facts;
  ReplyTransport t;

  RemoteChecks() {
    options.command = Command::kCheck;
    options.task_script = "true";
    plan = small_plan(options, {plain_host("a", 1), plain_host("b", 1)});
    for (size_t h = 0; h < plan.hosts.size(); ++h) es.push_back(expectation_for(plan, h, options));
    report = empty_report(plan, {}, "not connected");
    facts.resize(plan.hosts.size());
  }

  // A probe that asks for the launcher's answer, then reads the clock (now) and prints the rest.
  static Reply probe() {
    timespec ts{};
    clock_gettime(CLOCK_REALTIME, &ts);
    std::string text = with("clock", fmt::format("clock={}.{:09}", ts.tv_sec, ts.tv_nsec));
    size_t clock = text.find("clock=");
    return Reply{.output = {{0.001, text.substr(0, clock)}},
                 .exit_at = 0.002,
                 .until_eof = true,
                 .after_eof = {{0.001, text.substr(clock)}}};
  }

  void healthy_except(size_t sick_host, const Reply& sick_probe) {
    t.on("msrun-ssh-listen", Reply{.output = {{0.001, "listening\n"}},
                                   .exit_at = 0.002,
                                   .until_eof = true,
                                   .after_eof = {{0.001, "accepted 2\n"}}});
    t.on("msrun-ssh-connect", Reply{.output = {{0.003, "reach=ok\n"}}});
    t.on("msrun-ssh-check", sick_probe, sick_host);
    t.on("msrun-ssh-check", probe());
  }

  void run() { check_connected_hosts(t, {0, 1}, es, options, 0, report, facts); }

  const CheckResult& result(size_t h, const std::string& name) {
    return *report.hosts[h].find(name);
  }
};

TEST(CheckSession, EveryHostAnswers) {
  RemoteChecks s;
  s.healthy_except(1, RemoteChecks::probe());
  s.run();
  for (size_t h = 0; h < 2; ++h) {
    EXPECT_EQ(s.facts[h].get("end"), "ok");
    for (const char* name : {"os", "python", "workdir", "clock", "disk"})
      EXPECT_EQ(s.result(h, name).status, CheckStatus::kPass)
          << h << " " << name << ": " << s.result(h, name).detail;
  }
  EXPECT_EQ(s.result(0, "master_port").detail,
            "port free on the master; 198.18.1.10:8118 accepts connections");
  EXPECT_EQ(s.result(0, "master_port").status, CheckStatus::kPass);
  EXPECT_EQ(s.result(1, "master_port").detail, "198.18.1.10:8118 accepts connections");
  // Each probe got its clock answer and EOF; the listener its EOF once both tests were done.
  for (int n = 0; n < 2; ++n) {
    const auto& probe = s.t.channel(s.t.find("msrun-ssh-check", n));
    EXPECT_EQ(probe.written, "\n");
    EXPECT_GE(probe.eof_ms, 0);
  }
  ChannelId listener = s.t.find("msrun-ssh-listen");
  EXPECT_EQ(s.t.execs[listener].host, 0u);
  EXPECT_EQ(s.t.channel(listener).eof_ms, s.t.execs[s.t.find("msrun-ssh-connect", 1)].at_ms + 10);
  EXPECT_TRUE(s.t.kills.empty());
}

TEST(CheckSession, AProbeThatNeverAnswersFailsAtTheDeadline) {
  RemoteChecks s;
  s.healthy_except(1, Reply{.output = {{0.001, "Welcome\n"}}, .exit_at = -1});
  s.run();
  EXPECT_EQ(s.result(0, "os").status, CheckStatus::kPass);
  EXPECT_EQ(s.result(1, "os").status, CheckStatus::kFail);
  EXPECT_EQ(s.result(1, "os").detail, "the probe ended early: no answer within 150 s");
  EXPECT_EQ(s.result(1, "master_port").status, CheckStatus::kPass);
  EXPECT_EQ(s.t.now_ms(), 150000);
  ASSERT_EQ(s.t.kills.size(), 1u);
  EXPECT_EQ(s.t.kills[0].channel, s.t.find("msrun-ssh-check", 1));
}

TEST(CheckSession, AProbeThatFailsSaysHow) {
  RemoteChecks s;
  s.healthy_except(1, Reply{.errors = {{0.001, "sh: 1: cd: can't cd\n"}}, .status = 2});
  s.run();
  EXPECT_EQ(s.result(1, "os").detail,
            "the probe ended early: exited with status 2: sh: 1: cd: can't cd");
}

TEST(CheckSession, AListenerThatDoesNotEndIsLeftAfterItsGrace) {
  RemoteChecks s;
  s.t.on("msrun-ssh-listen", Reply{.output = {{0.001, "listening\n"}}, .exit_at = -1});
  s.healthy_except(1, RemoteChecks::probe());
  s.run();
  EXPECT_EQ(s.result(0, "master_port").status, CheckStatus::kWarn);
  EXPECT_THAT(s.result(0, "master_port").detail,
              HasSubstr("; the listener did not confirm its end (it ends by itself at its "
                        "deadline)"));
  EXPECT_EQ(s.result(1, "master_port").status, CheckStatus::kPass);
  // Given up 5 s after its EOF (the session wakes up once a second), not at the deadline.
  double eof = s.t.channel(s.t.find("msrun-ssh-listen")).eof_ms;
  EXPECT_GT(s.t.now_ms(), eof + 5000);
  EXPECT_LE(s.t.now_ms(), eof + 6000);
}

TEST(CheckSession, APortInUseSkipsTheOtherHosts) {
  RemoteChecks s;
  s.t.on("msrun-ssh-listen",
         Reply{.output = {{0.001, "in_use Address already in use\n"}}, .status = 3});
  s.healthy_except(1, RemoteChecks::probe());
  s.run();
  EXPECT_EQ(s.result(0, "master_port").detail,
            "port 8118 in use on the master: Address already in use");
  EXPECT_EQ(s.result(1, "master_port").status, CheckStatus::kSkip);
  EXPECT_EQ(s.t.find("msrun-ssh-connect"), -1);
}

TEST(CheckSession, ALostHostIsNamed) {
  RemoteChecks s;
  s.healthy_except(1, Reply{.output = {{0.001, "sync=1\n"}}, .exit_at = -1});
  s.t.lose(1, 0.5, "Socket error: Connection reset by peer");
  s.run();
  EXPECT_EQ(s.result(1, "os").detail,
            "the probe ended early: connection lost: Socket error: Connection reset by peer");
}

}  // namespace
}  // namespace msrun_ssh
