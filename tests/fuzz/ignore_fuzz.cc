// Fuzzes the gitignore matcher of sync (IgnoreRules, src/sync/ignore.cc). The input is rule lines,
// a NUL, then paths, one per line (a trailing '/' marks a directory). Findings: a crash, a
// sanitizer report, an exception; add_text and add line by line disagreeing; a result that
// changes when asked twice; excluded(p) differing from matches(p) || excluded(parent of p) (the
// rule that nothing inside an excluded directory comes back); "*" as the last rule leaving a path
// in.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_check.h"
#include "msrun_ssh/sync.h"

namespace {

std::vector<std::string_view> lines(std::string_view text) {
  std::vector<std::string_view> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    out.push_back(text.substr(pos, nl - pos));
    pos = nl + 1;
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  size_t nul = in.find('\0');
  std::string_view rules_text = in.substr(0, nul);
  std::string_view paths_text = nul == std::string_view::npos ? "" : in.substr(nul + 1);
  msrun_ssh::IgnoreRules a, b;
  a.add_text(rules_text);
  for (auto line : lines(rules_text)) b.add(line);
  FUZZ_CHECK(a.size() == b.size(), "add_text made %zu rules, add %zu", a.size(), b.size());
  msrun_ssh::IgnoreRules all = a;
  all.add("*");
  for (auto line : lines(paths_text)) {
    if (line.empty() || line.find('\0') != std::string_view::npos) continue;
    bool is_dir = line.back() == '/';
    std::string path(is_dir ? line.substr(0, line.size() - 1) : line);
    if (path.empty() || path.front() == '/' || path.find("//") != std::string::npos) continue;
    bool ex = a.excluded(path, is_dir);
    FUZZ_CHECK(ex == b.excluded(path, is_dir), "add_text and add differ on \"%s\"", path.c_str());
    FUZZ_CHECK(ex == a.excluded(path, is_dir), "not deterministic on \"%s\"", path.c_str());
    size_t slash = path.rfind('/');
    bool parent =
        slash != std::string::npos && slash > 0 && a.excluded(path.substr(0, slash), true);
    FUZZ_CHECK(ex == (a.matches(path, is_dir) || parent), "parents rule broken on \"%s\"",
               path.c_str());
    FUZZ_CHECK(all.excluded(path, is_dir), "\"*\" last does not exclude \"%s\"", path.c_str());
  }
  return 0;
}
