// Automatic CPU allocation for the processes of one host (rules: topology.h, "allocation").
#include <algorithm>
#include <climits>
#include <functional>
#include <optional>
#include <set>

#include "msrun_ssh/topology.h"

namespace msrun_ssh {
namespace {

constexpr size_t kNobody = SIZE_MAX;

// What is handed out: a core (its allowed PUs), or in thread order a single PU.
struct Unit {
  int node = -1;    // NUMA node; -1 unknown
  size_t core = 0;  // index of the core unit it belongs to
  std::vector<int> pus;
};
using UnitFilter = std::function<bool(const Unit&)>;

struct Roles {
  std::vector<size_t> workers;  // process indices, in rank order
  std::optional<size_t> scheduler;
};

Roles roles_of(const HostProcesses& host) {
  Roles r;
  for (size_t i = 0; i < host.processes.size(); ++i) {
    if (host.processes[i].scheduler)
      r.scheduler = i;
    else
      r.workers.push_back(i);
  }
  return r;
}

// The allowed part of every core, in NUMA order (unknown node last), each node by first PU.
std::vector<Unit> core_units(const Topology& topo) {
  std::vector<Unit> units;
  for (const auto& c : topo.cores) {
    Unit u{c.numa_node, 0, {}};
    for (int pu : c.pus)
      if (std::binary_search(topo.allowed_cpus.begin(), topo.allowed_cpus.end(), pu))
        u.pus.push_back(pu);
    if (!u.pus.empty()) units.push_back(std::move(u));
  }
  auto rank = [](int node) { return node < 0 ? INT_MAX : node; };
  std::stable_sort(units.begin(), units.end(),
                   [&](const Unit& a, const Unit& b) { return rank(a.node) < rank(b.node); });
  for (size_t i = 0; i < units.size(); ++i) units[i].core = i;
  return units;
}

// The PUs of `cores` in thread order: every core's first PU, then every second PU, ... so unit c
// is core c's first PU.
std::vector<Unit> thread_units(const std::vector<Unit>& cores) {
  std::vector<Unit> out;
  for (size_t t = 0;; ++t) {
    size_t before = out.size();
    for (const auto& u : cores)
      if (t < u.pus.size()) out.push_back(Unit{u.node, u.core, {u.pus[t]}});
    if (out.size() == before) return out;
  }
}

// Who holds which unit.
class Split {
 public:
  Split(std::vector<Unit> units, size_t processes)
      : units_(std::move(units)), owner_(units_.size(), kNobody), held_(processes) {}

  size_t size() const { return units_.size(); }
  const Unit& unit(size_t u) const { return units_[u]; }
  bool is_free(size_t u) const { return owner_[u] == kNobody; }
  size_t owner(size_t u) const { return owner_[u]; }
  size_t held(size_t proc) const { return held_[proc].size(); }

  bool holds_node(size_t proc, int node) const {
    return std::any_of(held_[proc].begin(), held_[proc].end(),
                       [&](size_t u) { return units_[u].node == node; });
  }
  void give(size_t u, size_t proc) {
    owner_[u] = proc;
    held_[proc].push_back(u);
  }
  // Gives `proc` free units passing `filter`, in unit order, until it holds `target`.
  void fill(size_t proc, size_t target, const UnitFilter& filter) {
    for (size_t u = 0; u < size() && held(proc) < target; ++u)
      if (is_free(u) && filter(units_[u])) give(u, proc);
  }
  std::vector<size_t> free_units(const UnitFilter& filter) const {
    std::vector<size_t> out;
    for (size_t u = 0; u < size(); ++u)
      if (is_free(u) && filter(units_[u])) out.push_back(u);
    return out;
  }
  std::vector<std::vector<int>> cpus() const {
    std::vector<std::vector<int>> out(held_.size());
    for (size_t p = 0; p < held_.size(); ++p) {
      for (size_t u : held_[p])
        out[p].insert(out[p].end(), units_[u].pus.begin(), units_[u].pus.end());
      std::sort(out[p].begin(), out[p].end());
    }
    return out;
  }

 private:
  std::vector<Unit> units_;
  std::vector<size_t> owner_;
  std::vector<std::vector<size_t>> held_;
};

// The devices of the kind the workers drive: index N is physical device N (devices_of_kind).
std::vector<Device> driven_devices(const Topology& topo, const HostProcesses& host) {
  std::string kind = host.device_kind;
  if (kind.empty()) kind = topo.devices_of_kind("npu").empty() ? "gpu" : "npu";
  return topo.devices_of_kind(kind);
}

// ---- the split with device affinity ------------------------------------------------------------

struct Affinity {
  std::vector<int> home;       // per process: its device's NUMA node, or -1
  std::vector<int> device;     // per process: its device number, or -1
  std::set<int> active;        // nodes with a device some worker drives
  std::set<int> device_nodes;  // nodes with any device of the host's kind
};

Affinity affinity_of(const Topology& topo, const HostProcesses& host) {
  Affinity a;
  for (const auto& p : host.processes) {
    a.home.push_back(device_numa_node(topo, host, p));
    a.device.push_back(p.scheduler ? -1 : p.device);
    if (a.home.back() >= 0) a.active.insert(a.home.back());
  }
  for (const auto& d : driven_devices(topo, host))
    if (d.numa_node >= 0) a.device_nodes.insert(d.numa_node);
  return a;
}

// Step 3: each active node's cores in equal consecutive slices among its workers, capped at q.
void slice_active_nodes(Split& s, const Roles& r, const Affinity& a, size_t q) {
  for (int node : a.active) {
    std::vector<size_t> ws;
    for (size_t w : r.workers)
      if (a.home[w] == node) ws.push_back(w);
    std::stable_sort(ws.begin(), ws.end(),
                     [&](size_t x, size_t y) { return a.device[x] < a.device[y]; });
    std::vector<size_t> pool = s.free_units([&](const Unit& u) { return u.node == node; });
    size_t base = pool.size() / ws.size(), extra = pool.size() % ws.size(), next = 0;
    for (size_t i = 0; i < ws.size(); ++i)
      for (size_t k = 0, want = std::min(q, base + (i < extra ? 1 : 0)); k < want; ++k)
        s.give(pool[next++], ws[i]);
  }
}

// Workers that get left-over units of `node`: those holding units of it, else all.
std::vector<size_t> takers(const Split& s, const std::vector<size_t>& workers, int node) {
  std::vector<size_t> out;
  for (size_t w : workers)
    if (s.holds_node(w, node)) out.push_back(w);
  return out.empty() ? workers : out;
}

// Gives a run of left-over units of one node: one at a time to the taker with the fewest units
// (lowest rank on ties), then handed out as consecutive pieces in rank order.
void hand_out_run(Split& s, const std::vector<size_t>& workers, const std::vector<size_t>& run) {
  std::vector<size_t> ws = takers(s, workers, s.unit(run[0]).node);
  std::vector<size_t> extra(ws.size(), 0);
  for (size_t n = 0; n < run.size(); ++n) {
    size_t best = 0;
    for (size_t i = 1; i < ws.size(); ++i)
      if (s.held(ws[i]) + extra[i] < s.held(ws[best]) + extra[best]) best = i;
    ++extra[best];
  }
  size_t next = 0;
  for (size_t i = 0; i < ws.size(); ++i)
    for (size_t k = 0; k < extra[i]; ++k) s.give(run[next++], ws[i]);
}

// Step 5: the scheduler takes the last usable free unit, workers the others, node by node.
void hand_out_leftovers(Split& s, const Roles& r, const UnitFilter& usable) {
  std::vector<size_t> left = s.free_units(usable);
  if (r.scheduler && !left.empty()) {
    s.give(left.back(), *r.scheduler);
    left.pop_back();
  }
  for (size_t i = 0; i < left.size();) {
    size_t j = i;
    while (j < left.size() && s.unit(left[j]).node == s.unit(left[i]).node) ++j;
    hand_out_run(s, r.workers, std::vector<size_t>(left.begin() + i, left.begin() + j));
    i = j;
  }
}

void device_split(Split& s, const Roles& r, const Affinity& a) {
  auto eligible = [&](const Unit& u) {
    return a.active.count(u.node) || !a.device_nodes.count(u.node);
  };
  size_t e = s.free_units(eligible).size();
  bool foreign_as_free = e < r.workers.size();
  UnitFilter usable = [&](const Unit& u) { return foreign_as_free || eligible(u); };
  UnitFilter free_node = [&](const Unit& u) { return usable(u) && !a.active.count(u.node); };
  size_t q = (foreign_as_free ? s.size() : e) / r.workers.size();
  slice_active_nodes(s, r, a, q);
  for (size_t w : r.workers) {
    s.fill(w, q, free_node);
    s.fill(w, q, usable);
  }
  hand_out_leftovers(s, r, usable);
}

// msrun's equal split: consecutive shares; the scheduler takes the last core left over, the
// others make the first shares one larger.
void equal_split(Split& s, const Roles& r) {
  size_t k = r.workers.size(), q = s.size() / k, extra = s.size() % k, next = 0;
  bool scheduler_core = r.scheduler && extra > 0;
  if (scheduler_core) --extra;
  for (size_t i = 0; i < k; ++i)
    for (size_t n = 0; n < q + (i < extra ? 1 : 0); ++n) s.give(next++, r.workers[i]);
  if (scheduler_core) s.give(next, *r.scheduler);
}

std::vector<std::vector<int>> core_split(const Topology& topo, const HostProcesses& host,
                                         const Roles& r, std::vector<Unit> cores) {
  Split s(std::move(cores), host.processes.size());
  Affinity a = affinity_of(topo, host);
  if (a.active.empty())
    equal_split(s, r);
  else
    device_split(s, r, a);
  return s.cpus();
}

// ---- more workers than cores --------------------------------------------------------------------

std::vector<std::vector<int>> thread_split(const Roles& r, std::vector<Unit> pus, size_t n) {
  Split s(std::move(pus), n);
  for (size_t i = 0; i < r.workers.size(); ++i) s.give(i, r.workers[i]);
  std::vector<size_t> left = s.free_units([](const Unit&) { return true; });
  if (r.scheduler && !left.empty()) {
    s.give(left.back(), *r.scheduler);
    left.pop_back();
  }
  // Unit c is core c's first PU, held by a worker since there are more workers than cores.
  for (size_t u : left) s.give(u, s.owner(s.unit(u).core));
  return s.cpus();
}

std::vector<std::vector<int>> overlap_split(const Roles& r, const std::vector<Unit>& pus,
                                            size_t n) {
  std::vector<std::vector<int>> out(n);
  for (size_t i = 0; i < r.workers.size(); ++i) out[r.workers[i]] = pus[i % pus.size()].pus;
  if (r.scheduler) out[*r.scheduler] = pus[r.workers.size() % pus.size()].pus;
  return out;
}

// The scheduler's CPU when the split left nothing over: the highest CPU any worker holds.
void steal_for_scheduler(std::vector<std::vector<int>>& out, const Roles& r) {
  size_t victim = kNobody;
  for (size_t w : r.workers)
    if (!out[w].empty() && (victim == kNobody || out[w].back() > out[victim].back())) victim = w;
  if (victim == kNobody) return;
  out[*r.scheduler] = {out[victim].back()};
  if (out[victim].size() > 1) out[victim].pop_back();
}

std::vector<int> all_pus(const std::vector<Unit>& units) {
  std::vector<int> out;
  for (const auto& u : units) out.insert(out.end(), u.pus.begin(), u.pus.end());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

int device_numa_node(const Topology& topo, const HostProcesses& host, const ProcessSlot& process) {
  if (process.scheduler || process.device < 0) return -1;
  std::vector<Device> devices = driven_devices(topo, host);
  size_t n = static_cast<size_t>(process.device);
  return n < devices.size() ? devices[n].numa_node : -1;
}

std::vector<std::vector<int>> allocate_cpus(const Topology& topo, const HostProcesses& host) {
  size_t n = host.processes.size();
  Roles r = roles_of(host);
  std::vector<Unit> cores = core_units(topo);
  if (cores.empty()) return std::vector<std::vector<int>>(n);
  if (r.workers.empty()) {
    std::vector<std::vector<int>> out(n);
    if (r.scheduler) out[*r.scheduler] = all_pus(cores);
    return out;
  }
  std::vector<std::vector<int>> out;
  if (r.workers.size() <= cores.size()) {
    out = core_split(topo, host, r, std::move(cores));
  } else if (r.workers.size() <= all_pus(cores).size()) {
    out = thread_split(r, thread_units(cores), n);
  } else {
    return overlap_split(r, thread_units(cores), n);
  }
  if (r.scheduler && out[*r.scheduler].empty()) steal_for_scheduler(out, r);
  return out;
}

}  // namespace msrun_ssh
