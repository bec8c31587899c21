// Fuzzes the check of an ssh config read without an ssh client (src/ssh/fallback_config.cc): the
// bytes are the config file (an in-memory file), checked for a host name taken from its first
// line. Inputs with "include" in any case are skipped: an Include would read whatever files of this
// machine its pattern names (/dev/zero never ends); tests/unit/fallback_config_test.cc covers it.
//
// Properties (ssh_config.h's promise): refuse_what_libssh_misreads returns or throws InputError,
// nothing else; a refusal names the file and a line of it ("ssh config FILE line N: ") or the
// host ("host NAME: "); a config of comments and blank lines only passes.
// Findings: any crash or sanitizer report, any other exception, any property violation.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_check.h"
#include "msrun_ssh/base.h"
#include "msrun_ssh/error.h"
#include "msrun_ssh/ssh_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const int fd = memfd_create("fallback_config_fuzz", 0);
  FUZZ_CHECK(fd >= 0, "memfd_create failed");
  FUZZ_CHECK(ftruncate(fd, 0) == 0 && pwrite(fd, data, size, 0) == static_cast<ssize_t>(size),
             "cannot write the config");
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  std::string_view text(reinterpret_cast<const char*>(data), size);
  if (msrun_ssh::to_lower(text).find("include") != std::string::npos) return 0;
  std::string name(text.substr(0, std::min<size_t>(text.find('\n'), 64)));
  bool only_comments = true;
  for (std::string_view rest = text; !rest.empty();) {
    size_t nl = rest.find('\n');
    std::string_view line = rest.substr(0, nl);
    rest.remove_prefix(nl == std::string_view::npos ? rest.size() : nl + 1);
    size_t first = line.find_first_not_of(" \t\r");
    if (first != std::string_view::npos && line[first] != '#') only_comments = false;
  }
  try {
    msrun_ssh::refuse_what_libssh_misreads(path, {name});
  } catch (const msrun_ssh::InputError& e) {
    std::string_view what = e.what();
    FUZZ_CHECK(what.starts_with("ssh config " + path + " line ") || what.starts_with("host ") ||
                   what.starts_with("ssh config "),
               "refusal names no file, line or host: %s", e.what());
    FUZZ_CHECK(!only_comments || what.starts_with("host "), "a config of comments refused: %s",
               e.what());
  } catch (const std::exception& e) {
    FUZZ_CHECK(false, "unexpected exception: %s", e.what());
  }
  return 0;
}
