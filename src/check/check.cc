// Placeholder until the acceptance checks land.
#include <cstdio>

#include "msrun_ssh/hostfile.h"
#include "msrun_ssh/options.h"
#include "msrun_ssh/plan.h"

namespace msrun_ssh {
int check_cluster(const Options&, const Cluster&, Plan&) {
  std::fprintf(stderr, "msrun-ssh: check is not built yet\n");
  return 1;
}
}  // namespace msrun_ssh
