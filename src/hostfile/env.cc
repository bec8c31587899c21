#include "msrun_ssh/hostfile.h"

namespace msrun_ssh {

void set_env(EnvList& env, const std::string& name, const std::string& value) {
  for (auto& [n, v] : env)
    if (n == name) {
      v = value;
      return;
    }
  env.emplace_back(name, value);
}

bool valid_env_name(std::string_view name) {
  if (name.empty() || (name[0] >= '0' && name[0] <= '9')) return false;
  for (char c : name)
    if (!(c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')))
      return false;
  return true;
}

std::string env_name_problem(std::string_view name) {
  if (!valid_env_name(name)) return "not a valid environment variable name";
  if (name == "MSRUN_SSH_JOB" || name == "MSRUN_SSH_STACK_DIR" || name == "MSRUN_SSH_KEEPER")
    return "msrun-ssh's own: MSRUN_SSH_JOB, MSRUN_SSH_STACK_DIR and MSRUN_SSH_KEEPER mark the "
           "job's processes, and the teardown, stop and stack find them by them";
  return "";
}

}  // namespace msrun_ssh
