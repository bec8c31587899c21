#include "msrun_ssh/hostfile.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <toml++/toml.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "msrun_ssh/error.h"
#include "msrun_ssh/host_source.h"

namespace msrun_ssh {
namespace {

constexpr int kMaxWorkersPerHost = 1024;
constexpr size_t kMaxHosts = 16384;
// A host file past this is not one (/dev/zero, a data file given by mistake).
constexpr size_t kMaxFileBytes = 16 << 20;
// The keys [defaults] and [[hosts]] share.
constexpr const char* kSharedKeys =
    "user, port, identity_file, known_hosts, python, workdir, local_worker_num, env, bind_core, "
    "bind_numa";

// Where a TOML node sits, as "FILE:LINE:COL".
std::string at(const std::string& path, const toml::node& node) {
  const auto& b = node.source().begin;
  return fmt::format("{}:{}:{}", path, b.line, b.column);
}

[[noreturn]] void fail(const std::string& path, const toml::node& node, const std::string& msg) {
  throw InputError(fmt::format("{}: {}", at(path, node), msg));
}

std::string get_string(const std::string& path, const std::string& key, const toml::node& node) {
  const auto* s = node.as_string();
  if (!s) fail(path, node, fmt::format("key \"{}\" must be a string", key));
  if (s->get().empty()) fail(path, node, fmt::format("key \"{}\" must not be empty", key));
  if (s->get().find('\0') != std::string::npos)
    fail(path, node, fmt::format("key \"{}\" contains a NUL byte", key));
  return s->get();
}

int get_int(const std::string& path, const std::string& key, const toml::node& node, int lo,
            int hi) {
  const auto* i = node.as_integer();
  if (!i) fail(path, node, fmt::format("key \"{}\" must be an integer", key));
  if (i->get() < lo || i->get() > hi)
    fail(path, node, fmt::format("key \"{}\" = {} is out of range {}..{}", key, i->get(), lo, hi));
  return static_cast<int>(i->get());
}

EnvList get_env(const std::string& path, const toml::node& node, EnvList env) {
  const auto* t = node.as_table();
  if (!t) fail(path, node, "key \"env\" must be a table of NAME = \"value\"");
  for (const auto& [k, v] : *t) {
    std::string name(k.str());
    if (std::string why = env_name_problem(name); !why.empty())
      fail(path, v, fmt::format("env: {}: {}", in_quotes(name), why));
    const auto* s = v.as_string();
    if (!s) fail(path, v, fmt::format("env: value of \"{}\" must be a string", name));
    if (s->get().find('\0') != std::string::npos)
      fail(path, v, fmt::format("env: value of \"{}\" contains a NUL byte", name));
    set_env(env, name, s->get());
  }
  return env;
}

BindCore get_bind_core(const std::string& path, const toml::node& node) {
  BindCore spec;
  if (const auto* b = node.as_boolean()) {
    spec.mode = b->get() ? BindCore::Mode::kAuto : BindCore::Mode::kOff;
    return spec;
  }
  const auto* t = node.as_table();
  if (!t) fail(path, node, "key \"bind_core\" must be true, false or a table of CPU ranges");
  spec.mode = BindCore::Mode::kManual;
  for (const auto& [k, v] : *t) {
    std::string key(k.str());
    std::string where = fmt::format("{}: bind_core", at(path, v));
    validate_bind_key(key, where);
    const auto* arr = v.as_array();
    if (!arr) fail(path, v, fmt::format("bind_core.{} must be a list of CPU ranges", key));
    spec.ranges[key];  // an empty list: that process is not bound (msrun skips it)
    for (const auto& r : *arr) {
      const auto* s = r.as_string();
      if (!s) fail(path, r, fmt::format("bind_core.{}: CPU ranges are strings like \"0-3\"", key));
      parse_cpu_list(s->get(), fmt::format("{}: bind_core.{}", at(path, r), key));
      spec.ranges[key].push_back(s->get());
    }
  }
  return spec;
}

BindNuma get_bind_numa(const std::string& path, const toml::node& node) {
  BindNuma spec;
  if (const auto* b = node.as_boolean()) {
    spec.mode = b->get() ? BindNuma::Mode::kAuto : BindNuma::Mode::kOff;
    return spec;
  }
  const auto* t = node.as_table();
  if (!t) fail(path, node, "key \"bind_numa\" must be true, false or a table of NUMA nodes");
  spec.mode = BindNuma::Mode::kManual;
  for (const auto& [k, v] : *t) {
    std::string key(k.str());
    validate_bind_key(key, fmt::format("{}: bind_numa", at(path, v)));
    auto add = [&](const toml::node& n) {
      spec.nodes[key].push_back(get_int(path, "bind_numa." + key, n, 0, 4095));
    };
    if (const auto* arr = v.as_array()) {
      if (arr->empty()) fail(path, v, fmt::format("bind_numa.{} is an empty list", key));
      for (const auto& n : *arr) add(n);
    } else {
      add(v);
    }
  }
  return spec;
}

// Applies the keys of one TOML table (defaults or a host entry) on top of `host`.
void apply_keys(const std::string& path, const toml::table& table, bool is_host, Host& host,
                std::string* contract = nullptr) {
  for (const auto& [k, v] : table) {
    std::string key(k.str());
    if (key == "contract" && !is_host && contract) {
      *contract = get_string(path, key, v);
      if (*contract != "msrun" && *contract != "torch")
        fail(path, v, fmt::format("contract \"{}\" is not msrun or torch", *contract));
    } else if (key == "address" && is_host) {
      host.address = get_string(path, key, v);
    } else if (key == "user") {
      host.user = get_string(path, key, v);
    } else if (key == "port") {
      host.port = get_int(path, key, v, 1, 65535);
    } else if (key == "identity_file") {
      host.identity_file = expand_home(get_string(path, key, v));
      host.identity_file_line = static_cast<int>(v.source().begin.line);
    } else if (key == "known_hosts") {
      host.known_hosts = expand_home(get_string(path, key, v));
      // ssh takes a UserKnownHostsFile of several files, blank-separated, and says it so (ssh -G).
      if (host.known_hosts.find_first_of(" \t") != std::string::npos)
        fail(path, v,
             "key \"known_hosts\" names a path with a blank, which ssh would read as several "
             "files: rename or link it");
    } else if (key == "python") {
      host.python = get_string(path, key, v);
    } else if (key == "workdir") {
      host.workdir = get_string(path, key, v);
    } else if (key == "local_worker_num") {
      host.local_worker_num = get_int(path, key, v, 0, kMaxWorkersPerHost);
    } else if (key == "env") {
      host.env = get_env(path, v, host.env);
    } else if (key == "bind_core") {
      host.bind_core = get_bind_core(path, v);
    } else if (key == "bind_numa") {
      host.bind_numa = get_bind_numa(path, v);
    } else if (key == "spare" && is_host) {
      const auto* b = v.as_boolean();
      if (!b) fail(path, v, "key \"spare\" must be true or false");
      host.spare = b->get();
    } else {
      fail(path, v,
           fmt::format("unknown key \"{}\" in {} (expected one of: {})", key,
                       is_host ? "[[hosts]]" : "[defaults]",
                       is_host ? fmt::format("address, {}, spare", kSharedKeys)
                               : fmt::format("{}, contract", kSharedKeys)));
    }
  }
}

}  // namespace

namespace {

const std::string& address_of(const Host& h) { return h.address; }

}  // namespace

std::set<std::string> shared_addresses(const Cluster& cluster) {
  return shared_addresses({&cluster.hosts, &cluster.spares}, address_of);
}

void mark_shared_addresses(Cluster& cluster) {
  mark_shared_addresses({&cluster.hosts, &cluster.spares}, address_of);
}

std::string host_key(const std::string& address, std::optional<int> port, bool shares_address) {
  if (!port || !shares_address) return address;
  if (address.find(':') != std::string::npos) return fmt::format("[{}]:{}", address, *port);
  return fmt::format("{}:{}", address, *port);
}

std::string host_key(const Host& host) {
  return host_key(host.address, host.port, host.shares_address);
}

namespace {

// Where each host of a file came from: the place of the address that named it ("FILE:LINE:COL"
// in TOML, "FILE:LINE" in the plain format) and that address as written (a node set).
struct Origin {
  std::string where;
  std::string written;
};

// `name` as a message names it: with the address that named it when that was a node set.
std::string named(const std::string& name, const Origin& origin) {
  if (origin.written == name) return in_quotes(name);
  return fmt::format("{} (of address {})", in_quotes(name), in_quotes(origin.written));
}

void check_unique(const Cluster& cluster, const std::vector<Origin>& origins) {
  std::map<std::pair<std::string, int>, size_t> seen;
  for (size_t i = 0; i < cluster.hosts.size(); ++i) {
    const Host& h = cluster.hosts[i];
    auto [it, added] = seen.emplace(std::pair(h.address, h.port.value_or(0)), i);
    if (added) continue;
    const Origin& first = origins[it->second];
    const Origin& again = origins[i];
    if (first.where == again.where)
      throw InputError(fmt::format("{}: host {} is listed twice by address {}", again.where,
                                   in_quotes(h.address), in_quotes(again.written)));
    throw InputError(fmt::format(
        "{}: host {} is listed twice: {} has it already{}", again.where, named(h.address, again),
        first.where,
        first.written == h.address ? "" : fmt::format(" (address {})", in_quotes(first.written))));
  }
}

// The first character of `name` that no host name has (all its bytes, when it is UTF-8's).
std::string_view not_allowed(std::string_view name) {
  for (size_t i = 0; i < name.size(); ++i) {
    if (valid_host_name(name.substr(i, 1))) continue;
    const auto lead = static_cast<unsigned char>(name[i]);
    const size_t want = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    size_t n = 1;
    while (n < want && i + n < name.size() && (name[i + n] & 0xC0) == 0x80) ++n;
    return name.substr(i, n);
  }
  return "";
}

}  // namespace

std::string not_a_host(const std::string& name) {
  constexpr size_t kMaxName = 253;
  if (name.starts_with('-'))
    return "begins with \"-\": no host name does (ssh would read it as an option)";
  if (name.size() > kMaxName)
    return fmt::format("is longer than a host name may be ({} characters, at most {})", name.size(),
                       kMaxName);
  if (name.find(':') == std::string::npos) return "";
  in6_addr ip6{};
  if (::inet_pton(AF_INET6, name.substr(0, name.find('%')).c_str(), &ip6) == 1) return "";
  return "has a \":\" but is no IPv6 address: a port goes in its own key (port = N; in the "
         "plain format, in the ssh config), and the plain format's workers in slots=N";
}

namespace {

void add_expanded(Cluster& cluster, std::vector<Origin>& origins, const Host& host,
                  const std::string& where) {
  std::vector<std::string> names;
  try {
    names = expand_nodeset(host.address);
  } catch (const InputError& e) {
    throw InputError(
        fmt::format("{}: address {}: {}", where, in_quotes_cut(host.address), e.what()));
  }
  if (cluster.hosts.size() + names.size() > kMaxHosts)
    throw InputError(fmt::format("{}: more than {} hosts in the host file", where, kMaxHosts));
  for (auto& name : names) {
    std::string why = valid_host_name(name) ? not_a_host(name)
                      : name.empty()        ? std::string("is empty")
                                            : fmt::format(
                                                  "has {}, a character not allowed in a host name or "
                                                         "address (letters, digits and . - _ : % only)",
                                                  in_quotes(not_allowed(name), '\''));
    if (!why.empty())
      throw InputError(name == host.address
                           ? fmt::format("{}: address {} {}", where, in_quotes(name), why)
                           : fmt::format("{}: address {}: the name {} {}", where,
                                         in_quotes(host.address), in_quotes(name), why));
    Host h = host;
    h.address = std::move(name);
    cluster.hosts.push_back(std::move(h));
    origins.push_back({where, host.address});
  }
}

// Moves the spare hosts to cluster.spares. Every host a spare is an error, located where the first
// host is (`where`: wheres.front(), the hosts being there).
void split_spares(Cluster& cluster, const std::string& where) {
  std::vector<Host> hosts;
  for (auto& h : cluster.hosts) (h.spare ? cluster.spares : hosts).push_back(std::move(h));
  cluster.hosts = std::move(hosts);
  if (cluster.hosts.empty())
    throw InputError(
        fmt::format("{}: every host is a spare; at least one host must run the job", where));
}

}  // namespace

bool valid_host_name(std::string_view name) {
  return !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_' ||
           c == ':' || c == '%';
  });
}

std::string expand_home(std::string_view path) {
  if (path.size() >= 2 && path[0] == '~' && path[1] == '/') {
    const char* home = std::getenv("HOME");
    return std::string(home ? home : "") + std::string(path.substr(1));
  }
  return std::string(path);
}

namespace {

// toml++ parses each part of a dotted key (a.b.c = 1, [a.b.c]) one level deeper on the stack, with
// no limit of its own: 50,000 parts overflowed it. Refuses, naming the line, a run of more than
// kMaxKeyParts dotted parts between two of = , { } [ ] or a line's end, outside strings and
// comments (a value has one dot at most: 1.5, 12:00:00.5).
constexpr int kMaxKeyParts = 256;

void check_key_depth(std::string_view text, const std::string& path) {
  int line = 1, dots = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '"' || c == '\'') {  // a string: skipped to its end, its newlines counted
      const std::string triple(3, c);
      const bool multi = text.substr(i, 3) == triple;
      size_t at = i + (multi ? 3 : 1);
      while (at < text.size()) {
        if (text[at] == '\n' ||
            (c == '"' && text[at] == '\\' && at + 1 < text.size() && text[at + 1] == '\n')) {
          if (!multi) break;  // toml++ says what is wrong with it
          ++line;
          at += text[at] == '\n' ? 1 : 2;
          continue;
        }
        if (c == '"' && text[at] == '\\') {
          at += 2;
          continue;
        }
        if (multi ? text.substr(at, 3) == triple : text[at] == c) break;
        ++at;
      }
      if (multi && at < text.size()) {
        // Its closing delimiter takes up to two quotes more before it: """x"""" is x".
        size_t run = 3;
        while (run < 5 && at + run < text.size() && text[at + run] == c) ++run;
        i = at + run - 1;
      } else {
        i = std::min(at, text.size());  // its closing quote, a newline (counted below), the end
        if (i < text.size() && text[i] != c) --i;
      }
      continue;
    }
    if (c == '#') {
      while (i + 1 < text.size() && text[i + 1] != '\n') ++i;
    } else if (c == '.') {
      if (++dots >= kMaxKeyParts)
        throw InputError(fmt::format(
            "{}:{}: a dotted key of more than {} parts (a table nested that deep is refused)", path,
            line, kMaxKeyParts));
    } else if (std::string_view("=,{}[]\n").find(c) != std::string_view::npos) {
      dots = 0;
      if (c == '\n') ++line;
    }
  }
}

}  // namespace

Cluster parse_toml_hostfile(std::string_view text, const std::string& path) {
  check_key_depth(text, path);
  toml::table root;
  try {
    root = toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    const auto& b = e.source().begin;
    throw InputError(fmt::format("{}:{}:{}: {}", path, b.line, b.column, e.description()));
  }
  Host defaults;
  std::string contract;
  if (auto* d = root.get("defaults")) {
    if (!d->is_table()) fail(path, *d, "\"defaults\" must be a table: [defaults]");
    apply_keys(path, *d->as_table(), false, defaults, &contract);
  }
  Cluster cluster{path, {}, contract};
  std::vector<Origin> origins;
  for (const auto& [k, v] : root) {
    std::string key(k.str());
    if (key == "defaults") continue;
    if (key == "source") {
      cluster.source = get_string(path, key, v);
      if (!is_host_source(cluster.source))
        fail(path, v, fmt::format("source \"{}\" is not slurm, pbs, lsf or auto", cluster.source));
      continue;
    }
    if (key != "hosts")
      fail(path, v, fmt::format("unknown key \"{}\" (expected [defaults] and [[hosts]])", key));
    const auto* arr = v.as_array();
    if (!arr || !arr->is_array_of_tables())
      fail(path, v, "\"hosts\" must be an array of tables: [[hosts]]");
    for (const auto& entry : *arr) {
      Host host = defaults;
      host.origin = fmt::format("{}:{}", path, entry.source().begin.line);
      apply_keys(path, *entry.as_table(), true, host);
      const toml::node* address = entry.as_table()->get("address");
      if (!address) fail(path, entry, "[[hosts]] entry without \"address\"");
      add_expanded(cluster, origins, host, at(path, *address));
    }
  }
  if (!cluster.source.empty()) {
    if (!cluster.hosts.empty())
      fail(path, *root.get("source"),
           fmt::format("source = \"{}\" and [[hosts]] exclude each other: the hosts come from "
                       "one or the other",
                       cluster.source));
    cluster.defaults = defaults;
    return cluster;
  }
  if (cluster.hosts.empty()) throw InputError(fmt::format("{}: no [[hosts]] entries", path));
  check_unique(cluster, origins);
  split_spares(cluster, origins.front().where);
  return cluster;
}

Cluster parse_plain_hostfile(std::string_view text, const std::string& path) {
  // A UTF-8 byte order mark (an editor's) is no part of the first address; TOML skips it too.
  if (text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);
  Cluster cluster{path, {}};
  std::vector<Origin> origins;
  std::istringstream in{std::string(text)};
  std::string line;
  for (int lineno = 1; std::getline(in, line); ++lineno) {
    if (auto hash = line.find('#'); hash != std::string::npos) line.erase(hash);
    std::vector<std::string_view> words = split_words(line, " \t\r\v\f");
    if (words.empty()) continue;
    // A node set with blanks around its commas ("node[1-3, 7]", "a , b") goes on to the next
    // word.
    // (Brackets counted word by word as they are added: a line of 100,000 words is read once.)
    std::string address(words[0]);
    long open_brackets = 0;
    auto count_brackets = [&](std::string_view w) {
      open_brackets += std::count(w.begin(), w.end(), '[') - std::count(w.begin(), w.end(), ']');
    };
    count_brackets(address);
    auto unfinished = [&](const std::string& a) { return a.back() == ',' || open_brackets > 0; };
    size_t next = 1;
    // The word spare and a key=value word end it ("node1, spare" ends in a comma: refused).
    auto a_word = [](std::string_view w) {
      return w == "spare" || w.find('=') != std::string_view::npos;
    };
    while (next < words.size() && !a_word(words[next]) &&
           (unfinished(address) || words[next][0] == ',')) {
      address += ' ';
      address += words[next];
      count_brackets(words[next++]);
    }
    std::string where = fmt::format("{}:{}", path, lineno);
    Host host;
    host.address = address;
    host.origin = where;
    for (; next < words.size(); ++next) {
      std::string word(words[next]);
      if (word == "spare") {
        host.spare = true;
        continue;
      }
      size_t eq = word.find('=');
      std::string key = word.substr(0, eq);
      std::string value = eq == std::string::npos ? "" : word.substr(eq + 1);
      if (key != "slots" && key != "max_slots")
        throw InputError(
            fmt::format("{}: unknown word \"{}\" (expected slots=N or spare)", where, word));
      if (key == "max_slots") {  // accepted and ignored, as any count mpirun takes
        if (value.empty() || value.find_first_not_of("0123456789") != std::string::npos)
          throw InputError(
              fmt::format("{}: max_slots must be a non-negative integer: \"{}\"", where, word));
        continue;
      }
      int n = -1;
      try {
        if (value.empty() || value[0] < '0' || value[0] > '9') throw std::invalid_argument(value);
        size_t used = 0;
        n = std::stoi(value, &used);
        if (used != value.size()) n = -1;
      } catch (const std::exception&) {
        n = -1;
      }
      if (n < 0 || n > kMaxWorkersPerHost)
        throw InputError(fmt::format("{}: {} must be an integer 0..{}: \"{}\"", where, key,
                                     kMaxWorkersPerHost, word));
      if (host.local_worker_num && *host.local_worker_num != n)
        throw InputError(
            fmt::format("{}: slots given twice ({} and {})", where, *host.local_worker_num, n));
      host.local_worker_num = n;
    }
    add_expanded(cluster, origins, host, where);
  }
  if (cluster.hosts.empty()) throw InputError(fmt::format("{}: no hosts", path));
  check_unique(cluster, origins);
  split_spares(cluster, origins.front().where);
  return cluster;
}

void take_spares(Cluster& cluster, int n) {
  if (n <= 0) return;
  if (static_cast<size_t>(n) >= cluster.hosts.size())
    throw InputError(fmt::format(
        "--spares={} leaves no host to run the job ({} has {} host{} besides {} spare{} of its "
        "own)",
        n, cluster.path, cluster.hosts.size(), cluster.hosts.size() == 1 ? "" : "s",
        cluster.spares.size(), cluster.spares.size() == 1 ? "" : "s"));
  auto first = cluster.hosts.end() - n;
  for (auto it = first; it != cluster.hosts.end(); ++it) {
    it->spare = true;
    cluster.spares.push_back(std::move(*it));
  }
  cluster.hosts.erase(first, cluster.hosts.end());
}

Cluster load_hostfile(const std::string& path) {
  std::string why;
  std::optional<std::string> read = read_whole_file(path, kMaxFileBytes, why);
  if (!read) throw InputError(fmt::format("{}: cannot read host file: {}", path, why));
  const std::string& text = *read;
  bool toml =
      path.size() >= 5 && to_lower(std::string_view(path).substr(path.size() - 5)) == ".toml";
  if (toml) return parse_toml_hostfile(text, path);
  try {
    return parse_plain_hostfile(text, path);
  } catch (const InputError& e) {
    // TOML in a file the name did not say was one: the plain format's error, and why it was read
    // so.
    if (text.find("[[hosts]]") == std::string::npos && text.find("[defaults]") == std::string::npos)
      throw;
    throw InputError(
        fmt::format("{} (read in the plain format: a TOML host file's name ends in "
                    "\".toml\")",
                    e.what()));
  }
}

}  // namespace msrun_ssh
