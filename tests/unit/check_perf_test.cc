// `check --perf` (src/check/perf.cc, src/remote/perf.py): the accelerator tools' outputs (fixtures
// in their documented formats), the node test's answer, the verdicts, the options, and the
// program itself run here.
#include <gtest/gtest.h>

#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "msrun_ssh/check.h"
#include "msrun_ssh/cli.h"
#include "test_util.h"

namespace msrun_ssh {
namespace {

namespace fs = std::filesystem;

// `nvidia-smi --query-gpu=... --format=csv,noheader,nounits` (the fields of parse_nvidia_smi):
// one healthy idle GPU, one with uncorrected ECC errors, one hot and busy held down by the
// hardware, one that reports nothing of ECC.
const char* kNvidia =
    "0, NVIDIA A100-SXM4-80GB, 34, 0, 210, 1410, 0, Not Active\n"
    "1, NVIDIA A100-SXM4-80GB, 36, 0, 210, 1410, 3, Not Active\n"
    "2, NVIDIA A100-SXM4-80GB, 88, 97, 1005, 1410, 0, Active\n"
    "3, Tesla T4, 40, 0, 300, 1590, [N/A], [Not Supported]\n";

// `npu-smi info` of an Atlas 800T A2 (910B): two NPUs, one in a warning state, and one process
// already on NPU 1.
const char* kNpu =
    "+---------------------------------------------------------------------------------------------"
    "---+\n"
    "| npu-smi 23.0.rc3                 Version: 23.0.rc3                                          "
    "   |\n"
    "+---------------------------+---------------+-------------------------------------------------"
    "---+\n"
    "| NPU   Name                | Health        | Power(W)    Temp(C)           "
    "Hugepages-Usage(page)|\n"
    "| Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)     "
    "   |\n"
    "+===========================+===============+================================================="
    "===+\n"
    "| 0     910B3               | OK            | 93.5        37                0    / 0          "
    "   |\n"
    "| 0                         | 0000:C1:00.0  | 0           0    / 0          3161 / 65536      "
    "   |\n"
    "+===========================+===============+================================================="
    "===+\n"
    "| 1     910B3               | Warning       | 96.1        41                0    / 0          "
    "   |\n"
    "| 0                         | 0000:C2:00.0  | 35          0    / 0          9000 / 65536      "
    "   |\n"
    "+===========================+===============+================================================="
    "===+\n"
    "+---------------------------+---------------+-------------------------------------------------"
    "---+\n"
    "| NPU     Chip              | Process id    | Process name             | Process memory(MB)   "
    "   |\n"
    "+===========================+===============+================================================="
    "===+\n"
    "| No running processes found in NPU 0                                                         "
    "   |\n"
    "+===========================+===============+================================================="
    "===+\n"
    "| 1       0                 | 41234         | python3.9                | 5800                 "
    "   |\n"
    "+===========================+===============+================================================="
    "===+\n";

TEST(PerfAccel, NvidiaSmiCsv) {
  std::string error;
  auto d = parse_nvidia_smi(kNvidia, error);
  EXPECT_EQ(error, "");
  ASSERT_EQ(d.size(), 4u);
  EXPECT_EQ(d[0].id, "0");
  EXPECT_EQ(d[0].name, "NVIDIA A100-SXM4-80GB");
  EXPECT_EQ(d[0].temp_c, 34);
  EXPECT_EQ(d[0].util_pct, 0);
  EXPECT_EQ(d[0].sm_mhz, 210);
  EXPECT_EQ(d[0].max_sm_mhz, 1410);
  EXPECT_EQ(d[0].ecc_uncorrected, 0);
  EXPECT_FALSE(d[0].hw_slowdown);
  EXPECT_EQ(d[1].ecc_uncorrected, 3);
  EXPECT_TRUE(d[2].hw_slowdown);
  EXPECT_EQ(d[2].util_pct, 97);
  EXPECT_FALSE(d[3].ecc_uncorrected.has_value());
  EXPECT_FALSE(d[3].hw_slowdown);
  // A count beyond any integer (a broken tool) is the largest one, still a failing count.
  auto big = parse_nvidia_smi("0, X, 30, 0, 210, 1410, 3" + std::string(90, '1') + ", Not Active\n",
                              error);
  ASSERT_EQ(big.size(), 1u);
  EXPECT_EQ(big[0].ecc_uncorrected, std::numeric_limits<long>::max());
  parse_nvidia_smi("0, only two\n", error);
  EXPECT_EQ(error, "unreadable nvidia-smi line: 0, only two");
}

TEST(PerfAccel, NpuSmiInfo) {
  std::string error;
  auto d = parse_npu_smi(kNpu, error);
  EXPECT_EQ(error, "");
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].id, "0/0");
  EXPECT_EQ(d[0].name, "910B3");
  EXPECT_EQ(d[0].health, "OK");
  EXPECT_EQ(d[0].temp_c, 37);
  EXPECT_EQ(d[0].util_pct, 0);
  EXPECT_TRUE(d[0].processes.empty());
  EXPECT_EQ(d[1].health, "Warning");
  EXPECT_EQ(d[1].util_pct, 35);
  EXPECT_EQ(d[1].processes, std::vector<std::string>{"41234 python3.9"});
  parse_npu_smi("npu-smi: command failed\n", error);
  EXPECT_EQ(error, "npu-smi info listed no NPU");
}

// perf.py's answer for a host: `each` per CPU, `mem` GB/s, /w at (write, read) MB/s.
std::string answer(const std::vector<double>& each, double mem, double write = 300,
                   double read = 900, const std::string& accel = "null") {
  std::string cpus;
  for (double v : each) cpus += (cpus.empty() ? "" : ", ") + std::to_string(v);
  return "{\"cpus\": " + std::to_string(each.size()) + ", \"kernel\": \"numpy\", \"cpu_each\": [" +
         cpus + "], \"mem_gbps\": " + std::to_string(mem) +
         ", \"disks\": [{\"path\": \"/w\", \"write_mbps\": " + std::to_string(write) +
         ", \"read_mbps\": " + std::to_string(read) + "}], \"accel\": " + accel + "}\n";
}

CheckReport report_of(size_t n) {
  CheckReport r;
  for (size_t i = 0; i < n; ++i)
    r.hosts.push_back({"10.0.0." + std::to_string(i + 1), 0, false, {}});
  return r;
}

const CheckResult& perf_of(const CheckReport& r, size_t h) { return *r.hosts.at(h).find("perf"); }

TEST(PerfAnswer, ParsesTheProgramsJson) {
  HostPerf p = parse_perf("noise from the rc\n" + answer({900, 880}, 4.5), "");
  EXPECT_EQ(p.error, "");
  EXPECT_EQ(p.cpus, 2);
  EXPECT_EQ(p.kernel, "numpy");
  EXPECT_EQ(p.cpu_each, (std::vector<double>{900, 880}));
  EXPECT_DOUBLE_EQ(p.cpu_median(), 900);
  EXPECT_DOUBLE_EQ(p.mem_gbps, 4.5);
  ASSERT_EQ(p.disks.size(), 1u);
  EXPECT_EQ(p.disks[0].path, "/w");
  EXPECT_EQ(p.disks[0].write_mbps, 300);
  EXPECT_EQ(p.accel_tool, "");
  EXPECT_EQ(parse_perf("{\"error\": \"no python\"}\n", "exit 4").error, "no python");
  EXPECT_EQ(parse_perf("", "connection lost: reset").error, "connection lost: reset");
  EXPECT_EQ(parse_perf("{\"cpus\": 2}", "").error, "no CPU measurement");
  HostPerf g =
      parse_perf(answer({900}, 4, 300, 900,
                        "{\"tool\": \"nvidia-smi\", \"status\": 0, \"out\": \"0, A100, 34, "
                        "0, 210, 1410, 2, Not Active\\n\"}"),
                 "");
  ASSERT_EQ(g.accel.size(), 1u);
  EXPECT_EQ(g.accel[0].ecc_uncorrected, 2);
  HostPerf f = parse_perf(
      answer({900}, 4, 300, 900, "{\"tool\": \"npu-smi\", \"status\": 9, \"out\": \"\"}"), "");
  EXPECT_EQ(f.accel_error, "npu-smi exited 9");
}

TEST(PerfVerdict, OnlyTheSlowHostFails) {
  PerfReport perf;
  perf.hosts = {parse_perf(answer({900, 910}, 5), ""), parse_perf(answer({130, 140}, 0.9), ""),
                parse_perf(answer({880, 905}, 4.8), "")};
  CheckReport r = report_of(3);
  evaluate_perf(perf, r);
  EXPECT_EQ(perf_of(r, 0).status, CheckStatus::kPass);
  EXPECT_EQ(perf_of(r, 2).status, CheckStatus::kPass);
  EXPECT_EQ(perf_of(r, 1).status, CheckStatus::kFail);
  EXPECT_EQ(perf_of(r, 1).detail,
            "CPU at 140 /s per CPU (numpy): below 0.5 x the median 905 /s; memory copy at 0.90 "
            "GB/s: below 0.5 x the median 4.80 GB/s");
  EXPECT_EQ(perf_of(r, 0).value, "910 /s");
  EXPECT_DOUBLE_EQ(perf.median_cpu["numpy"], 905);
}

TEST(PerfVerdict, HostsAllSlowTogetherPass) {
  PerfReport perf;
  perf.hosts = {parse_perf(answer({130}, 1), ""), parse_perf(answer({140}, 1.1), ""), std::nullopt};
  CheckReport r = report_of(3);
  evaluate_perf(perf, r);
  EXPECT_EQ(perf_of(r, 0).status, CheckStatus::kPass);
  EXPECT_EQ(perf_of(r, 1).status, CheckStatus::kPass);
  EXPECT_EQ(r.hosts[2].find("perf"), nullptr);  // not connected: check.cc says so
}

TEST(PerfVerdict, SlowDiskAndFailedTestAreNamed) {
  PerfReport perf;
  perf.hosts = {parse_perf(answer({900}, 5, 300, 900), ""),
                parse_perf(answer({900}, 5, 20, 900), ""),
                parse_perf(answer({900}, 5, 310, 950), ""), parse_perf("", "timed out")};
  CheckReport r = report_of(4);
  evaluate_perf(perf, r);
  EXPECT_EQ(perf_of(r, 1).status, CheckStatus::kFail);
  EXPECT_EQ(perf_of(r, 1).detail, "/w writes at 20 MB/s: below 0.5 x the median 300 MB/s");
  EXPECT_EQ(perf_of(r, 0).status, CheckStatus::kPass);
  EXPECT_EQ(perf_of(r, 3).status, CheckStatus::kFail);
  EXPECT_EQ(perf_of(r, 3).detail, "the node test failed: timed out");
}

TEST(PerfVerdict, AcceleratorsFailOrWarn) {
  auto with = [](const std::string& tool, const std::string& out) {
    std::string escaped;
    for (char c : out) escaped += c == '\n' ? std::string("\\n") : std::string(1, c);
    return parse_perf(
        answer({900}, 5, 300, 900,
               "{\"tool\": \"" + tool + "\", \"status\": 0, \"out\": \"" + escaped + "\"}"),
        "");
  };
  PerfReport perf;
  perf.hosts = {with("nvidia-smi", kNvidia), with("npu-smi", kNpu),
                with("nvidia-smi", "0, A100, 30, 0, 210, 1410, 0, Not Active\n")};
  CheckReport r = report_of(3);
  evaluate_perf(perf, r);
  EXPECT_EQ(perf_of(r, 0).status, CheckStatus::kFail);
  EXPECT_EQ(perf_of(r, 0).detail, "GPU 1: 3 uncorrected ECC errors");
  EXPECT_EQ(perf_of(r, 1).status, CheckStatus::kFail);
  EXPECT_EQ(perf_of(r, 1).detail, "NPU 1/0: health Warning");
  EXPECT_EQ(perf_of(r, 2).status, CheckStatus::kPass);
  // Without the failures, what remains are warnings.
  perf.hosts[0] = with("nvidia-smi", "2, A100, 88, 97, 1005, 1410, 0, Active\n");
  evaluate_perf(perf, r);
  EXPECT_EQ(perf_of(r, 0).status, CheckStatus::kWarn);
  EXPECT_EQ(perf_of(r, 0).detail,
            "GPU 2: 88 C; GPU 2: 97% busy before the job; GPU 2: clocks held down by the hardware");
}

TEST(PerfOptions, Parse) {
  auto env = [](const char*) -> const char* { return nullptr; };
  Options o = parse_args({"check", "--hostfile", "h", "--perf_path", "/data", "--perf_seconds",
                          "0.5", "--perf_min_ratio", "0.3"},
                         env)
                  .options;
  EXPECT_TRUE(o.perf);
  EXPECT_EQ(o.perf_paths, std::vector<std::string>{"/data"});
  EXPECT_DOUBLE_EQ(o.perf_seconds, 0.5);
  EXPECT_DOUBLE_EQ(o.perf_min_ratio, 0.3);
  EXPECT_NE(test::error_of([&] {
              parse_args({"check", "--hostfile", "h", "--perf_min_ratio", "2"}, env);
            }).find("--perf_min_ratio=2: must be 0..1"),
            std::string::npos);
  EXPECT_NE(test::error_of([&] { parse_args({"--hostfile", "h", "--perf", "t.py"}, env); }), "");
}

// The program itself, on this machine: it measures, and leaves nothing in the directory it timed.
TEST(PerfProgram, MeasuresAndLeavesNothing) {
  if (!test::have_python3()) GTEST_SKIP() << "no python3 on this machine";
  test::TempDir dir;
  int status = 0;
  std::string out = test::shell_output(perf_command("", 0.1, {dir.path()}), &status);
  ASSERT_EQ(status, 0) << out;
  HostPerf p = parse_perf(out, "");
  ASSERT_EQ(p.error, "") << out;
  EXPECT_GE(p.cpus, 1);
  EXPECT_EQ(p.cpu_each.size(), static_cast<size_t>(std::min(p.cpus, 64)));
  EXPECT_GT(p.cpu_median(), 0);
  EXPECT_GT(p.mem_gbps, 0);
  ASSERT_EQ(p.disks.size(), 1u);
  EXPECT_EQ(p.disks[0].error, "");
  EXPECT_GT(p.disks[0].write_mbps.value_or(0), 0);
  EXPECT_GT(p.disks[0].read_mbps.value_or(0), 0);
  EXPECT_TRUE(fs::is_empty(dir.path()));
  // A directory that does not exist is named, not a crash.
  out = test::shell_output(perf_command("", 0.05, {dir.path() + "/none"}), &status);
  p = parse_perf(out, "");
  ASSERT_EQ(p.disks.size(), 1u);
  EXPECT_NE(p.disks[0].error.find("No such file or directory"), std::string::npos) << out;
}

}  // namespace
}  // namespace msrun_ssh
