// Host files (src/hostfile/hostfile.cc): every key of the TOML format, [defaults] under host keys,
// every error with its exact FILE:LINE:COL message, the plain "host slots=N" format, and
// load_hostfile choosing the format by the file name.
#include "msrun_ssh/hostfile.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "test_util.h"

namespace msrun_ssh {
namespace {

using Env = EnvList;

std::string home() {
  const char* h = std::getenv("HOME");
  return h ? h : "";
}

using test::error_of;

std::string toml_error(std::string_view text) {
  return error_of([&] { parse_toml_hostfile(text, "h.toml"); });
}

std::string plain_error(std::string_view text) {
  return error_of([&] { parse_plain_hostfile(text, "hosts"); });
}

// ---- TOML: keys -------------------------------------------------------------------------------

constexpr const char* kFull = R"([defaults]
user = "mindspore"
port = 2222
identity_file = "~/.ssh/id_ed25519"
known_hosts = "~/.ssh/known_hosts"
python = "/opt/conda/envs/ms/bin/python"
workdir = "/data/job"
local_worker_num = 4
env = { GLOO_SOCKET_IFNAME = "eth0", DATA_PATH = "/data/mnist" }
bind_core = true
bind_numa = true

[[hosts]]
address = "198.18.0.1"

[[hosts]]
address = "198.18.0.2"
user = "alice"
port = 22
identity_file = "/keys/id"
known_hosts = "~/kh"
python = "/usr/bin/python3"
workdir = "/w"
local_worker_num = 2
env = { DATA_PATH = "/other", EXTRA = "x" }
bind_core = { device0 = ["0-3"], scheduler = ["4", "6-7"] }
bind_numa = { device0 = 0, device1 = [1, 0] }
)";

// An empty list of CPU ranges leaves that process unbound, as msrun's --bind_core does (it was
// refused).
TEST(Hostfile, BindCoreEmptyListIsAKeyWithNoRanges) {
  Cluster c = parse_toml_hostfile(
      "[[hosts]]\naddress = \"198.18.0.1\"\nbind_core = { device0 = [], scheduler = [\"1\"] }\n",
      "h.toml");
  ASSERT_EQ(c.hosts.size(), 1u);
  EXPECT_EQ(c.hosts[0].bind_core.mode, BindCore::Mode::kManual);
  EXPECT_EQ(c.hosts[0].bind_core.ranges, (std::map<std::string, std::vector<std::string>>{
                                             {"device0", {}}, {"scheduler", {"1"}}}));
}

// A dotted key of tens of thousands of parts overflowed toml++'s stack (a crash, no message): it
// is refused naming its line, exit 2 (review of 2026-12-07). Dots in strings and comments, and a
// key of fewer parts, are not.
TEST(Hostfile, ADottedKeyTooDeepIsRefusedNamingItsLine) {
  std::string deep = "a";
  for (int i = 0; i < 50000; ++i) deep += ".a";
  const std::string refused =
      "h.toml:2: a dotted key of more than 256 parts (a table nested that deep is refused)";
  EXPECT_EQ(toml_error("# x\n" + deep + " = 1\n"), refused);
  EXPECT_EQ(toml_error("# x\n[" + deep + "]\n"), refused);
  EXPECT_EQ(toml_error("x = \"\"\"\n\"\"\"\n[" + deep + "]\n").substr(0, 9), "h.toml:3:");
  std::string dots(5000, '.');
  Cluster c = parse_toml_hostfile("[[hosts]] # " + dots + "\naddress = \"198.18.0.1\"\n" +
                                      "env = { A = \"" + dots + "\", B = '" + dots + "' }\n" +
                                      "python = \"\"\"\n" + dots + "\"\"\"\n",
                                  "hosts.toml");
  ASSERT_EQ(c.hosts.size(), 1u);
  // A multi-line string's closing delimiter with one or two quotes more before it, and a
  // backslash at a line's end, keep the scan in step (a review found both).
  const std::string many(300, '.');
  for (const std::string& tail : {"python = \"\"\"/usr/bin/python3\"\"\"\" # \"" + many + "\n",
                                  "python = \"\"\"x\"\"\"\"\" # \"" + many + "\n",
                                  "env = { A = \"\"\"x\"\"\"\", B = \"" + many + "\" }\n",
                                  "python = '''x'''' # it's" + many + "\n"}) {
    Cluster ok = parse_toml_hostfile("[[hosts]]\naddress = \"198.18.0.1\"\n" + tail, "h.toml");
    EXPECT_EQ(ok.hosts.size(), 1u) << tail;
  }
  EXPECT_EQ(toml_error("[[hosts]]\naddress = \"198.18.0.1\"\npython = \"\"\"a\\\nb\\\nc\"\"\"\n" +
                       deep + " = 1\n"),
            "h.toml:6: a dotted key of more than 256 parts (a table nested that deep is refused)");
  std::string shallow = "a";
  for (int i = 0; i < 100; ++i) shallow += ".a";
  EXPECT_NE(toml_error(shallow + " = 1\n").find("unknown key \"a\""), std::string::npos);
}

TEST(Hostfile, DefaultsApplyToEveryKey) {
  Cluster c = parse_toml_hostfile(kFull, "h.toml");
  EXPECT_EQ(c.path, "h.toml");
  ASSERT_EQ(c.hosts.size(), 2u);
  const Host& h = c.hosts[0];
  EXPECT_EQ(h.address, "198.18.0.1");
  EXPECT_EQ(h.user, "mindspore");
  EXPECT_EQ(h.port, 2222);
  EXPECT_EQ(h.identity_file, home() + "/.ssh/id_ed25519");
  EXPECT_EQ(h.known_hosts, home() + "/.ssh/known_hosts");
  EXPECT_EQ(h.python, "/opt/conda/envs/ms/bin/python");
  EXPECT_EQ(h.workdir, "/data/job");
  EXPECT_EQ(h.local_worker_num, 4);
  // TOML tables are unordered; the parser gives their keys in sorted order.
  EXPECT_EQ(h.env, (Env{{"DATA_PATH", "/data/mnist"}, {"GLOO_SOCKET_IFNAME", "eth0"}}));
  EXPECT_EQ(h.bind_core.mode, BindCore::Mode::kAuto);
  EXPECT_EQ(h.bind_numa.mode, BindNuma::Mode::kAuto);
  EXPECT_EQ(h.origin, "h.toml:13");
}

TEST(Hostfile, HostKeysOverrideDefaults) {
  Cluster c = parse_toml_hostfile(kFull, "h.toml");
  ASSERT_EQ(c.hosts.size(), 2u);
  const Host& h = c.hosts[1];
  EXPECT_EQ(h.address, "198.18.0.2");
  EXPECT_EQ(h.user, "alice");
  EXPECT_EQ(h.port, 22);
  EXPECT_EQ(h.identity_file, "/keys/id");
  EXPECT_EQ(h.known_hosts, home() + "/kh");
  EXPECT_EQ(h.python, "/usr/bin/python3");
  EXPECT_EQ(h.workdir, "/w");
  EXPECT_EQ(h.local_worker_num, 2);
  // A host's env adds to [defaults]' env; the same name takes the host's value.
  EXPECT_EQ(h.env, (Env{{"DATA_PATH", "/other"}, {"GLOO_SOCKET_IFNAME", "eth0"}, {"EXTRA", "x"}}));
  EXPECT_EQ(h.bind_core.mode, BindCore::Mode::kManual);
  EXPECT_EQ(h.bind_core.ranges, (std::map<std::string, std::vector<std::string>>{
                                    {"device0", {"0-3"}}, {"scheduler", {"4", "6-7"}}}));
  EXPECT_EQ(h.bind_numa.mode, BindNuma::Mode::kManual);
  EXPECT_EQ(h.bind_numa.nodes,
            (std::map<std::string, std::vector<int>>{{"device0", {0}}, {"device1", {1, 0}}}));
  EXPECT_EQ(h.origin, "h.toml:16");
}

TEST(Hostfile, MinimalHostLeavesEverythingUnset) {
  Cluster c = parse_toml_hostfile("[[hosts]]\naddress = \"node1\"\n", "h.toml");
  ASSERT_EQ(c.hosts.size(), 1u);
  const Host& h = c.hosts[0];
  EXPECT_EQ(h.address, "node1");
  EXPECT_EQ(h.user, "");
  EXPECT_FALSE(h.port.has_value());
  EXPECT_EQ(h.identity_file, "");
  EXPECT_EQ(h.known_hosts, "");
  EXPECT_EQ(h.python, "");
  EXPECT_EQ(h.workdir, "");
  EXPECT_FALSE(h.local_worker_num.has_value());
  EXPECT_TRUE(h.env.empty());
  EXPECT_EQ(h.bind_core.mode, BindCore::Mode::kUnset);
  EXPECT_EQ(h.bind_numa.mode, BindNuma::Mode::kUnset);
}

TEST(Hostfile, BindFalseIsOff) {
  Cluster c = parse_toml_hostfile(
      "[defaults]\nbind_core = true\nbind_numa = true\n"
      "[[hosts]]\naddress = \"a\"\nbind_core = false\nbind_numa = false\n",
      "h.toml");
  EXPECT_EQ(c.hosts[0].bind_core.mode, BindCore::Mode::kOff);
  EXPECT_EQ(c.hosts[0].bind_numa.mode, BindNuma::Mode::kOff);
}

TEST(Hostfile, BindNumaTakesIntsAndArrays) {
  Cluster c = parse_toml_hostfile(
      "[[hosts]]\naddress = \"a\"\nbind_numa = { scheduler = 1, device3 = [2, 3] }\n", "h.toml");
  EXPECT_EQ(c.hosts[0].bind_numa.nodes,
            (std::map<std::string, std::vector<int>>{{"device3", {2, 3}}, {"scheduler", {1}}}));
}

TEST(Hostfile, TildeOnlyExpandsAsAPrefix) {
  Cluster c = parse_toml_hostfile(
      "[[hosts]]\naddress = \"a\"\nidentity_file = \"/x/~/id\"\nknown_hosts = \"~kh\"\n", "h.toml");
  EXPECT_EQ(c.hosts[0].identity_file, "/x/~/id");
  EXPECT_EQ(c.hosts[0].known_hosts, "~kh");
}

TEST(Hostfile, ExpandHome) {
  EXPECT_EQ(expand_home("~/a/b"), home() + "/a/b");
  EXPECT_EQ(expand_home("~"), "~");
  EXPECT_EQ(expand_home("/abs"), "/abs");
  EXPECT_EQ(expand_home(""), "");
}

TEST(Hostfile, NodeSetsExpandInOrder) {
  Cluster c = parse_toml_hostfile(
      "[[hosts]]\naddress = \"head\"\n"
      "[[hosts]]\naddress = \"node[02-04]\"\nlocal_worker_num = 4\n"
      "[[hosts]]\naddress = \"tail\"\n",
      "h.toml");
  ASSERT_EQ(c.hosts.size(), 5u);
  std::vector<std::string> names;
  for (const auto& h : c.hosts) names.push_back(h.address);
  EXPECT_EQ(names, (std::vector<std::string>{"head", "node02", "node03", "node04", "tail"}));
  EXPECT_EQ(c.hosts[2].local_worker_num, 4);
  EXPECT_EQ(c.hosts[2].origin, "h.toml:3");
  EXPECT_FALSE(c.hosts[4].local_worker_num.has_value());
}

TEST(Hostfile, SameAddressOnAnotherPortIsAnotherHost) {
  Cluster c = parse_toml_hostfile(
      "[[hosts]]\naddress = \"a\"\nport = 22\n[[hosts]]\naddress = \"a\"\nport = 2222\n", "h.toml");
  EXPECT_EQ(c.hosts.size(), 2u);
}

TEST(Hostfile, AcceptsIpv6AndScopedAddresses) {
  Cluster c = parse_toml_hostfile(
      "[[hosts]]\naddress = \"fe80::1%eth0\"\n[[hosts]]\naddress = \"my_host-1.example\"\n",
      "h.toml");
  EXPECT_EQ(c.hosts[0].address, "fe80::1%eth0");
  EXPECT_EQ(c.hosts[1].address, "my_host-1.example");
}

TEST(Hostfile, ExtremeValuesAreAccepted) {
  Cluster c = parse_toml_hostfile(
      "[[hosts]]\naddress = \"a\"\nport = 65535\nlocal_worker_num = 1024\n"
      "[[hosts]]\naddress = \"b\"\nport = 1\nlocal_worker_num = 0\n",
      "h.toml");
  EXPECT_EQ(c.hosts[0].port, 65535);
  EXPECT_EQ(c.hosts[0].local_worker_num, 1024);
  EXPECT_EQ(c.hosts[1].port, 1);
  EXPECT_EQ(c.hosts[1].local_worker_num, 0);
}

TEST(Hostfile, EmptyEnvValueIsAllowed) {
  Cluster c = parse_toml_hostfile("[[hosts]]\naddress = \"a\"\nenv = { X = \"\" }\n", "h.toml");
  EXPECT_EQ(c.hosts[0].env, (Env{{"X", ""}}));
}

// ---- TOML: errors -----------------------------------------------------------------------------

// Every error of the TOML format, with its exact message.
TEST(Hostfile, TomlErrorsNameTheFileLineAndColumn) {
  const std::string kHead = "[[hosts]]\naddress = \"a\"\n";
  const test::Case kCases[] = {
      // unknown key in [[hosts]]
      {"[[hosts]]\naddress = \"a\"\nslots = 4\n",
       "h.toml:3:9: unknown key \"slots\" in [[hosts]] (expected one of: address, user, "
       "port, identity_file, known_hosts, python, workdir, local_worker_num, env, "
       "bind_core, bind_numa, spare)"},
      // unknown key in [defaults]
      {"[defaults]\nusr = \"x\"\n[[hosts]]\naddress = \"a\"\n",
       "h.toml:2:7: unknown key \"usr\" in [defaults] (expected one of: user, port, "
       "identity_file, known_hosts, python, workdir, local_worker_num, env, bind_core, "
       "bind_numa, contract)"},
      // address is no default
      {"[defaults]\naddress = \"x\"\n[[hosts]]\naddress = \"a\"\n",
       "h.toml:2:11: unknown key \"address\" in [defaults] (expected one of: user, port, "
       "identity_file, known_hosts, python, workdir, local_worker_num, env, bind_core, "
       "bind_numa, contract)"},
      // unknown top-level key
      {"[[hosts]]\naddress = \"a\"\n[host]\nx = 1\n",
       "h.toml:3:1: unknown key \"host\" (expected [defaults] and [[hosts]])"},
      {"version = 2\n[[hosts]]\naddress = \"a\"\n",
       "h.toml:1:11: unknown key \"version\" (expected [defaults] and [[hosts]])"},
      // [defaults] must be a table
      {"defaults = 1\n[[hosts]]\naddress = \"a\"\n",
       "h.toml:1:12: \"defaults\" must be a table: [defaults]"},
      // wrong types
      {"[[hosts]]\naddress = 1\n", "h.toml:2:11: key \"address\" must be a string"},
      {kHead + "user = 1\n", "h.toml:3:8: key \"user\" must be a string"},
      {kHead + "port = \"22\"\n", "h.toml:3:8: key \"port\" must be an integer"},
      {kHead + "port = 22.0\n", "h.toml:3:8: key \"port\" must be an integer"},
      {kHead + "identity_file = true\n", "h.toml:3:17: key \"identity_file\" must be a string"},
      {kHead + "known_hosts = \"/tmp/my known_hosts\"\n",
       "h.toml:3:15: key \"known_hosts\" names a path with a blank, which ssh would read as "
       "several files: rename or link it"},
      {kHead + "known_hosts = []\n", "h.toml:3:15: key \"known_hosts\" must be a string"},
      {kHead + "python = 3\n", "h.toml:3:10: key \"python\" must be a string"},
      {kHead + "workdir = {}\n", "h.toml:3:11: key \"workdir\" must be a string"},
      {kHead + "local_worker_num = \"8\"\n",
       "h.toml:3:20: key \"local_worker_num\" must be an integer"},
      {kHead + "env = \"A=1\"\n", "h.toml:3:7: key \"env\" must be a table of NAME = \"value\""},
      {kHead + "bind_core = \"True\"\n",
       "h.toml:3:13: key \"bind_core\" must be true, false or a table of CPU ranges"},
      {kHead + "bind_numa = 0\n",
       "h.toml:3:13: key \"bind_numa\" must be true, false or a table of NUMA nodes"},
      // wrong type in [defaults]
      {"[defaults]\nport = \"x\"\n[[hosts]]\naddress = \"a\"\n",
       "h.toml:2:8: key \"port\" must be an integer"},
      // port out of range
      {kHead + "port = 0\n", "h.toml:3:8: key \"port\" = 0 is out of range 1..65535"},
      {kHead + "port = 65536\n", "h.toml:3:8: key \"port\" = 65536 is out of range 1..65535"},
      {kHead + "port = -22\n", "h.toml:3:8: key \"port\" = -22 is out of range 1..65535"},
      {kHead + "port = 9999999999999\n",
       "h.toml:3:8: key \"port\" = 9999999999999 is out of range 1..65535"},
      // local_worker_num out of range
      {kHead + "local_worker_num = -1\n",
       "h.toml:3:20: key \"local_worker_num\" = -1 is out of range 0..1024"},
      {kHead + "local_worker_num = 1025\n",
       "h.toml:3:20: key \"local_worker_num\" = 1025 is out of range 0..1024"},
      // empty strings
      {"[[hosts]]\naddress = \"\"\n", "h.toml:2:11: key \"address\" must not be empty"},
      {"[defaults]\nworkdir = \"\"\n[[hosts]]\naddress = \"a\"\n",
       "h.toml:2:11: key \"workdir\" must not be empty"},
      {"[[hosts]]\naddress = \"a\"\nuser = ''\n", "h.toml:3:8: key \"user\" must not be empty"},
      // a NUL byte in a string
      {"[[hosts]]\naddress = \"a\"\npython = \"py\\u0000\"\n",
       "h.toml:3:10: key \"python\" contains a NUL byte"},
      {"[[hosts]]\naddress = \"a\"\nenv = { A = \"x\\u0000y\" }\n",
       "h.toml:3:13: env: value of \"A\" contains a NUL byte"},
      // bad env name
      {kHead + "env = { \"1ABC\" = \"x\" }\n",
       "h.toml:3:18: env: \"1ABC\": not a valid environment variable name"},
      {kHead + "env = { \"A-B\" = \"x\" }\n",
       "h.toml:3:17: env: \"A-B\": not a valid environment variable name"},
      {kHead + "env = { \"A=B\" = \"x\" }\n",
       "h.toml:3:17: env: \"A=B\": not a valid environment variable name"},
      {kHead + "env = { \"\" = \"x\" }\n",
       "h.toml:3:14: env: \"\": not a valid environment variable name"},
      // the job's own marker: the teardown finds the processes by it
      {kHead + "env = { MSRUN_SSH_JOB = \"mine\" }\n",
       "h.toml:3:25: env: \"MSRUN_SSH_JOB\": msrun-ssh's own: MSRUN_SSH_JOB, MSRUN_SSH_STACK_DIR "
       "and MSRUN_SSH_KEEPER mark the job's processes, and the teardown, stop and stack find them "
       "by them"},
      // an env value that is no string
      {"[[hosts]]\naddress = \"a\"\nenv = { N = 1 }\n",
       "h.toml:3:13: env: value of \"N\" must be a string"},
      {"[defaults]\nenv = { B = true }\n[[hosts]]\naddress = \"a\"\n",
       "h.toml:2:13: env: value of \"B\" must be a string"},
      // hosts must be an array of tables
      {"hosts = \"a\"\n", "h.toml:1:9: \"hosts\" must be an array of tables: [[hosts]]"},
      {"hosts = [\"a\", \"b\"]\n", "h.toml:1:9: \"hosts\" must be an array of tables: [[hosts]]"},
      {"[hosts]\naddress = \"a\"\n", "h.toml:1:1: \"hosts\" must be an array of tables: [[hosts]]"},
      // an empty hosts array
      {"hosts = []\n", "h.toml:1:9: \"hosts\" must be an array of tables: [[hosts]]"},
      // missing address
      {"[[hosts]]\naddress = \"a\"\n\n[[hosts]]\nuser = \"u\"\n",
       "h.toml:4:1: [[hosts]] entry without \"address\""},
      // duplicate host
      {"[[hosts]]\naddress = \"a\"\n[[hosts]]\naddress = \"b\"\n"
       "[[hosts]]\naddress = \"a\"\n",
       "h.toml:6:11: host \"a\" is listed twice: h.toml:2:11 has it already"},
      // duplicate through node set: both places and both addresses named
      {"[[hosts]]\naddress = \"n[1-3]\"\n[[hosts]]\naddress = \"n2\"\n",
       "h.toml:4:11: host \"n2\" is listed twice: h.toml:2:11 has it already (address "
       "\"n[1-3]\")"},
      {"[[hosts]]\naddress = \"n2\"\n[[hosts]]\naddress = \"n[1-3]\"\n",
       "h.toml:4:11: host \"n2\" (of address \"n[1-3]\") is listed twice: h.toml:2:11 has it "
       "already"},
      {"[[hosts]]\naddress = \"n[1-3],n[2-4]\"\n",
       "h.toml:2:11: host \"n2\" is listed twice by address \"n[1-3],n[2-4]\""},
      // duplicate with the same port
      {"[defaults]\nport = 22\n[[hosts]]\naddress = \"a\"\n"
       "[[hosts]]\naddress = \"a\"\nport = 22\n",
       "h.toml:6:11: host \"a\" is listed twice: h.toml:4:11 has it already"},
      // TOML syntax errors: the text after the location is toml++'s own description
      {"[[hosts]]\naddress = \"a\"\nuser = \n",
       "h.toml:3:8: Error while parsing key-value pair: expected value, saw '\\n'"},
      {"[[hosts]]\naddress = \"a\nuser = \"b\"\n",
       "h.toml:2:13: Error while parsing string: unescaped control characters other than TAB "
       "(U+0009) are explicitly prohibited"},
      {"[[hosts]]\naddress = \"a\"\naddress = \"b\"\n",
       "h.toml:3:11: Error while parsing key-value pair: cannot redefine existing string "
       "'address'"},
      // bad bind_core / bind_numa keys
      {"[[hosts]]\naddress = \"a\"\nbind_core = { gpu0 = [\"0-3\"] }\n",
       "h.toml:3:22: bind_core: unknown key \"gpu0\" (expected \"scheduler\" or "
       "\"device<N>\", as msrun)"},
      {"[[hosts]]\naddress = \"a\"\nbind_numa = { device = 0 }\n",
       "h.toml:3:24: bind_numa: unknown key \"device\" (expected \"scheduler\" or "
       "\"device<N>\", as msrun)"},
      // bad bind_core ranges
      {kHead + "bind_core = { device0 = [\"3-1\"] }\n",
       "h.toml:3:26: bind_core.device0: reversed CPU range \"3-1\""},
      {kHead + "bind_core = { device0 = [\"0-3\", \"x\"] }\n",
       "h.toml:3:33: bind_core.device0: bad CPU range \"x\""},
      {kHead + "bind_core = { device0 = [0] }\n",
       "h.toml:3:26: bind_core.device0: CPU ranges are strings like \"0-3\""},
      {kHead + "bind_core = { device0 = \"0-3\" }\n",
       "h.toml:3:25: bind_core.device0 must be a list of CPU ranges"},
      // bad bind_numa values
      {kHead + "bind_numa = { device0 = -1 }\n",
       "h.toml:3:25: key \"bind_numa.device0\" = -1 is out of range 0..4095"},
      {kHead + "bind_numa = { device0 = [0, \"1\"] }\n",
       "h.toml:3:29: key \"bind_numa.device0\" must be an integer"},
      {kHead + "bind_numa = { device0 = [] }\n", "h.toml:3:25: bind_numa.device0 is an empty list"},
      // bad characters in address
      {"[[hosts]]\naddress = \"a b\"\n",
       "h.toml:2:11: address \"a b\" has ' ', a character not allowed in a host name or "
       "address (letters, digits and . - _ : % only)"},
      {"[[hosts]]\naddress = \"$(reboot)\"\n",
       "h.toml:2:11: address \"$(reboot)\" has '$', a character not allowed in a host name or "
       "address (letters, digits and . - _ : % only)"},
      {"[[hosts]]\naddress = \"user@host\"\n",
       "h.toml:2:11: address \"user@host\" has '@', a character not allowed in a host name or "
       "address (letters, digits and . - _ : % only)"},
      // the address as written, and the name at fault
      {"[[hosts]]\naddress = \"n[1-2];x\"\n",
       "h.toml:2:11: address \"n[1-2];x\": the name \"n1;x\" has ';', a character not allowed "
       "in a host name or address (letters, digits and . - _ : % only)"},
      {"[[hosts]]\naddress = \"n[1-3]!n2\"\n",
       "h.toml:2:11: address \"n[1-3]!n2\": the name \"n1!n2\" has '!', a character not "
       "allowed in a host name or address (letters, digits and . - _ : % only)"},
      // control characters are shown escaped, never raw
      {"[[hosts]]\naddress = \"a\\u0007b\"\n",
       "h.toml:2:11: address \"a\\x07b\" has '\\x07', a character not allowed in a host name "
       "or address (letters, digits and . - _ : % only)"},
      // bad node set in address
      {"[[hosts]]\naddress = \"a\"\n[[hosts]]\naddress = \"n[3-1]\"\n",
       "h.toml:4:11: address \"n[3-1]\": bad node set range \"3-1\": reversed"},
      {"[[hosts]]\naddress = \"n[1-2\"\n",
       "h.toml:2:11: address \"n[1-2\": unmatched \"[\" in node set"},
  };
  for (const auto& c : kCases) EXPECT_EQ(toml_error(c.input), c.expected) << c.input;
}

// A plain file may hold any bytes. Those that are not UTF-8 are shown as \xNN (fmt's "{:?}"
// asserted on such a name: a debug build aborted), and a whole UTF-8 character is shown as written.
TEST(Hostfile, BytesThatAreNotUtf8AreShownEscaped) {
  EXPECT_EQ(
      plain_error("alhalh\xd5\x8c\x8b\xf5\n"),
      "hosts:1: address \"alhalh\xd5\x8c\\x8b\\xf5\" has '\xd5\x8c', a character not allowed in "
      "a host name or address (letters, digits and . - _ : % only)");
  EXPECT_EQ(plain_error("n[1-2]\xff\n"),
            "hosts:1: address \"n[1-2]\\xff\": the name \"n1\\xff\" has '\\xff', a character not "
            "allowed in a host name or address (letters, digits and . - _ : % only)");
  EXPECT_EQ(plain_error("n[1-\xf5]\n"),
            "hosts:1: address \"n[1-\\xf5]\": bad node set range \"1-\\xf5\"");
}

TEST(Hostfile, NoHosts) {
  EXPECT_EQ(toml_error(""), "h.toml: no [[hosts]] entries");
  EXPECT_EQ(toml_error("[defaults]\nuser = \"u\"\n"), "h.toml: no [[hosts]] entries");
  EXPECT_EQ(toml_error("[[hosts]]\naddress = \"a\"\nlocal_worker_num = 1\n"
                       "[[hosts]]\naddress = \"b\"\n")
                .find("no [[hosts]]"),
            std::string::npos);
}

// ---- spares ------------------------------------------------------------------------------------

TEST(Hostfile, SparesStartNothingAndKeepTheirFileOrder) {
  Cluster c = parse_toml_hostfile(
      "[defaults]\nuser = \"u\"\n[[hosts]]\naddress = \"a\"\n[[hosts]]\naddress = \"s[1-2]\"\n"
      "spare = true\n[[hosts]]\naddress = \"b\"\nspare = false\n",
      "h.toml");
  ASSERT_EQ(c.hosts.size(), 2u);
  EXPECT_EQ(c.hosts[0].address, "a");
  EXPECT_EQ(c.hosts[1].address, "b");
  ASSERT_EQ(c.spares.size(), 2u);
  EXPECT_EQ(c.spares[0].address, "s1");
  EXPECT_EQ(c.spares[1].address, "s2");
  EXPECT_TRUE(c.spares[1].spare);
  EXPECT_EQ(c.spares[1].user, "u");  // [defaults] apply to spares too
}

TEST(Hostfile, SpareErrors) {
  EXPECT_EQ(toml_error("[[hosts]]\naddress = \"a\"\nspare = 1\n"),
            "h.toml:3:9: key \"spare\" must be true or false");
  EXPECT_EQ(toml_error("[[hosts]]\naddress = \"a\"\nspare = true\n"),
            "h.toml:2:11: every host is a spare; at least one host must run the job");
  EXPECT_EQ(toml_error("[defaults]\nspare = true\n[[hosts]]\naddress = \"a\"\n"),
            "h.toml:2:9: unknown key \"spare\" in [defaults] (expected one of: user, port, "
            "identity_file, known_hosts, python, workdir, local_worker_num, env, bind_core, "
            "bind_numa, contract)");
  EXPECT_EQ(toml_error("[[hosts]]\naddress = \"a\"\n[[hosts]]\naddress = \"a\"\nspare = true\n"),
            "h.toml:4:11: host \"a\" is listed twice: h.toml:2:11 has it already");
}

TEST(HostfilePlain, SpareWord) {
  Cluster c = parse_plain_hostfile("a slots=2\ns spare slots=2\nb\n", "hosts");
  ASSERT_EQ(c.hosts.size(), 2u);
  EXPECT_EQ(c.hosts[1].address, "b");
  ASSERT_EQ(c.spares.size(), 1u);
  EXPECT_EQ(c.spares[0].address, "s");
  EXPECT_EQ(c.spares[0].local_worker_num, 2);
  EXPECT_EQ(plain_error("a spare\n"),
            "hosts:1: every host is a spare; at least one host must run the job");
  EXPECT_EQ(plain_error("# spares\n\na spare\nb spare\n"),
            "hosts:3: every host is a spare; at least one host must run the job");
}

TEST(Hostfile, TakeSparesMovesTheLastHostsAfterTheMarkedOnes) {
  Cluster c = parse_plain_hostfile("a\nm spare\nb\nc\nd\n", "hosts");
  take_spares(c, 2);
  ASSERT_EQ(c.hosts.size(), 2u);
  EXPECT_EQ(c.hosts[1].address, "b");
  ASSERT_EQ(c.spares.size(), 3u);
  EXPECT_EQ(c.spares[0].address, "m");
  EXPECT_EQ(c.spares[1].address, "c");
  EXPECT_EQ(c.spares[2].address, "d");
  EXPECT_TRUE(c.spares[2].spare);
  take_spares(c, 0);
  EXPECT_EQ(c.hosts.size(), 2u);
  EXPECT_EQ(error_of([&] { take_spares(c, 2); }),
            "--spares=2 leaves no host to run the job (hosts has 2 hosts besides 3 spares of its "
            "own)");
}

// ---- plain format -----------------------------------------------------------------------------

TEST(HostfilePlain, SlotsCommentsAndBlankLines) {
  Cluster c = parse_plain_hostfile(
      "# DeepSpeed style\n"
      "198.18.0.1 slots=4\n"
      "\n"
      "   \t\n"
      "198.18.0.2 slots=2 max_slots=8   # trailing comment\n"
      "node[1-2] slots=1\n"
      "198.18.0.3\n",
      "hosts");
  EXPECT_EQ(c.path, "hosts");
  ASSERT_EQ(c.hosts.size(), 5u);
  EXPECT_EQ(c.hosts[0].address, "198.18.0.1");
  EXPECT_EQ(c.hosts[0].local_worker_num, 4);
  EXPECT_EQ(c.hosts[0].origin, "hosts:2");
  EXPECT_EQ(c.hosts[1].address, "198.18.0.2");
  EXPECT_EQ(c.hosts[1].local_worker_num, 2);
  EXPECT_EQ(c.hosts[1].origin, "hosts:5");
  EXPECT_EQ(c.hosts[2].address, "node1");
  EXPECT_EQ(c.hosts[3].address, "node2");
  EXPECT_EQ(c.hosts[3].local_worker_num, 1);
  EXPECT_EQ(c.hosts[3].origin, "hosts:6");
  EXPECT_EQ(c.hosts[4].address, "198.18.0.3");
  EXPECT_FALSE(c.hosts[4].local_worker_num.has_value());
  EXPECT_FALSE(c.hosts[4].port.has_value());
  EXPECT_TRUE(c.hosts[4].env.empty());
}

// A node set with blanks after its commas is one address, as ClusterShell reads it.
TEST(HostfilePlain, NodeSetWithBlanksAfterCommas) {
  Cluster c = parse_plain_hostfile("node[1-2, 7] slots=2\ngpu01, gpu02 spare\n", "hosts");
  ASSERT_EQ(c.hosts.size(), 3u);
  EXPECT_EQ(c.hosts[2].address, "node7");
  EXPECT_EQ(c.hosts[2].local_worker_num, 2);
  ASSERT_EQ(c.spares.size(), 2u);
  EXPECT_EQ(c.spares[1].address, "gpu02");
  // and blanks before a comma as well
  Cluster before = parse_plain_hostfile("n[1-3] ,n5 slots=1\na , b\n", "hosts");
  ASSERT_EQ(before.hosts.size(), 6u);
  EXPECT_EQ(before.hosts[3].address, "n5");
  EXPECT_EQ(before.hosts[3].local_worker_num, 1);
  EXPECT_EQ(before.hosts[5].address, "b");
  EXPECT_EQ(plain_error("n[1-2, x slots=1\n"),
            "hosts:1: address \"n[1-2, x\": unmatched \"[\" in node set");
  // The word spare and key=value words end a node set: "a, spare" was the two hosts a and
  // spare (review of 2026-12-07); its comma now ends the set with nothing after it.
  EXPECT_EQ(plain_error("b\na, spare\n"),
            "hosts:2: address \"a,\": empty item in a comma-separated node set");
  Cluster marked = parse_plain_hostfile("a,c spare\nb slots=1\n", "hosts");
  ASSERT_EQ(marked.hosts.size(), 1u);
  ASSERT_EQ(marked.spares.size(), 2u);
  EXPECT_EQ(marked.spares[1].address, "c");
}

TEST(HostfilePlain, MaxSlotsAloneIsIgnored) {
  Cluster c = parse_plain_hostfile("a max_slots=16\n", "hosts");
  EXPECT_FALSE(c.hosts[0].local_worker_num.has_value());
  // Ignored whatever its count, as an mpirun host file's (it was held to slots' 0..1024).
  Cluster big = parse_plain_hostfile("a slots=2 max_slots=2048\n", "hosts");
  EXPECT_EQ(big.hosts[0].local_worker_num, 2);
}

TEST(HostfilePlain, CrLfLineEndingsAndZeroSlots) {
  Cluster c = parse_plain_hostfile("a slots=0\r\nb slots=3\r\n", "hosts");
  ASSERT_EQ(c.hosts.size(), 2u);
  EXPECT_EQ(c.hosts[0].local_worker_num, 0);
  EXPECT_EQ(c.hosts[1].address, "b");
  EXPECT_EQ(c.hosts[1].local_worker_num, 3);
}

TEST(HostfilePlain, NoFinalNewline) {
  Cluster c = parse_plain_hostfile("a slots=1\nb slots=2", "hosts");
  ASSERT_EQ(c.hosts.size(), 2u);
  EXPECT_EQ(c.hosts[1].local_worker_num, 2);
}

TEST(HostfilePlain, UnknownWord) {
  EXPECT_EQ(plain_error("a slots=1\nb cpus=4\n"),
            "hosts:2: unknown word \"cpus=4\" (expected slots=N or spare)");
  EXPECT_EQ(plain_error("a slots=1\n\n# x\nb 4\n"),
            "hosts:4: unknown word \"4\" (expected slots=N or spare)");
}

TEST(HostfilePlain, BadSlots) {
  for (std::string word : {"slots=x", "slots=", "slots", "slots=+4", "slots=-1", "slots=1025",
                           "slots=4x", "slots=99999999999"})
    EXPECT_EQ(plain_error("a " + word + "\n"),
              "hosts:1: slots must be an integer 0..1024: \"" + word + "\"");
  EXPECT_EQ(plain_error("a\nb max_slots=z\n"),
            "hosts:2: max_slots must be a non-negative integer: \"max_slots=z\"");
}

TEST(HostfilePlain, NodeSetErrorsNameTheLine) {
  EXPECT_EQ(plain_error("a\n# c\nn[2-1] slots=1\n"),
            "hosts:3: address \"n[2-1]\": bad node set range \"2-1\": reversed");
}

TEST(HostfilePlain, BadCharactersInAddress) {
  EXPECT_EQ(plain_error("a\nb;reboot slots=1\n"),
            "hosts:2: address \"b;reboot\" has ';', a character not allowed in a host name or "
            "address (letters, digits and . - _ : % only)");
  EXPECT_EQ(plain_error("n\xC3\xB6"
                        "de1\n"),
            "hosts:1: address \"n\xC3\xB6"
            "de1\" has '\xC3\xB6', a character not allowed in a host "
            "name or address (letters, digits and . - _ : % only)");
}

// host:port and MPICH's host:N are no addresses; IPv6 addresses are. Nor is a name past DNS's 253.
TEST(HostfilePlain, ColonsOnlyInIpv6AndNamesOfDnsLength) {
  EXPECT_EQ(plain_error("198.18.99.1:4\n"),
            "hosts:1: address \"198.18.99.1:4\" has a \":\" but is no IPv6 address: a port goes "
            "in its own key (port = N; in the plain format, in the ssh config), and the plain "
            "format's workers in slots=N");
  Cluster c = parse_plain_hostfile("fd00::1 slots=1\nfe80::2%eth0\n::1\n", "hosts");
  ASSERT_EQ(c.hosts.size(), 3u);
  EXPECT_EQ(c.hosts[1].address, "fe80::2%eth0");
  std::string long_name(254, 'a');
  EXPECT_EQ(plain_error(long_name),
            fmt::format("hosts:1: address \"{}\" is longer than a host name may be (254 "
                        "characters, at most 253)",
                        long_name));
  long_name.pop_back();
  EXPECT_EQ(parse_plain_hostfile(long_name, "hosts").hosts.size(), 1u);
  // A node set whose names are too long is refused before they are made (a 100 KB pattern of
  // 16,383 names took 2.5 GB and 18 s; review of 2026-12-07), naming its longest name.
  std::string huge(100000, 'a');
  // The address and the name are quoted cut to 64 bytes.
  EXPECT_EQ(plain_error(huge + "[1-16383]"),
            fmt::format("hosts:1: address \"{0}\"...: the name \"{0}\"... is longer than a "
                        "host name may be (more than 253 characters)",
                        std::string(64, 'a')));
  std::string edge(248, 'a');  // 248 + "[1-10]" gives names of 249 and 250 characters
  EXPECT_EQ(parse_plain_hostfile(edge + "[1-10]z", "hosts").hosts.size(), 10u);
  EXPECT_NE(plain_error(edge + "[1-10]zzzz").find("(more than 253 characters)"), std::string::npos);
}

TEST(HostfilePlain, SlotsTwiceDisagreeing) {
  EXPECT_EQ(plain_error("a slots=2 slots=3\n"), "hosts:1: slots given twice (2 and 3)");
  EXPECT_EQ(parse_plain_hostfile("a slots=2 slots=2\n", "hosts").hosts[0].local_worker_num, 2);
}

TEST(HostfilePlain, ALeadingDashIsNoHost) {
  EXPECT_EQ(plain_error("a\n-oProxyCommand=x\n"),
            "hosts:2: address \"-oProxyCommand=x\" has '=', a character not allowed in a host "
            "name or address (letters, digits and . - _ : % only)");
  EXPECT_EQ(plain_error("a\n-F slots=1\n"),
            "hosts:2: address \"-F\" begins with \"-\": no host name does (ssh would read it as "
            "an option)");
}

TEST(HostfilePlain, DuplicateHost) {
  EXPECT_EQ(plain_error("a\nb\n\na slots=2\n"),
            "hosts:4: host \"a\" is listed twice: hosts:1 has it already");
}

TEST(HostfilePlain, NoHosts) {
  EXPECT_EQ(plain_error(""), "hosts: no hosts");
  EXPECT_EQ(plain_error("# only a comment\n\n"), "hosts: no hosts");
}

// ---- load_hostfile ----------------------------------------------------------------------------

class LoadHostfile : public test::TempDirTest {};

std::string load_error(const std::string& path) {
  return error_of([&] { load_hostfile(path); });
}

TEST_F(LoadHostfile, TomlByExtension) {
  std::string path =
      write("cluster.toml", "[[hosts]]\naddress = \"198.18.0.1\"\nlocal_worker_num = 2\n");
  Cluster c = load_hostfile(path);
  EXPECT_EQ(c.path, path);
  ASSERT_EQ(c.hosts.size(), 1u);
  EXPECT_EQ(c.hosts[0].address, "198.18.0.1");
  EXPECT_EQ(c.hosts[0].local_worker_num, 2);
  EXPECT_EQ(c.hosts[0].origin, path + ":1");
}

TEST_F(LoadHostfile, PlainForAnyOtherName) {
  for (const char* name : {"hostfile", "hosts.txt", "cluster.tom", "x.toml.bak"}) {
    std::string path = write(name, "198.18.0.1 slots=3\n198.18.0.2\n");
    Cluster c = load_hostfile(path);
    ASSERT_EQ(c.hosts.size(), 2u) << name;
    EXPECT_EQ(c.hosts[0].local_worker_num, 3) << name;
    EXPECT_EQ(c.hosts[1].origin, path + ":2") << name;
  }
}

TEST_F(LoadHostfile, TomlTextInAPlainFileIsReadAsPlainAndTheErrorSaysWhy) {
  std::string path = write("hosts", "[[hosts]]\naddress = \"a\"\n");
  EXPECT_EQ(load_error(path), path +
                                  ":1: address \"[[hosts]]\": nested \"[\" in node set (read in "
                                  "the plain format: a TOML host file's name ends in \".toml\")");
}

TEST_F(LoadHostfile, TheTomlEndingInCapitalsToo) {
  std::string path = write("HOSTS.TOML", "[[hosts]]\naddress = \"198.18.0.1\"\n");
  EXPECT_EQ(load_hostfile(path).hosts.size(), 1u);
}

TEST_F(LoadHostfile, ErrorsNameTheFile) {
  std::string path = write("bad.toml", "[[hosts]]\naddress = \"a\"\nport = 0\n");
  EXPECT_EQ(load_error(path), path + ":3:8: key \"port\" = 0 is out of range 1..65535");
}

TEST_F(LoadHostfile, UnreadableFile) {
  std::string path = dir_ + "/missing.toml";
  EXPECT_EQ(load_error(path), path + ": cannot read host file: No such file or directory");
}

// /dev/zero or a data file given by mistake: refused before it fills the memory.
TEST_F(LoadHostfile, AFileBeyondSixteenMebibytesIsNoHostFile) {
  EXPECT_EQ(load_error("/dev/zero"),
            "/dev/zero: cannot read host file: larger than 16777216 bytes");
}

// An editor's byte order mark is no part of the first address.
TEST_F(LoadHostfile, PlainFormatSkipsAByteOrderMark) {
  std::string path = write("hosts", "\xEF\xBB\xBFnode1 slots=2\n");
  Cluster c = load_hostfile(path);
  ASSERT_EQ(c.hosts.size(), 1u);
  EXPECT_EQ(c.hosts[0].address, "node1");
}

TEST_F(LoadHostfile, DirectoryIsUnreadable) {
  std::filesystem::create_directory(dir_ + "/d.toml");
  EXPECT_EQ(load_error(dir_ + "/d.toml"), dir_ + "/d.toml: cannot read host file: Is a directory");
}

}  // namespace
}  // namespace msrun_ssh

namespace msrun_ssh {
namespace {

TEST(HostfilePlain, MoreThan16384HostsIsAnError) {
  EXPECT_EQ(plain_error("a[0-9999]\nb[0-9999]\n"),
            "hosts:2: more than 16384 hosts in the host file");
}

}  // namespace
TEST(Hostfile, ContractInDefaults) {
  Cluster c = parse_toml_hostfile("[defaults]\ncontract = \"torch\"\n[[hosts]]\naddress = \"a\"\n",
                                  "h.toml");
  EXPECT_EQ(c.contract, "torch");
  EXPECT_EQ(parse_toml_hostfile("[[hosts]]\naddress = \"a\"\n", "h.toml").contract, "");
  EXPECT_EQ(toml_error("[defaults]\ncontract = \"mpi\"\n[[hosts]]\naddress = \"a\"\n"),
            "h.toml:2:12: contract \"mpi\" is not msrun or torch");
  // A host cannot have a contract of its own: one job, one contract.
  EXPECT_NE(toml_error("[[hosts]]\naddress = \"a\"\ncontract = \"torch\"\n")
                .find("unknown key \"contract\" in [[hosts]]"),
            std::string::npos);
}

}  // namespace msrun_ssh
