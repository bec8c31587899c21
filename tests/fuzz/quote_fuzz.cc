// Fuzzes shell_quote / shell_join (src/command/command.cc) for the property command.h promises:
// the argv a POSIX shell sees equals the words we quoted, byte for byte; and process_launch_of
// for giving back the parts of a process command (check_launch), and sampler_words_of for a
// sampler command's (check_sampler).
//
// The input split on NUL bytes gives the words (argv cannot hold NUL, so words never do; empty
// words come from adjacent NULs). Each input is checked two ways:
//  1. In process, by parse_sh_words below: a strict parser of the POSIX shell word syntax that
//     quoting may use (blanks between words, '...' literal strings, \c escapes, \<newline>
//     continuations, plus unquoted characters that no shell expands). Anything else (an unquoted
//     $ ` " ; & | < > ( ) * ? [ ~ # = { } ! ^ newline, ...) is refused: a finding, since only a
//     real shell could tell what it does. The words parsed must equal the input words, for
//     shell_join(words) and for shell_quote(word) of every word.
//  2. By real shells: `sh -c "printf '%s\0' x WORDS"` (and bash, each in the C and C.UTF-8
//     locales) run with posix_spawn; the bytes printed must be x, then the words, NUL-terminated.
//     This runs for the first 64 inputs of a process (the seed corpus, or a reproducer given on
//     the command line) and then every 1000th input, one shell/locale per time; set
//     MSRUN_SSH_FUZZ_EXEC_ALL=1 to run every input through every shell (e.g. with -runs=0 on a
//     corpus directory as a regression check).
#include <fcntl.h>
#include <fmt/format.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_check.h"
#include "msrun_ssh/command.h"
#include "msrun_ssh/watch.h"

namespace {

constexpr size_t kExecFirst = 64;
constexpr size_t kExecEvery = 1000;
constexpr size_t kMaxCommand = 100000;  // below Linux's 128 KiB limit for one argv string

std::vector<std::string> split_words(std::string_view input) {
  std::vector<std::string> words;
  if (input.empty()) return words;
  size_t start = 0;
  while (true) {
    size_t nul = input.find('\0', start);
    words.emplace_back(input.substr(start, nul == input.npos ? input.npos : nul - start));
    if (nul == input.npos) break;
    start = nul + 1;
  }
  return words;
}

// Characters that are literal in every POSIX shell when unquoted, anywhere in a word.
bool plain_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-' || c == '.' || c == '/' || c == ',' || c == ':' || c == '@' || c == '+' ||
         c == '%';
}

// Splits `s` into words exactly as sh does for the syntax it accepts; returns false (with `why`)
// for anything outside it.
bool parse_sh_words(std::string_view s, std::vector<std::string>& out, std::string& why) {
  std::string cur;
  bool in_word = false;
  size_t i = 0;
  while (i < s.size()) {
    char c = s[i];
    if (c == ' ' || c == '\t') {
      if (in_word) out.push_back(cur);
      cur.clear();
      in_word = false;
      ++i;
    } else if (c == '\'') {
      size_t close = s.find('\'', i + 1);
      if (close == std::string_view::npos) {
        why = "unterminated single quote at " + std::to_string(i);
        return false;
      }
      cur.append(s.substr(i + 1, close - i - 1));  // everything literal, newlines and \ too
      in_word = true;
      i = close + 1;
    } else if (c == '\\') {
      if (i + 1 == s.size()) {
        why = "backslash at the end";
        return false;
      }
      if (s[i + 1] != '\n') {  // \<newline> is removed: a continuation, the word goes on
        cur += s[i + 1];
        in_word = true;
      }
      i += 2;
    } else if (plain_char(c)) {
      cur += c;
      in_word = true;
      ++i;
    } else {
      char buf[64];
      std::snprintf(buf, sizeof buf, "unquoted byte 0x%02x at %zu", static_cast<unsigned char>(c),
                    i);
      why = buf;
      return false;
    }
  }
  if (in_word) out.push_back(cur);
  return true;
}

std::string printable(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  return out;
}

void check_parse(const std::vector<std::string>& want, const std::string& quoted) {
  std::vector<std::string> got;
  std::string why;
  FUZZ_CHECK(parse_sh_words(quoted, got, why), "not plain sh syntax (%s): %s", why.c_str(),
             printable(quoted).c_str());
  FUZZ_CHECK(got.size() == want.size(), "%zu words became %zu: %s", want.size(), got.size(),
             printable(quoted).c_str());
  for (size_t i = 0; i < got.size(); ++i)
    FUZZ_CHECK(got[i] == want[i], "word %zu \"%s\" became \"%s\" in %s", i,
               printable(want[i]).c_str(), printable(got[i]).c_str(), printable(quoted).c_str());
}

struct Shell {
  const char* path;
  const char* locale;
};
constexpr Shell kShells[] = {
    {"/bin/sh", "LC_ALL=C"},
    {"/bin/sh", "LC_ALL=C.UTF-8"},
    {"/bin/bash", "LC_ALL=C"},
    {"/bin/bash", "LC_ALL=C.UTF-8"},
};

// Runs `shell -c command` with stdin from /dev/null; returns its stdout, `status` its wait status.
std::string run_shell(const Shell& shell, const std::string& command, int& status) {
  int fds[2];
  FUZZ_CHECK(::pipe2(fds, O_CLOEXEC) == 0, "pipe: %s", std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  std::string path = shell.path;
  std::string dash_c = "-c";
  std::string cmd = command;
  char* argv[] = {path.data(), dash_c.data(), cmd.data(), nullptr};
  std::string env_path = "PATH=/usr/bin:/bin";
  std::string env_locale = shell.locale;
  char* envp[] = {env_path.data(), env_locale.data(), nullptr};
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, shell.path, &actions, nullptr, argv, envp);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  FUZZ_CHECK(rc == 0, "posix_spawn %s: %s", shell.path, std::strerror(rc));
  std::string out;
  char buf[65536];
  while (true) {
    ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return out;
}

void check_exec(const Shell& shell, const std::vector<std::string>& words,
                const std::string& joined) {
  std::string command = "printf '%s\\0' x";
  if (!joined.empty()) command += " " + joined;
  if (command.size() > kMaxCommand) return;
  std::string want = std::string("x") + '\0';
  for (const auto& w : words) want += w + '\0';
  int status = 0;
  std::string got = run_shell(shell, command, status);
  FUZZ_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0 && got == want,
             "%s (%s) -c %s\n  exit status 0x%x\n  printed  %s\n  expected %s", shell.path,
             shell.locale, printable(command).c_str(), status, printable(got).c_str(),
             printable(want).c_str());
}

bool exec_all() {
  static const bool all = [] {
    const char* v = std::getenv("MSRUN_SSH_FUZZ_EXEC_ALL");
    return v && *v && std::string_view(v) != "0";
  }();
  return all;
}

// process_launch_of, the launch agent's reading of a process command, gives back exactly the parts
// process_command was given (the first word the workdir, the second a variable's value, the rest
// the argv), and never fails on text it did not make (`raw`, the input as it is). It may decline
// (the agent then runs the command with /bin/sh -c) only for an argv that starts with the words
// of its own `sh -c` wrappers.
void check_launch(const std::vector<std::string>& words, std::string_view raw) {
  (void)msrun_ssh::process_launch_of(raw);
  if (words.size() < 3) return;
  msrun_ssh::Process p;
  p.workdir = words[0];
  p.env = {{"V", words[1]}};
  p.argv.assign(words.begin() + 2, words.end());
  p.stack_dumps = words[1].size() % 2 == 1;
  std::string command = msrun_ssh::process_command(p, "j");
  std::optional<msrun_ssh::ProcessLaunch> l = msrun_ssh::process_launch_of(command);
  if (!l) {
    FUZZ_CHECK(p.argv.size() > 1 && p.argv[0] == "sh" && p.argv[1] == "-c",
               "a process command was not taken apart: %s", printable(command).c_str());
    return;
  }
  std::vector<std::string> env{"MSRUN_SSH_JOB=j", "V=" + words[1]};
  FUZZ_CHECK(l->workdir == p.workdir && l->env == env && l->argv == p.argv &&
                 l->stack_site == p.stack_dumps && l->stdin_null,
             "taken apart wrongly: %s", printable(command).c_str());
}

// The launch agent's readers of the watchdog's and the sampler's commands: any text is taken or
// refused without harm, and a sampler command gives back exactly the words it was made from.
void check_sampler(const std::vector<std::string>& words, std::string_view raw) {
  (void)msrun_ssh::watchdog_args_of(raw);
  (void)msrun_ssh::sampler_words_of(raw);
  if (words.size() < 2) return;
  double interval = 0.1 * static_cast<double>(1 + raw.size() % 50);
  std::string command = msrun_ssh::sampler_command(words[0], interval, words[1]);
  std::optional<std::string> back = msrun_ssh::sampler_words_of(command);
  std::string want = words[0] + '\0' + fmt::format("{:g}", interval) + '\0' + words[1] + '\0';
  FUZZ_CHECK(back == want, "a sampler command was taken apart wrongly: %s",
             printable(command).c_str());
}

size_t calls = 0;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> words =
      split_words(std::string_view(reinterpret_cast<const char*>(data), size));
  std::string joined = msrun_ssh::shell_join(words);
  check_parse(words, joined);
  check_launch(words, std::string_view(reinterpret_cast<const char*>(data), size));
  check_sampler(words, std::string_view(reinterpret_cast<const char*>(data), size));
  for (const auto& w : words) {
    std::string q = msrun_ssh::shell_quote(w);
    FUZZ_CHECK(!q.empty(), "shell_quote gave nothing");
    check_parse({w}, q);
  }
  ++calls;
  constexpr size_t kNumShells = sizeof kShells / sizeof kShells[0];
  if (exec_all() || calls <= kExecFirst) {
    for (const Shell& shell : kShells) check_exec(shell, words, joined);
  } else if (calls % kExecEvery == 0) {
    check_exec(kShells[(calls / kExecEvery) % kNumShells], words, joined);
  }
  return 0;
}
