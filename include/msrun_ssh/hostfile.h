// The host file (docs/host-file.md): which machines take part, in node-rank order, and how to
// reach them.
//
// Two formats are read. TOML (any file ending in .toml) with a [defaults] table and [[hosts]]
// entries; and the plain "host slots=N" format of DeepSpeed / Open MPI for every other file name.
// Node sets ("node[01-16]", "n[1-3,7]") expand in place, in order, keeping zero padding.
//
// Every parse error throws InputError whose message starts with "FILE:LINE:COL: " (or "FILE:LINE: "
// for the plain format) and names the key at fault. Unknown keys are errors (typo protection).
#pragma once

#include <functional>
#include <initializer_list>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "msrun_ssh/base.h"
#include "msrun_ssh/binding.h"

namespace msrun_ssh {

using EnvList = std::vector<std::pair<std::string, std::string>>;  // ordered NAME=VALUE pairs

// Reads a variable of the launcher's environment; nullptr when unset. Injected (main passes
// std::getenv) so that tests never touch the process environment.
using GetEnv = std::function<const char*(const char*)>;

// One machine, with [defaults] already applied. Fields left empty / unset fall back to the ssh
// config, the command line or built-in defaults later (see plan.h).
struct Host {
  std::string address;  // as written (after node-set expansion): name or IP
  std::string user;
  std::optional<int> port;
  std::string identity_file;  // "~/" already expanded
  std::string known_hosts;    // "~/" already expanded
  std::string python;
  std::string workdir;
  std::optional<int> local_worker_num;
  EnvList env;
  BindCore bind_core;
  BindNuma bind_numa;
  std::string origin;  // "FILE:LINE" of the entry, for messages
  bool spare = false;  // `spare = true` (plain: `spare`): starts nothing until a restart needs it
  int identity_file_line = 0;  // the line of the identity_file key (in [defaults] or the entry)
  // Another entry of the job (a host or a spare) has the same address (mark_shared_addresses,
  // make_plan).
  bool shares_address = false;
};

// One entry of the job as the launcher tells entries apart (two may share an address, on
// different ports: sshds of containers on one machine): the address, and its port when the entry
// gives one and shares its address ("box:2222", "[fe80::1]:2222"). Keys the hosts lost,
// unreachable or failed across restart attempts, and names them in the spares' messages.
std::string host_key(const Host& host);
std::string host_key(const std::string& address, std::optional<int> port, bool shares_address);

struct Cluster {
  std::string path;
  std::vector<Host> hosts;   // the hosts that run the job, in node-rank order (no spare)
  std::string contract;      // [defaults] contract: "msrun", "torch", or "" (not given)
  std::vector<Host> spares;  // marked spare, in file order (docs/restarts.md)
  // A TOML file's top-level `source` key: the host source (host_source.h) its hosts come from,
  // "" for none. With a source, `hosts` stays empty until load_hosts fills it from `defaults`.
  std::string source;
  Host defaults;           // the [defaults] of a TOML file with a source
  std::string hosts_from;  // for --dry_run: where a source's hosts came from; "" for a file's own
};

// The addresses more than one entry of `lists` has, `address` giving an entry's: of a job's hosts
// and spares (a cluster's, a job record's).
template <typename EntriesPtr, typename AddressOf>
std::set<std::string> shared_addresses(std::initializer_list<EntriesPtr> lists, AddressOf address) {
  std::set<std::string> seen, shared;
  for (const auto* entries : lists)
    for (const auto& e : *entries)
      if (!seen.insert(address(e)).second) shared.insert(address(e));
  return shared;
}

// Marks each entry of `lists` whose address another entry of them has (its shares_address; a mark
// once made stays): host_key then names it with its port.
template <typename Entry, typename AddressOf>
void mark_shared_addresses(std::initializer_list<std::vector<Entry>*> lists, AddressOf address) {
  const std::set<std::string> shared = shared_addresses(lists, address);
  for (auto* entries : lists)
    for (Entry& e : *entries)
      if (shared.contains(address(e))) e.shares_address = true;
}

// The addresses more than one entry of `cluster` (of its hosts and its spares) has.
std::set<std::string> shared_addresses(const Cluster& cluster);

// Marks each entry of `cluster` whose address another entry has (Host::shares_address): host_key
// then names it with its port.
void mark_shared_addresses(Cluster& cluster);

// Reads and parses `path`, choosing the format by its extension. Throws InputError (including for
// an unreadable file, an empty host list, the same address listed twice, or only spares). Hosts
// marked spare go to Cluster::spares.
Cluster load_hostfile(const std::string& path);

// Parses TOML host-file text; `path` is used only in messages and to pick relative paths. A file
// with a `source` key has no [[hosts]] and comes back without hosts (see Cluster::source).
Cluster parse_toml_hostfile(std::string_view text, const std::string& path);

// Parses the plain format: one "HOST [slots=N] [spare]" per line, '#' starts a comment.
Cluster parse_plain_hostfile(std::string_view text, const std::string& path);

// --spares N: the last `n` hosts of cluster.hosts become spares too, after those marked in the file
// (which are used first). Throws InputError when no host would be left to run the job.
void take_spares(Cluster& cluster, int n);

// Expands a node set: "node[01-03]" -> node01 node02 node03; "n[1-3,7]" -> n1 n2 n3 n7; several
// bracket groups multiply, in Slurm's order: the last fastest, then the first, the second, ...
// ("r[1-2]n[1-2]" -> r1n1 r1n2 r2n1 r2n2). A pattern without brackets is returned as is. Throws
// InputError (message without location) on malformed sets, reversed ranges, forms neither
// ClusterShell nor Slurm reads (docs/host-file.md), more than 16384 names, or (with brackets) a
// name longer than a host name may be (253 characters).
std::vector<std::string> expand_nodeset(std::string_view pattern);

// `value` split at the commas outside brackets: "n[1-2,5], m" -> "n[1-2,5]", " m" (blanks kept).
std::vector<std::string_view> split_node_sets(std::string_view value);

// The other way round, for display: names that differ only in their last number fold into one
// bracket group ("198.18.2.1".."198.18.2.4", "198.18.2.9" -> "198.18.2.[1-4,9]"; "node01",
// "node02" -> "node[01-02]"); one name stays as it is. Groups are listed in name order.
std::string fold_nodeset(const std::vector<std::string>& names);

// Sets NAME=VALUE in `env`, replacing an earlier value in place so that the order stays stable.
void set_env(EnvList& env, const std::string& name, const std::string& value);

// True for a name the host file accepts as an address: non-empty, [A-Za-z0-9._:%-] only.
bool valid_host_name(std::string_view name);

// Why a name of allowed characters (valid_host_name) is still no host, "" when it is one: it
// begins with "-", is longer than a DNS name may be, or has a ":" outside an IPv6 address
// ("host:port", MPICH's "host:N"). Every host source's names are checked so.
std::string not_a_host(const std::string& name);

// True for a valid environment variable name: [A-Za-z_][A-Za-z0-9_]*.
bool valid_env_name(std::string_view name);

// Why `name` cannot be a variable the user sets for the processes (`env`, --env), "" when it can:
// not a valid name, or one of the markers msrun-ssh gives the job's processes (MSRUN_SSH_JOB,
// MSRUN_SSH_STACK_DIR, MSRUN_SSH_KEEPER: the teardown, `stop` and `stack` find them by those).
std::string env_name_problem(std::string_view name);

// Replaces a leading "~/" with $HOME.
std::string expand_home(std::string_view path);

}  // namespace msrun_ssh
