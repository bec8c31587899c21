// Fuzzes filter_agent_identities (src/ssh/agent_filter.cc), which puts an ssh agent's list of
// keys in ssh's order, and user_certificate, which reads a certificate's kind. Input: one selector
// byte, then the answer's body as an agent sends it (its type byte first).
//
// Properties, against a reading of the body made here (the oracle):
//  - a body the oracle cannot read whole as an identities answer gives nullopt, and one it can
//    read gives an answer;
//  - the answer reads back, and holds first the body's entries of the listed keys, the first
//    entry of each, in the body's order; then, with the others asked for, every other entry in
//    the body's order, without them none;
//  - with the others asked for, the answer holds as many entries as the body;
//  - listing no key with the others asked for gives the body back;
//  - given certificates (one of the body's first key, made here, and one of no key), the answer
//    begins with those of them that certify a key shown after them, each with that key's comment,
//    the first such key its signer; the rest is as without them.
// The listed keys: the body's keys picked by the selector's low 7 bits, last first, and one blob
// the body never holds; the selector's high bit asks for the others.
// Findings: any crash or sanitizer report, any exception, any property violation.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fuzz_check.h"
#include "msrun_ssh/ssh.h"

namespace {

using Keys = std::vector<std::pair<std::string, std::string>>;

bool u32(std::string_view& in, uint32_t& v) {
  if (in.size() < 4) return false;
  v = (uint32_t{static_cast<uint8_t>(in[0])} << 24) |
      (uint32_t{static_cast<uint8_t>(in[1])} << 16) | (uint32_t{static_cast<uint8_t>(in[2])} << 8) |
      uint32_t{static_cast<uint8_t>(in[3])};
  in.remove_prefix(4);
  return true;
}

// `s` as the protocol writes a string: its 32-bit big-endian length, then its bytes.
std::string str(std::string_view s) {
  std::string out;
  for (int shift = 24; shift >= 0; shift -= 8) out += static_cast<char>((s.size() >> shift) & 0xff);
  return out += s;
}

// The keys of an identities answer's body, or nullopt when it is not one, whole.
std::optional<Keys> read_answer(std::string_view in) {
  if (in.empty() || static_cast<uint8_t>(in[0]) != 12) return std::nullopt;
  in.remove_prefix(1);
  uint32_t n = 0;
  if (!u32(in, n)) return std::nullopt;
  Keys keys;
  for (uint32_t i = 0; i < n; ++i) {
    std::string parts[2];
    for (auto& part : parts) {
      uint32_t len = 0;
      if (!u32(in, len) || in.size() < len) return std::nullopt;
      part = std::string(in.substr(0, len));
      in.remove_prefix(len);
    }
    keys.emplace_back(std::move(parts[0]), std::move(parts[1]));
  }
  if (!in.empty()) return std::nullopt;
  return keys;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  uint8_t selector = data[0];
  bool others = (selector & 0x80) != 0;
  std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::optional<Keys> keys = read_answer(body);
  std::vector<std::string> listed{"\x01never-a-key"};
  if (keys) {
    for (size_t i = keys->size(); i-- > 0;)
      if (selector & (1u << (i % 7))) listed.push_back((*keys)[i].first);
  }
  (void)msrun_ssh::user_certificate(body);  // reads any bytes without harm
  std::optional<std::string> cut = msrun_ssh::filter_agent_identities(body, {listed, others, {}});
  FUZZ_CHECK(cut.has_value() == keys.has_value(), "the filter %s a body the oracle %s",
             cut ? "answered" : "refused", keys ? "reads" : "cannot read");
  if (!keys) return 0;
  std::optional<Keys> got = read_answer(*cut);
  FUZZ_CHECK(got.has_value(), "the cut answer does not read back");
  Keys expected;
  std::set<std::string> first_seen;
  std::vector<bool> taken(keys->size(), false);
  for (size_t i = 0; i < keys->size(); ++i) {
    const auto& key = (*keys)[i];
    bool is_listed = std::find(listed.begin(), listed.end(), key.first) != listed.end();
    if (is_listed && first_seen.insert(key.first).second) {
      expected.push_back(key);
      taken[i] = true;
    }
  }
  if (others)
    for (size_t i = 0; i < keys->size(); ++i)
      if (!taken[i]) expected.push_back((*keys)[i]);
  FUZZ_CHECK(*got == expected, "the answer holds %zu keys, %zu expected in that order", got->size(),
             expected.size());
  if (others)
    FUZZ_CHECK(got->size() == keys->size(), "with the others, %zu of %zu entries", got->size(),
               keys->size());
  if (others)
    FUZZ_CHECK(msrun_ssh::filter_agent_identities(body, {{}, true, {}}) == std::string(body),
               "listing no key did not give the body back");
  // A certificate of the body's first key (its type and the fields after it, as a certificate
  // carries them after its own type and nonce), and one of no key.
  std::vector<std::string> certificates;
  if (!keys->empty()) {
    std::string_view blob = (*keys)[0].first;
    uint32_t n = 0;
    if (u32(blob, n) && blob.size() >= n) {
      std::string type(blob.substr(0, n));
      certificates.push_back(str(type + "-cert-v01@openssh.com") + str("nonce") +
                             std::string(blob.substr(n)) + "serial and the rest");
    }
  }
  certificates.push_back(str("never-cert-v01@openssh.com") + str("nonce") + str("no key's"));
  std::vector<std::pair<std::string, std::string>> signers;
  std::optional<std::string> with =
      msrun_ssh::filter_agent_identities(body, {listed, others, certificates}, nullptr, &signers);
  std::optional<Keys> with_keys = with ? read_answer(*with) : std::nullopt;
  FUZZ_CHECK(with_keys.has_value(), "the answer with certificates does not read back");
  Keys front;
  for (const std::string& cert : certificates) {
    auto signer = std::find_if(expected.begin(), expected.end(), [&](const auto& key) {
      return msrun_ssh::certificate_is_of(cert, key.first);
    });
    if (signer != expected.end()) front.emplace_back(cert, signer->second);
  }
  FUZZ_CHECK(signers.size() == front.size(), "%zu signers told, %zu certificates shown",
             signers.size(), front.size());
  front.insert(front.end(), expected.begin(), expected.end());
  FUZZ_CHECK(*with_keys == front, "with certificates, %zu keys, %zu expected in that order",
             with_keys->size(), front.size());
  return 0;
}
