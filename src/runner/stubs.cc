// Temporary: entry points of rooms still being built.
#include <cstdio>

#include "msrun_ssh/hostfile.h"
#include "msrun_ssh/options.h"
#include "msrun_ssh/plan.h"

namespace msrun_ssh {
int run_job(const Options&, Plan&) {
  std::fprintf(stderr, "msrun-ssh: running jobs is not built yet; use --dry_run\n");
  return 1;
}
int stop_job(const Options&, const Cluster&) {
  std::fprintf(stderr, "msrun-ssh: stop is not built yet\n");
  return 1;
}
int check_cluster(const Options&, const Cluster&, Plan&) {
  std::fprintf(stderr, "msrun-ssh: check is not built yet\n");
  return 1;
}
}  // namespace msrun_ssh
