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

}  // namespace msrun_ssh
