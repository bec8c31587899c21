// What many unit tests need: the message of an InputError, whole files and command output, a
// temporary directory per test, and a few lookups into plans and CPU lists.
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/types.h>

#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "msrun_ssh/error.h"
#include "msrun_ssh/plan.h"

namespace msrun_ssh::test {

// The message of the InputError that `f()` throws, or "no error" when it throws none.
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

// A row of a table-driven test: an input and what it must give.
struct Case {
  std::string input;
  std::string expected;
};

// Everything in the file at `path`, byte for byte ("" when it cannot be read).
std::string slurp(const std::string& path);

// Everything in the file `relative` to the source tree (tests/data/...); the test fails when it
// cannot be read.
std::string source_file(const std::string& relative);

// The hwloc XML export or probe output tests/data/topology/NAME (see generate.py there).
std::string topology_file(const std::string& name);

// Everything left to read from `f`.
std::string read_all(std::FILE* f);

// Runs `command` with /bin/sh (popen) and returns its stdout; when `status` is given, the wait
// status there. The test fails when it cannot be started.
std::string shell_output(const std::string& command, int* status = nullptr);

// Whether python3 is on the PATH (tests that run Python programs skip without it).
bool have_python3();

// A port of 127.0.0.1 that was free a moment ago.
int free_port();

// How many times `what` occurs in `text` (overlapping occurrences counted).
size_t count(const std::string& text, const std::string& what);

// `n` copies of `word`, separated by commas.
std::string comma_list(const std::string& word, int n);

// The CPU list `list` ("0-3,8"), which must be valid.
std::vector<int> cpus(std::string_view list);

// A host of the host file h.toml (its line 1): `address`, `workers` workers, and `env`.
Host host(const std::string& address, std::optional<int> workers, EnvList env = {});

// The value of `name` in the environment of `process`, or nullptr.
const std::string* env_of(const Process& process, const std::string& name);

// A directory of its own under /tmp, removed with everything in it when the object goes.
class TempDir {
 public:
  TempDir();  // throws std::runtime_error when it cannot be made
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // Writes `text` to the file `name` in the directory and returns the file's path.
  std::string write(const std::string& name, const std::string& text) const;

 private:
  std::string path_;
};

// A child process of the test, SIGKILLed and reaped when the object goes, whatever ends the test;
// once the test has reaped it itself, `reaped()` says so (a reaped pid may soon be another's).
class Child {
 public:
  explicit Child(pid_t pid) : pid_(pid) {}
  ~Child();
  Child(Child&& other) noexcept : pid_(std::exchange(other.pid_, -1)) {}
  Child& operator=(Child&&) = delete;

  pid_t pid() const { return pid_; }
  void reaped() { pid_ = -1; }

 private:
  pid_t pid_;
};

// Runs a copy of /bin/sleep, made at `path`, for `seconds` (its argv[0] `name`), and returns once
// its exec is done (its /proc/PID/comm is the copy's file name); throws std::runtime_error when it
// cannot be started.
Child sleep_copy(const std::string& path, const std::string& name, int seconds);

// A fixture whose every test has a fresh temporary directory `dir_`, made before SetUp and removed
// after TearDown.
class TempDirTest : public ::testing::Test {
 protected:
  std::string write(const std::string& name, const std::string& text) const {
    return tmp_.write(name, text);
  }

  TempDir tmp_;
  const std::string dir_ = tmp_.path();
};

// The "ranks" list of one line of a host's sampler (src/remote/sampler.pl): each of `ranks` with
// one process, `cpu_ticks` of CPU (1/100 s), `rss_kb` of memory and the state `state`.
inline std::string sampler_ranks(const std::vector<std::string>& ranks, double cpu_ticks,
                                 int rss_kb, char state) {
  std::string out;
  for (const auto& r : ranks)
    out += fmt::format(
        "{}{{\"rank\":\"{}\",\"pids\":1,\"cpu\":{},\"wait_ns\":0,\"rss_kb\":{},\"thr_ns\":-1,"
        "\"state\":\"{}\"}}",
        out.empty() ? "" : ",", r, cpu_ticks, rss_kb, state);
  return out;
}

}  // namespace msrun_ssh::test
