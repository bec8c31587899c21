// Binding requests (src/plan/binding.cc): boolean words, --bind_core / --bind_numa values in every
// accepted form, CPU lists, and every error message.
#include "msrun_ssh/binding.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "test_util.h"

namespace msrun_ssh {
namespace {

using Ranges = std::map<std::string, std::vector<std::string>>;
using Nodes = std::map<std::string, std::vector<int>>;
using Cpus = std::vector<int>;

using test::error_of;

std::string core_error(std::string_view text) {
  return error_of([&] { parse_bind_core(text, "--bind_core"); });
}
std::string numa_error(std::string_view text) {
  return error_of([&] { parse_bind_numa(text, "--bind_numa"); });
}
std::string cpu_error(std::string_view text) {
  return error_of([&] { parse_cpu_list(text, "where"); });
}

TEST(Binding, BoolWords) {
  for (const char* t : {"True", "true", "1"}) {
    bool out = false;
    EXPECT_TRUE(parse_bool_word(t, out)) << t;
    EXPECT_TRUE(out) << t;
  }
  for (const char* t : {"False", "false", "0"}) {
    bool out = true;
    EXPECT_TRUE(parse_bool_word(t, out)) << t;
    EXPECT_FALSE(out) << t;
  }
}

TEST(Binding, OtherWordsAreNotBooleans) {
  for (const char* t : {"yes", "no", "on", "", "2", " true", "t", "truee"}) {
    bool out = true;
    EXPECT_FALSE(parse_bool_word(t, out)) << t;
    EXPECT_TRUE(out) << "left alone: " << t;
  }
}

// msrun compares value.lower() with "true": any capitals.
TEST(Binding, BooleansInAnyCapitals) {
  for (const char* t : {"TRUE", "tRuE"}) {
    bool out = false;
    EXPECT_TRUE(parse_bool_word(t, out) && out) << t;
  }
  bool out = true;
  EXPECT_TRUE(parse_bool_word("FALSE", out) && !out);
}

TEST(Binding, BindCoreBooleans) {
  EXPECT_EQ(parse_bind_core("True", "x").mode, BindCore::Mode::kAuto);
  EXPECT_EQ(parse_bind_core("1", "x").mode, BindCore::Mode::kAuto);
  EXPECT_EQ(parse_bind_core("false", "x").mode, BindCore::Mode::kOff);
  EXPECT_EQ(parse_bind_core(" 0 ", "x").mode, BindCore::Mode::kOff);
  EXPECT_TRUE(parse_bind_core("True", "x").ranges.empty());
}

TEST(Binding, BindCoreDict) {
  BindCore b = parse_bind_core(
      R"({"scheduler":["0-3"],"device0":["4-9","20-25"],"device12":["30"]})", "--bind_core");
  EXPECT_EQ(b.mode, BindCore::Mode::kManual);
  EXPECT_EQ(b.ranges,
            (Ranges{{"device0", {"4-9", "20-25"}}, {"device12", {"30"}}, {"scheduler", {"0-3"}}}));
}

TEST(Binding, BindCoreEmptyListIsAKeyWithNoRanges) {
  BindCore b = parse_bind_core(R"({"scheduler":[],"device0":["1"]})", "--bind_core");
  EXPECT_EQ(b.ranges, (Ranges{{"device0", {"1"}}, {"scheduler", {}}}));
}

TEST(Binding, BindCoreEmptyDictIsManualWithNoKeys) {
  BindCore b = parse_bind_core("{}", "--bind_core");
  EXPECT_EQ(b.mode, BindCore::Mode::kManual);
  EXPECT_TRUE(b.ranges.empty());
}

TEST(Binding, BindCoreErrors) {
  EXPECT_EQ(core_error("yes"),
            "--bind_core: not a boolean (True/False) nor valid JSON (line 1, column 1: syntax "
            "error while parsing value - invalid literal; last read: 'y'): yes");
  EXPECT_EQ(core_error("{\"device0\": [\"0-3\"]"),
            "--bind_core: not a boolean (True/False) nor valid JSON (line 1, column 20: syntax "
            "error while parsing object - unexpected end of input; expected '}'): "
            "{\"device0\": [\"0-3\"]");
  // A number too large is an error of its own in nlohmann's parser: said the same way.
  EXPECT_EQ(core_error("8884e843"),
            "--bind_core: not a boolean (True/False) nor valid JSON (number overflow parsing "
            "'8884e843'): 8884e843");
  // A NUL byte would end nlohmann's text: what follows it is not taken as nothing.
  EXPECT_EQ(core_error(std::string("{}") + '\0' + "{{"),
            "--bind_core: not valid JSON (a NUL byte at offset 2): {}\\x00{{");
  // A long value is quoted by its start.
  std::string long_one = core_error(std::string(300, '['));
  EXPECT_TRUE(long_one.ends_with("): " + std::string(200, '[') + "...")) << long_one;
  EXPECT_EQ(core_error("[\"0-3\"]"),
            "--bind_core: expected a JSON object, got an array: [\"0-3\"]");
  EXPECT_EQ(core_error("null"), "--bind_core: expected a JSON object, got null: null");
  // A deeply nested value is named by its type, not written out again (that recursed).
  std::string deep = core_error(std::string(100000, '[') + std::string(100000, ']'));
  EXPECT_EQ(deep,
            "--bind_core: expected a JSON object, got an array: " + std::string(200, '[') + "...");
  EXPECT_EQ(
      core_error("{\"gpu0\":[\"0\"]}"),
      "--bind_core: unknown key \"gpu0\" (expected \"scheduler\" or \"device<N>\", as msrun)");
  EXPECT_EQ(core_error("{\"device0\":\"0-3\"}"),
            "--bind_core key \"device0\": expected a list of CPU ranges");
  EXPECT_EQ(core_error("{\"device0\":[0]}"),
            "--bind_core key \"device0\": expected CPU ranges as strings like \"0-3\"");
  EXPECT_EQ(core_error("{\"device0\":[\"3-0\"]}"),
            "--bind_core key \"device0\": reversed CPU range \"3-0\"");
  EXPECT_EQ(core_error("{\"scheduler\":[\"a\"]}"),
            "--bind_core key \"scheduler\": bad CPU range \"a\"");
}

TEST(Binding, BindKeys) {
  for (const char* k : {"scheduler", "device0", "device7", "device123456"})
    EXPECT_NO_THROW(validate_bind_key(k, "w")) << k;
  for (const char* k : {"device", "device-1", "device1a", "Device0", "sched", "device1234567", "",
                        "device+1", "device 1"})
    EXPECT_EQ(error_of([&] { validate_bind_key(k, "w"); }),
              std::string("w: unknown key \"") + k +
                  "\" (expected \"scheduler\" or \"device<N>\", as msrun)")
        << k;
}

TEST(Binding, DeviceNumber) {
  EXPECT_EQ(device_number("device0"), 0);
  EXPECT_EQ(device_number("device7"), 7);
  EXPECT_EQ(device_number("device01"), 1);
  EXPECT_EQ(device_number("device123456"), 123456);
  for (const char* k : {"scheduler", "device", "device-1", "device-0", "device+1", "device1a",
                        "device 1", "Device0", "device1234567", "", "dev"})
    EXPECT_EQ(device_number(k), std::nullopt) << k;
  // The bind-dict check uses the same parser and names the key it refuses.
  EXPECT_EQ(error_of([] { validate_bind_key("device-0", "h.toml:3"); }),
            "h.toml:3: unknown key \"device-0\" (expected \"scheduler\" or \"device<N>\", as "
            "msrun)");
}

TEST(Binding, CommandLineWinsOverTheHostFile) {
  BindRequest host{parse_bind_core(R"({"device0": ["0-3"]})", "h"), parse_bind_numa("True", "h")};
  BindRequest unset;
  EXPECT_EQ(binding_in_effect(unset, host), host);
  BindRequest cli{parse_bind_core("True", "c"), BindNuma{}};
  BindRequest got = binding_in_effect(cli, host);
  EXPECT_EQ(got.core, cli.core);             // the command line's bind_core
  EXPECT_EQ(got.numa, host.numa);            // bind_numa unset there: the host file's
  cli.numa = parse_bind_numa("False", "c");  // an explicit off wins too
  EXPECT_EQ(binding_in_effect(cli, host), cli);
  EXPECT_EQ(binding_in_effect(cli, unset), cli);
  EXPECT_EQ(binding_in_effect(unset, unset), unset);
}

TEST(Binding, BindNumaBooleans) {
  EXPECT_EQ(parse_bind_numa("True", "x").mode, BindNuma::Mode::kAuto);
  EXPECT_EQ(parse_bind_numa("0", "x").mode, BindNuma::Mode::kOff);
}

TEST(Binding, BindNumaDict) {
  BindNuma b = parse_bind_numa(R"({"scheduler": 0, "device0": [0, 1], "device1": 4095})", "x");
  EXPECT_EQ(b.mode, BindNuma::Mode::kManual);
  EXPECT_EQ(b.nodes, (Nodes{{"device0", {0, 1}}, {"device1", {4095}}, {"scheduler", {0}}}));
}

TEST(Binding, BindNumaErrors) {
  EXPECT_EQ(numa_error("maybe"),
            "--bind_numa: not a boolean (True/False) nor valid JSON (line 1, column 1: syntax "
            "error while parsing value - invalid literal; last read: 'm'): maybe");
  EXPECT_EQ(numa_error("3"), "--bind_numa: expected a JSON object, got a number: 3");
  EXPECT_EQ(
      numa_error(R"({"dev0": 0})"),
      "--bind_numa: unknown key \"dev0\" (expected \"scheduler\" or \"device<N>\", as msrun)");
  EXPECT_EQ(numa_error(R"({"device0": -1})"),
            "--bind_numa key \"device0\": expected NUMA node ids (0-4095)");
  EXPECT_EQ(numa_error(R"({"device0": 4096})"),
            "--bind_numa key \"device0\": expected NUMA node ids (0-4095)");
  EXPECT_EQ(numa_error(R"({"device0": "0"})"),
            "--bind_numa key \"device0\": expected NUMA node ids (0-4095)");
  EXPECT_EQ(numa_error(R"({"device0": 1.5})"),
            "--bind_numa key \"device0\": expected NUMA node ids (0-4095)");
  EXPECT_EQ(numa_error(R"({"device0": [0, [1]]})"),
            "--bind_numa key \"device0\": expected NUMA node ids (0-4095)");
  EXPECT_EQ(numa_error(R"({"device0": []})"), "--bind_numa key \"device0\": empty NUMA node list");
}

class BindNumaFile : public test::TempDirTest {};

TEST_F(BindNumaFile, ReadsTheObjectFromTheFile) {
  std::string path = write("numa.json", R"({"scheduler": 1, "device0": [0]})");
  BindNuma b = parse_bind_numa(path, "--bind_numa");
  EXPECT_EQ(b.mode, BindNuma::Mode::kManual);
  EXPECT_EQ(b.nodes, (Nodes{{"device0", {0}}, {"scheduler", {1}}}));
}

TEST_F(BindNumaFile, MissingFile) {
  std::string path = dir_ + "/none.json";
  EXPECT_EQ(numa_error(path),
            "--bind_numa: cannot read file " + path + ": No such file or directory");
  // A directory, and /dev/zero (a file without end) are said, not read forever.
  EXPECT_EQ(numa_error(dir_ + "/d.json"),
            "--bind_numa: cannot read file " + dir_ + "/d.json: No such file or directory");
  std::filesystem::create_directory(dir_ + "/d.json");
  EXPECT_EQ(numa_error(dir_ + "/d.json"),
            "--bind_numa: cannot read file " + dir_ + "/d.json: Is a directory");
  std::filesystem::create_symlink("/dev/zero", dir_ + "/zero.json");
  EXPECT_EQ(numa_error(dir_ + "/zero.json"),
            "--bind_numa: cannot read file " + dir_ + "/zero.json: larger than 1048576 bytes");
}

TEST_F(BindNumaFile, ErrorsNameTheFile) {
  std::string path = write("bad.json", R"({"device0": "x"})");
  EXPECT_EQ(numa_error(path),
            "--bind_numa (file " + path + ") key \"device0\": expected NUMA node ids (0-4095)");
  std::string garbage = write("garbage.json", "not json");
  EXPECT_EQ(numa_error(garbage), "--bind_numa (file " + garbage +
                                     "): not valid JSON (line 1, column 2: syntax error while "
                                     "parsing value - invalid literal; last read: 'no')");
  // The file is named, not quoted: a long one is not printed whole.
  std::string open_list = write("open.json", "{\"device0\": [" + std::string(100000, '0'));
  EXPECT_EQ(numa_error(open_list).find("000000"), std::string::npos);
  // nlohmann names the last token it read: an unterminated string is the rest of the file.
  std::string open_string = write("string.json", "{\"device0\": \"" + std::string(100000, 'x'));
  std::string said = numa_error(open_string);
  EXPECT_LT(said.size(), open_string.size() + 250) << said.size();  // not its 100,000 x
  EXPECT_NE(said.find("line 1, column 100014: syntax error while parsing value - invalid string: "
                      "missing closing quote; last read: '\"xxx"),
            std::string::npos)
      << said.substr(0, 300);
  std::string after_nul = write("nul.json", std::string("{\"device0\": [0]}\n") + '\0' + "{{{");
  EXPECT_EQ(numa_error(after_nul),
            "--bind_numa (file " + after_nul + "): not valid JSON (a NUL byte at offset 17)");
}

TEST(Binding, CpuLists) {
  EXPECT_EQ(parse_cpu_list("0", "w"), Cpus{0});
  EXPECT_EQ(parse_cpu_list("0-3,8,10-11", "w"), (Cpus{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(parse_cpu_list("8,0-2,1", "w"), (Cpus{0, 1, 2, 8}));  // sorted, unique
  EXPECT_EQ(parse_cpu_list(" 1 , 3-4 ", "w"), (Cpus{1, 3, 4}));
  EXPECT_EQ(parse_cpu_list("5-5", "w"), Cpus{5});
  EXPECT_EQ(parse_cpu_list("65535", "w"), Cpus{65535});
}

TEST(Binding, CpuListErrors) {
  const test::Case kCases[] = {
      {"", "where: empty CPU list"},
      {"  ", "where: empty CPU list"},
      {"a", "where: bad CPU range \"a\""},
      {"1,", "where: bad CPU range \"\""},
      {"1-", "where: bad CPU range \"1-\""},
      {"-1", "where: bad CPU range \"-1\""},
      {"1-2-3", "where: bad CPU range \"1-2-3\""},
      {"0x1", "where: bad CPU range \"0x1\""},
      {"4-2", "where: reversed CPU range \"4-2\""},
      {"65536", "where: CPU id out of range in \"65536\""},
      {"0-70000", "where: CPU id out of range in \"0-70000\""},
      {"1234567", "where: bad CPU range \"1234567\""},
  };
  for (const auto& c : kCases) EXPECT_EQ(cpu_error(c.input), c.expected) << c.input;
}

TEST(Binding, FormatCpuList) {
  EXPECT_EQ(format_cpu_list({}), "");
  EXPECT_EQ(format_cpu_list({3}), "3");
  EXPECT_EQ(format_cpu_list({0, 1, 2, 3, 8, 10, 11}), "0-3,8,10-11");
  EXPECT_EQ(format_cpu_list({1, 3, 5}), "1,3,5");
  EXPECT_EQ(format_cpu_list(parse_cpu_list("12-23,0-11", "w")), "0-23");
}

}  // namespace
}  // namespace msrun_ssh

namespace msrun_ssh {
namespace {

TEST(Binding, LongCpuListsAreParsedInTimeOfTheirLength) {
  std::vector<int> cpus = parse_cpu_list(test::comma_list("0-65535", 500), "x");
  ASSERT_EQ(cpus.size(), 65536u);
  EXPECT_EQ(cpus.front(), 0);
  EXPECT_EQ(cpus.back(), 65535);
  EXPECT_EQ(parse_cpu_list("7,3-4,3", "x"), (std::vector<int>{3, 4, 7}));
}

}  // namespace
}  // namespace msrun_ssh
