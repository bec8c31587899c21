// The options' table (src/cli/option_table.cc) as the parser reads it (src/cli/cli.cc), and what is
// made from it: --help of every command, the man page, the hidden --man and --complete-options.
#include "msrun_ssh/help.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "msrun_ssh/cli.h"
#include "test_util.h"

namespace msrun_ssh {
namespace {

using Names = std::set<std::string>;

// "-h, --help" or "--hostfile".
std::string label(const OptionSpec& d) {
  return d.short_name.empty() ? d.name : d.short_name + ", " + d.name;
}

// "--help" in the man page: "\\fB\\-\\-help\\fR".
std::string man_bold(const std::string& name) {
  std::string out = "\\fB";
  for (char ch : name) {
    if (ch == '-') out += '\\';
    out += ch;
  }
  return out + "\\fR";
}

// "-h, --help" or "--hostfile" in the man page.
std::string man_label(const OptionSpec& d) {
  return d.short_name.empty() ? man_bold(d.name) : man_bold(d.short_name) + ", " + man_bold(d.name);
}

// The arguments that start `command` with one option alone (no value): parsing them fails with
// "unknown option" exactly when the command refuses the option.
std::vector<std::string> command_with(const CommandDoc& command, const std::string& option) {
  std::vector<std::string> args;
  if (command.command != Command::kRun) args.push_back(command.name);
  args.push_back(option);
  return args;
}

bool accepted(const CommandDoc& command, const std::string& option) {
  std::string error = test::error_of([&] {
    parse_args(command_with(command, option), [](const char*) -> const char* { return nullptr; });
  });
  return error.rfind("unknown option", 0) != 0;
}

TEST(Help, EveryOptionIsNamedOnceAndParsedButHelpAndVersion) {
  Names names;
  for (const auto& d : option_table()) {
    EXPECT_TRUE(names.insert(d.name).second) << d.name;
    EXPECT_EQ(d.apply == nullptr, d.name == "--help" || d.name == "--version") << d.name;
    EXPECT_EQ(find_option(d.name), &d);
  }
  EXPECT_TRUE(names.count("--hostfile"));
  EXPECT_TRUE(names.count("--job"));
  EXPECT_EQ(find_option("--frobnicate"), nullptr);
}

TEST(Help, EveryOptionIsAcceptedExactlyByTheCommandsItIsDocumentedFor) {
  for (const auto& d : option_table()) {
    EXPECT_NE(d.commands, 0u) << d.name << " is documented for no command";
    for (const auto& c : command_docs())
      EXPECT_EQ(accepted(c, d.name), d.taken_by(c.command)) << c.name << " " << d.name;
  }
  // The probe itself tells refused from accepted.
  EXPECT_FALSE(accepted(command_docs()[0], "--job"));
  EXPECT_FALSE(accepted(command_docs()[0], "--frobnicate"));
  EXPECT_TRUE(accepted(command_docs()[0], "--log_dir"));
}

TEST(Help, EveryCommandIsDocumentedOnce) {
  Names names;
  for (const auto& c : command_docs()) EXPECT_TRUE(names.insert(c.name).second) << c.name;
  EXPECT_EQ(names,
            (Names{"run", "check", "stop", "list", "status", "logs", "sync", "stack", "top"}));
  EXPECT_EQ(command_docs()[0].command, Command::kRun);
}

TEST(Help, HelpOfEachCommandListsItsOptions) {
  for (const auto& c : command_docs()) {
    std::string help = help_text(c.command);
    EXPECT_EQ(help.rfind(fmt::format("usage: {}\n", c.usage), 0), 0u) << c.name;
    for (const auto& d : option_table()) {
      std::string line = fmt::format("\n  {}", label(d));
      if (!d.metavar.empty()) line += " " + d.metavar;
      EXPECT_EQ(help.find(line) != std::string::npos, d.taken_by(c.command))
          << c.name << " " << d.name;
    }
  }
}

TEST(Help, LinesFitAHundredColumns) {
  for (const auto& c : command_docs()) {
    std::istringstream in(help_text(c.command));
    for (std::string line; std::getline(in, line);)
      EXPECT_LE(line.size(), 100u) << c.name << ": " << line;
  }
}

TEST(Help, OptionTextsAreWrappedIntoTheirColumn) {
  std::string help = help_text(Command::kRun);
  EXPECT_NE(help.find("  --tail_worker_log R          ranks shown on the console, e.g. 0,3; -1 all "
                      "(default -1); logs keep\n                               all; what you type"),
            std::string::npos);
  // A label too long for its column puts the text on the next line.
  EXPECT_NE(help.find("  --strict_host_key_checking yes|accept-new|no\n                      "
                      "         (default: ssh config, else yes)\n"),
            std::string::npos);
}

TEST(Help, RunHelpEndsWithTheExitStatus) {
  std::string help = help_text(Command::kRun);
  const std::string exit_status =
      "\nExit status: 0 all processes exited 0; else the first failed process's status (128+N for "
      "signal N);\n2 usage or input error; 255 a host could not be reached, authenticated or "
      "verified, or was lost;\n124 --timeout passed or --hang_timeout found the job silent;\n254 "
      "the end of the job could not be confirmed on a host (the processes named may still run);\n"
      "130/143/129 interrupted by SIGINT/SIGTERM/SIGHUP (after teardown).\n";
  ASSERT_GE(help.size(), exit_status.size());
  EXPECT_EQ(help.substr(help.size() - exit_status.size()), exit_status);
  EXPECT_EQ(help_text(Command::kStop).find("Exit status"), std::string::npos);
  // Every command's usage is in the run's help.
  for (const auto& c : command_docs()) EXPECT_NE(help.find(c.usage), std::string::npos) << c.name;
}

TEST(Help, ManPageHasEverySectionAndEveryOption) {
  std::string man = man_page();
  size_t last = 0;
  for (const char* section :
       {".TH MSRUN\\-SSH 1", ".SH NAME", ".SH SYNOPSIS", ".SH DESCRIPTION", ".SH COMMANDS",
        ".SH OPTIONS", ".SH EXIT STATUS", ".SH FILES", ".SH ENVIRONMENT", ".SH SEE ALSO"}) {
    size_t at = man.find(section);
    EXPECT_NE(at, std::string::npos) << section;
    EXPECT_GE(at, last) << section << " out of order";
    last = at;
  }
  for (const auto& d : option_table())
    EXPECT_NE(man.find(fmt::format("\n{}{}", man_label(d), d.metavar.empty() ? "\n" : " ")),
              std::string::npos)
        << d.name;
  for (const auto& c : command_docs())
    EXPECT_NE(man.find(fmt::format(".B {}\n", c.name)), std::string::npos);
  EXPECT_NE(man.find("msrun\\-ssh " MSRUN_SSH_VERSION), std::string::npos);
}

TEST(Help, ManPageTextIsEscaped) {
  std::string man = man_page();
  std::istringstream in(man);
  for (std::string line; std::getline(in, line);) {
    // Dashes are escaped, outside comments.
    if (line.rfind(".\\\"", 0) != 0) {
      EXPECT_EQ(line.find("--"), std::string::npos) << line;
    }
    // Only the generator's own macros start a line; a text's "." or "'" is guarded by \&.
    if (line.empty() || (line[0] != '.' && line[0] != '\'')) continue;
    EXPECT_TRUE(line.rfind(".TH ", 0) == 0 || line.rfind(".SH ", 0) == 0 ||
                line.rfind(".SS ", 0) == 0 || line.rfind(".B", 0) == 0 || line == ".TP" ||
                line == ".PP" || line == ".nf" || line == ".fi" || line == ".nh" ||
                line.rfind(".I ", 0) == 0 || line.rfind(".\\\"", 0) == 0)
        << line;
  }
  // Option names in a text are bold, their dashes minus signs; "-1" too.
  EXPECT_NE(man.find("per-rank logs are written to \\fB\\-\\-log_dir\\fR."), std::string::npos);
  EXPECT_NE(man.find("0,3; \\-1 all"), std::string::npos);
}

TEST(Help, HiddenArguments) {
  EXPECT_EQ(hidden_output({"--man"}), man_page());
  EXPECT_EQ(hidden_output({}), std::nullopt);
  EXPECT_EQ(hidden_output({"--hostfile", "h", "train.py"}), std::nullopt);
  EXPECT_EQ(hidden_output({"--hostfile", "h", "--man"}), std::nullopt);
  EXPECT_EQ(test::error_of([] {
              hidden_output({"--complete-options", "frob"});
            }),
            "--complete-options: no command \"frob\"");
  EXPECT_EQ(test::error_of([] {
              hidden_output({"--complete-options", "stop", "x"});
            }),
            "--complete-options: no command \"x\"");
  // The hidden arguments are nowhere in --help.
  for (const auto& c : command_docs()) {
    EXPECT_EQ(help_text(c.command).find("--man"), std::string::npos);
    EXPECT_EQ(help_text(c.command).find("--complete"), std::string::npos);
  }
}

TEST(Help, CompleteOptionsListsTheOptionsOfTheCommand) {
  EXPECT_EQ(hidden_output({"--complete-options"}), hidden_output({"--complete-options", "run"}));
  for (const auto& c : command_docs()) {
    std::string expected;
    for (const auto& d : option_table())
      if (d.taken_by(c.command))
        expected += d.name + (d.metavar.empty() ? "" : " ") + d.metavar + "\n";
    EXPECT_EQ(hidden_output({"--complete-options", c.name}), expected) << c.name;
  }
  std::string stop = *hidden_output({"--complete-options", "stop"});
  EXPECT_NE(stop.find("\n--job ID\n"), std::string::npos);
  EXPECT_NE(stop.find("\n--help\n"), std::string::npos);
  EXPECT_EQ(stop.find("--bind_core"), std::string::npos);
}

}  // namespace
}  // namespace msrun_ssh
