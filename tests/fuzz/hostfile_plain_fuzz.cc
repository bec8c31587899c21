// Fuzzes parse_plain_hostfile (src/hostfile/hostfile.cc): "HOST [slots=N]" lines, '#' comments.
//
// Findings: any crash or sanitizer report; any exception other than InputError; an InputError not
// located as "FILE:LINE: " (or "FILE: no hosts"); a Cluster breaking hostfile.h's promises
// (hosts present, addresses non-empty and made of host-name characters, unique, slots 0..1024,
// origin "FILE:LINE").
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <set>
#include <string>
#include <string_view>

#include "fuzz_check.h"
#include "msrun_ssh/error.h"
#include "msrun_ssh/hostfile.h"

namespace {

constexpr const char* kPath = "fuzz.hosts";

bool located(std::string_view msg) {
  std::string prefix = std::string(kPath) + ":";
  if (msg.rfind(prefix, 0) != 0) return false;
  msg.remove_prefix(prefix.size());
  if (msg == " no hosts") return true;
  return fuzz::line_number(msg) && msg.size() > 1 && msg[0] == ' ';
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    msrun_ssh::Cluster cluster = msrun_ssh::parse_plain_hostfile(text, kPath);
    FUZZ_CHECK(cluster.path == kPath, "path \"%s\"", cluster.path.c_str());
    FUZZ_CHECK(!cluster.hosts.empty(), "success with no hosts");
    std::set<std::string> seen;
    for (const auto& h : cluster.hosts) {
      FUZZ_CHECK(!h.address.empty(), "empty address from %s", h.origin.c_str());
      for (char c : h.address)
        FUZZ_CHECK(fuzz::allowed_address_char(c), "address \"%s\" has byte 0x%02x",
                   h.address.c_str(), static_cast<unsigned char>(c));
      FUZZ_CHECK(seen.insert(h.address).second, "host \"%s\" listed twice", h.address.c_str());
      FUZZ_CHECK(!h.port.has_value(), "plain format set a port");
      if (h.local_worker_num)
        FUZZ_CHECK(*h.local_worker_num >= 0 && *h.local_worker_num <= 1024, "slots %d",
                   *h.local_worker_num);
      std::string_view origin = h.origin;
      FUZZ_CHECK(origin.rfind(std::string(kPath) + ":", 0) == 0, "origin \"%s\"", h.origin.c_str());
      origin.remove_prefix(std::string_view(kPath).size() + 1);
      std::string with_colon = std::string(origin) + ":";
      std::string_view rest = with_colon;
      FUZZ_CHECK(fuzz::line_number(rest) && rest.empty(), "origin \"%s\"", h.origin.c_str());
      // Addresses are whole words of the line: the text must contain them (modulo node sets).
      if (text.find('[') == text.npos)
        FUZZ_CHECK(text.find(h.address) != text.npos, "address \"%s\" not in the input",
                   h.address.c_str());
    }
  } catch (const msrun_ssh::InputError& e) {
    FUZZ_CHECK(located(e.what()), "InputError not located as FILE:LINE: %s", e.what());
  } catch (const std::exception& e) {
    FUZZ_CHECK(false, "unexpected exception: %s", e.what());
  }
  return 0;
}
