// Fuzzes parse_toml_hostfile (src/hostfile/hostfile.cc) with arbitrary text as "fuzz.toml".
//
// Findings: any crash or sanitizer report; any exception other than InputError; an InputError
// whose message does not start with the file name; a parsed Cluster that breaks what hostfile.h
// promises (non-empty host list, or none with a `source` that names a host source; every host with
// a non-empty, expanded, allowed address, unique address+port, keys within their ranges, no NUL
// bytes).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <set>
#include <string>
#include <string_view>

#include "fuzz_check.h"
#include "msrun_ssh/binding.h"
#include "msrun_ssh/error.h"
#include "msrun_ssh/host_source.h"
#include "msrun_ssh/hostfile.h"

namespace {

constexpr const char* kPath = "fuzz.toml";

bool valid_bind_key(const std::string& key) {
  try {
    msrun_ssh::validate_bind_key(key, "fuzz");
    return true;
  } catch (const msrun_ssh::InputError&) {
    return false;
  }
}

bool valid_cpu_list(const std::string& list) {
  try {
    return !msrun_ssh::parse_cpu_list(list, "fuzz").empty();
  } catch (const msrun_ssh::InputError&) {
    return false;
  }
}

// "FILE:LINE:COL: message" (LINE, COL >= 1), or "FILE: message" for a file without hosts.
bool located(std::string_view msg) {
  std::string prefix = std::string(kPath) + ":";
  if (msg.rfind(prefix, 0) != 0) return false;
  msg.remove_prefix(prefix.size());
  if (msg == " no [[hosts]] entries") return true;
  return fuzz::line_number(msg) && fuzz::line_number(msg) && msg.size() > 1 && msg[0] == ' ';
}

bool no_nul(const std::string& s) { return s.find('\0') == std::string::npos; }

void check_cluster(const msrun_ssh::Cluster& cluster) {
  using namespace msrun_ssh;
  FUZZ_CHECK(cluster.path == kPath, "path \"%s\"", cluster.path.c_str());
  FUZZ_CHECK(cluster.hosts.empty() == !cluster.source.empty(), "%zu hosts with source \"%s\"",
             cluster.hosts.size(), cluster.source.c_str());
  FUZZ_CHECK(cluster.source.empty() || is_host_source(cluster.source), "source \"%s\"",
             cluster.source.c_str());
  std::set<std::pair<std::string, int>> seen;
  for (const Host& h : cluster.hosts) {
    FUZZ_CHECK(!h.address.empty(), "host from %s has an empty address", h.origin.c_str());
    for (char c : h.address)
      FUZZ_CHECK(fuzz::allowed_address_char(c), "address \"%s\" has byte 0x%02x", h.address.c_str(),
                 static_cast<unsigned char>(c));
    FUZZ_CHECK(seen.emplace(h.address, h.port.value_or(0)).second, "host \"%s\" listed twice",
               h.address.c_str());
    FUZZ_CHECK(h.origin.rfind(std::string(kPath) + ":", 0) == 0, "origin \"%s\"", h.origin.c_str());
    if (h.port) FUZZ_CHECK(*h.port >= 1 && *h.port <= 65535, "port %d", *h.port);
    if (h.local_worker_num)
      FUZZ_CHECK(*h.local_worker_num >= 0 && *h.local_worker_num <= 1024, "local_worker_num %d",
                 *h.local_worker_num);
    for (const std::string* s : {&h.user, &h.identity_file, &h.known_hosts, &h.python, &h.workdir})
      FUZZ_CHECK(no_nul(*s), "NUL byte in a string key of %s", h.address.c_str());
    std::set<std::string> names;
    for (const auto& [name, value] : h.env) {
      FUZZ_CHECK(!name.empty() && !(name[0] >= '0' && name[0] <= '9'), "env name \"%s\"",
                 name.c_str());
      for (char c : name)
        FUZZ_CHECK(
            c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'),
            "env name \"%s\"", name.c_str());
      FUZZ_CHECK(no_nul(value), "NUL in env value of %s", name.c_str());
      FUZZ_CHECK(names.insert(name).second, "env name %s twice", name.c_str());
    }
    if (h.bind_core.mode == BindCore::Mode::kManual) {
      for (const auto& [key, ranges] : h.bind_core.ranges) {
        FUZZ_CHECK(valid_bind_key(key), "bind_core key \"%s\"", key.c_str());
        FUZZ_CHECK(!ranges.empty(), "bind_core.%s empty", key.c_str());
        for (const auto& r : ranges)
          FUZZ_CHECK(valid_cpu_list(r), "bind_core.%s: \"%s\"", key.c_str(), r.c_str());
      }
    } else {
      FUZZ_CHECK(h.bind_core.ranges.empty(), "bind_core ranges outside manual mode");
    }
    if (h.bind_numa.mode == BindNuma::Mode::kManual) {
      for (const auto& [key, nodes] : h.bind_numa.nodes) {
        FUZZ_CHECK(valid_bind_key(key), "bind_numa key \"%s\"", key.c_str());
        FUZZ_CHECK(!nodes.empty(), "bind_numa.%s empty", key.c_str());
        for (int n : nodes) FUZZ_CHECK(n >= 0 && n <= 4095, "NUMA node %d", n);
      }
    } else {
      FUZZ_CHECK(h.bind_numa.nodes.empty(), "bind_numa nodes outside manual mode");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  setenv("HOME", "/home/fuzz", 1);  // expand_home reads it: keep runs reproducible
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    msrun_ssh::Cluster cluster = msrun_ssh::parse_toml_hostfile(text, kPath);
    check_cluster(cluster);
  } catch (const msrun_ssh::InputError& e) {
    FUZZ_CHECK(located(e.what()), "InputError not located as FILE:LINE:COL: %s", e.what());
  } catch (const std::exception& e) {
    FUZZ_CHECK(false, "unexpected exception: %s", e.what());
  }
  return 0;
}
