// SrunTransport (process.h): every command a Slurm job step of one task on its host.
#include <fmt/format.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "msrun_ssh/batch.h"
#include "msrun_ssh/process.h"

namespace msrun_ssh {

std::vector<std::string> srun_argv(const std::string& program, const std::string& node,
                                   const std::string& command) {
  return {program, "--nodes=1", "--ntasks=1", "--ntasks-per-node=1", "--nodelist=" + node,
          "--overlap", "--cpu-bind=none",
          // The launcher's environment, whatever the job's SLURM_EXPORT_ENV says (sbatch
          // --export=NONE sets it for every step: no PATH, no PYTHONPATH).
          "--export=ALL", "--kill-on-bad-exit=1", "--unbuffered", "--quiet", "/bin/sh", "-c",
          "printf '" + std::string(kSrunStarted.substr(0, kSrunStarted.size() - 1)) + "\\n'\n" +
              command};
}

ConnectError classify_srun_error(std::string_view message) {
  for (std::string_view unreachable :
       {"Invalid node name", "not in the allocation",
        "Requested node configuration is not available", "Node count specification invalid",
        "Unable to contact", "is down", "not responding"})
    if (message.find(unreachable) != std::string_view::npos) return ConnectError::kUnreachable;
  return ConnectError::kOther;
}

std::string srun_unavailable(const GetEnv& getenv) {
  const char* job = getenv("SLURM_JOB_ID");
  if (!job || !*job)
    return "--transport srun: not inside a Slurm allocation (SLURM_JOB_ID is not set); start "
           "msrun-ssh under salloc or sbatch";
  const char* path = getenv("PATH");
  std::string_view dirs = path ? path : "";
  while (true) {
    size_t colon = dirs.find(':');
    std::string dir(dirs.substr(0, colon));
    std::string file = (dir.empty() ? "." : dir) + "/srun";
    if (access(file.c_str(), X_OK) == 0) return "";
    if (colon == std::string_view::npos) break;
    dirs.remove_prefix(colon + 1);
  }
  return "--transport srun: srun is not on PATH";
}

SrunTransport::SrunTransport(SrunSettings settings)
    : ProcessTransport(ProcessSettings{std::string(kSrunStarted), true}),
      srun_(std::move(settings)) {}

SrunTransport::~SrunTransport() { disconnect_all(); }

std::vector<std::string> SrunTransport::argv(size_t host, const std::string& command) const {
  return srun_argv(srun_.program, srun_.nodes.at(host), command);
}

// srun forwards what it gets to its step, but turns SIGTERM into a SIGKILL of every process of
// the step; a SIGKILL of srun itself (never of its process group, which holds its shepherd) makes
// the shepherd ask slurmctld to SIGKILL the step.
void SrunTransport::deliver(pid_t pid, const char* signal, int nth) {
  int sig = std::strcmp(signal, "KILL") != 0 ? signal_number(signal) : nth == 1 ? SIGTERM : SIGKILL;
  if (sig != 0) ::kill(pid, sig);
}

void SrunTransport::describe_exit(int raw, int& status, std::string& signal) const {
  ProcessTransport::describe_exit(raw, status, signal);
  const char* name = status > 128 && status < 128 + 65 ? sigabbrev_np(status - 128) : nullptr;
  if (signal.empty() && name) signal = name;
}

std::vector<std::optional<ConnectFailure>> SrunTransport::connect_all(
    const std::vector<int>& connections) {
  std::vector<std::optional<ConnectFailure>> failures(connections.size());
  Batch batch(*this, [this](size_t index, const TransportEvent& e) {
    if (srun_.on_connect_progress && e.kind == TransportEvent::Kind::kClosed)
      srun_.on_connect_progress(index, true);
    if (srun_.on_connect_progress && e.kind == TransportEvent::Kind::kOpenFailed)
      srun_.on_connect_progress(index, false);
  });
  for (size_t h = 0; h < connections.size(); ++h) batch.start(h, "true");
  batch.wait(now_ms() + srun_.connect_timeout_s * 1000, [this] {
    if (srun_.on_connect_progress) srun_.on_connect_progress(std::string::npos, true);
    return true;
  });
  for (const BatchResult& r : batch.results()) {
    if (r.status == 0) continue;
    if (r.failure == BatchFailure::kTimedOut)
      failures[r.host] = ConnectFailure{
          ConnectError::kTimedOut,
          fmt::format("srun did not start a step within {:g} s", srun_.connect_timeout_s)};
    else if (r.failure == BatchFailure::kOpenFailed)
      failures[r.host] = ConnectFailure{classify_srun_error(r.why), r.why};
    else
      failures[r.host] = ConnectFailure{ConnectError::kOther, batch_trouble(r, "")};
  }
  return failures;
}

}  // namespace msrun_ssh
