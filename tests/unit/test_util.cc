#include "test_util.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "msrun_ssh/binding.h"

namespace msrun_ssh::test {
namespace {

// The launcher ignores SIGPIPE (signal_fd, base.h): a write to a command that has ended fails with
// EPIPE, which its transports handle. The tests run that code under the same rule from their
// start: with SIGPIPE's default, such a write (an agent that ended while a no-op frame went out)
// would end the whole test binary without a word.
[[maybe_unused]] const bool kSigpipeIgnored = [] {
  return std::signal(SIGPIPE, SIG_IGN) != SIG_ERR;
}();

}  // namespace

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string source_file(const std::string& relative) {
  std::string path = std::string(MSRUN_SSH_SOURCE_DIR) + "/" + relative;
  std::error_code ec;
  EXPECT_TRUE(std::filesystem::is_regular_file(path, ec)) << path;
  return slurp(path);
}

std::string topology_file(const std::string& name) {
  return source_file("tests/data/topology/" + name);
}

std::string read_all(std::FILE* f) {
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) out.append(buf, n);
  return out;
}

std::string shell_output(const std::string& command, int* status) {
  std::FILE* f = popen(command.c_str(), "r");
  EXPECT_NE(f, nullptr) << command;
  if (f == nullptr) return "";
  std::string out = read_all(f);
  int s = pclose(f);
  if (status != nullptr) *status = s;
  return out;
}

bool have_python3() { return std::system("command -v python3 >/dev/null 2>&1") == 0; }

int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos + 1)) ++n;
  return n;
}

std::string comma_list(const std::string& word, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) {
    if (i > 0) out += ',';
    out += word;
  }
  return out;
}

std::vector<int> cpus(std::string_view list) { return parse_cpu_list(list, "test"); }

Host host(const std::string& address, std::optional<int> workers, EnvList env) {
  Host h;
  h.address = address;
  h.local_worker_num = workers;
  h.env = std::move(env);
  h.origin = "h.toml:1";
  return h;
}

const std::string* env_of(const Process& process, const std::string& name) {
  for (const auto& [n, v] : process.env)
    if (n == name) return &v;
  return nullptr;
}

Child::~Child() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
}

Child sleep_copy(const std::string& path, const std::string& name, int seconds) {
  std::filesystem::copy_file("/bin/sleep", path);
  std::string arg = std::to_string(seconds);
  pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork: " + std::string(std::strerror(errno)));
  if (pid == 0) {
    execl(path.c_str(), name.c_str(), arg.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  Child child(pid);
  // The kernel's name of the process: the file's name, cut to 15 bytes.
  std::string comm = std::filesystem::path(path).filename().string().substr(0, 15);
  for (int i = 0; i < 200; ++i) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/comm");
    std::string now;
    std::getline(in, now);
    if (now == comm) return child;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  throw std::runtime_error("the copy of /bin/sleep at " + path + " did not start in 2 s");
}

TempDir::TempDir() {
  char tmpl[] = "/tmp/msrun-test-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::string TempDir::write(const std::string& name, const std::string& text) const {
  std::string path = path_ + "/" + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

}  // namespace msrun_ssh::test
