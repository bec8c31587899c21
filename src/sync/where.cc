// Where a sync goes, the commands that run it on a host, and its result lines (sync.h).
#include <fmt/format.h>

#include <filesystem>
#include <random>

#include "msrun_ssh/command.h"
#include "msrun_ssh/error.h"
#include "msrun_ssh/sync.h"
#include "remote/programs.h"

namespace msrun_ssh {
namespace {

namespace fs = std::filesystem;

std::string hex(std::string_view raw) {
  std::string out;
  for (unsigned char c : raw) out += fmt::format("{:02x}", c);
  return out;
}

fs::path absolute_in(const std::string& cwd, const std::string& path) {
  fs::path p = fs::path(cwd) / path;  // an absolute `path` replaces cwd
  p = p.lexically_normal();
  return p.has_filename() ? p : p.parent_path();
}

// The words of every sync command before its arguments: sh running sync.sh, and its $0.
std::vector<std::string> sync_front() {
  return {"/bin/sh", "-c", std::string(remote::kSyncSh), "msrun-ssh-sync"};
}

}  // namespace

std::string sync_command(const std::string& dest, const std::string& token, SyncProgram program) {
  std::vector<std::string> words = sync_front();
  words.emplace_back(program == SyncProgram::kPython ? "" : remote::kSyncPl);
  words.emplace_back(program == SyncProgram::kPerl ? "" : remote::kSyncPy);
  words.push_back(dest);
  words.push_back(token);
  return fmt::format("exec {}", shell_join(words));
}

bool may_start_ahead(const std::string& command) {
  static const std::string head = fmt::format("exec {} ", shell_join(sync_front()));
  static const std::string tail = fmt::format(" {}", shell_join({kTokenFromStdin}));
  return command.size() > head.size() + tail.size() && command.compare(0, head.size(), head) == 0 &&
         command.compare(command.size() - tail.size(), tail.size(), tail) == 0;
}

std::string manifest_request(const std::vector<std::string>& paths) {
  std::string out = "{\"hash\": [";
  for (size_t i = 0; i < paths.size(); ++i)
    out += fmt::format("{}\"{}\"", i ? ", " : "", hex(paths[i]));
  return out + "]}\n";
}

std::string new_sync_token() {
  std::random_device rd;
  return fmt::format("{:08x}{:08x}{:08x}{:08x}", rd(), rd(), rd(), rd());
}

SyncWhere sync_where(const std::string& cwd, const std::string& dir, const std::string& dest,
                     const std::string& task_script, const std::vector<std::string>& workdirs) {
  SyncWhere w;
  if (dir.empty() && task_script.empty()) throw InputError("sync: no directory to sync");
  fs::path d = dir.empty() ? absolute_in(cwd, task_script).parent_path() : absolute_in(cwd, dir);
  w.dir = d.string();
  if (!dest.empty()) {
    for (const auto& wd : workdirs)
      w.dests.push_back((fs::path(wd) / dest).lexically_normal().string());
    return w;
  }
  if (!task_script.empty() && task_script[0] == '/')
    throw InputError(fmt::format(
        "--sync: the task script {} is an absolute path, which every host resolves as it is; say "
        "where {} goes on the hosts with --sync_dest",
        task_script, w.dir));
  fs::path rel = d.lexically_relative(absolute_in(cwd, "."));
  if (rel.empty() || *rel.begin() == "..")
    throw InputError(fmt::format(
        "sync: {} is not inside the current directory {}, so it has no place in the hosts' "
        "workdirs; give its destination (--sync_dest for a run, DEST for msrun-ssh sync)",
        w.dir, cwd));
  for (const auto& wd : workdirs)
    w.dests.push_back(rel == "." ? wd : (fs::path(wd) / rel).lexically_normal().string());
  return w;
}

std::string sync_result_line(const std::vector<std::string>& addresses,
                             const std::vector<SyncHostResult>& results, size_t host) {
  const SyncHostResult& r = results[host];
  const std::string& name = addresses[host];
  if (!r.error.empty()) return fmt::format("sync: {}: failed: {}", name, r.error);
  if (r.shared_with != SIZE_MAX)
    return fmt::format("sync: {}: shared with {}", name, addresses[r.shared_with]);
  std::string shared;
  for (size_t s : r.sharers)
    shared += fmt::format("{}{}", shared.empty() ? " (shared with " : ", ", addresses[s]);
  if (!shared.empty()) shared += ")";
  if (r.differ == 0) return fmt::format("sync: {}: up to date{}", name, shared);
  return fmt::format("sync: {}: {} files, {} bytes sent, {} deleted{}", name, r.files, r.bytes,
                     r.deleted, shared);
}

}  // namespace msrun_ssh
