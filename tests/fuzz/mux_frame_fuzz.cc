// Fuzzes the kept connections' frame codec: encode_mux_frame and decode_mux_frame
// (include/msrun_ssh/mux.h), what a keeper reads from any process that connects to its socket.
//
// Input layout: the whole input is a byte stream of frames, decoded as the keeper does. The same
// bytes also build one frame: byte 0 picks its type from the layout table below (b % 12), then each
// number is 8 bytes big-endian (zero when the input ends) masked to its field's width, then each
// string but the last is one length byte (cut to what is left) and its bytes, the last string the
// rest.
//
// Properties (mux.h: "Takes the next whole frame off the front of `data`; nullopt (and `data` as
// it was) when it is not all there yet. Throws std::runtime_error for a malformed frame"):
//  - decoding arbitrary bytes never crashes; it throws std::runtime_error (nothing else), or
//    returns nullopt with the view unchanged, or returns a frame and advances the view;
//  - a decoded frame has the numbers and strings its type says, each number within its field's
//    width, and encode_mux_frame gives back exactly the bytes it consumed;
//  - decoding repeatedly until nullopt or a throw consumes a prefix of the input (the view stays
//    its suffix); every shorter prefix of a decoded frame's bytes gives nullopt, not a throw and
//    not a frame;
//  - the built frame encodes to 4 + 1 + widths + 4 per string + the strings' bytes, with that
//    length less 4 in front, and decodes back to the same type, numbers and strings, consuming
//    the whole buffer; its shorter prefixes give nullopt too.
#include <algorithm>
#include <cstdint>
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_check.h"
#include "msrun_ssh/mux.h"

namespace ms = msrun_ssh;

namespace {

// mux.cc's layout_of table (mux.h's comment): type, the width in bytes of each number, strings.
struct Layout {
  char type;
  std::vector<int> widths;
  size_t strings;
};

const std::vector<Layout>& layouts() {
  static const std::vector<Layout> kLayouts = {{'H', {8, 4}, 1}, {'X', {4, 4}, 1},
                                               {'W', {4}, 1},    {'E', {4}, 0},
                                               {'C', {4}, 0},    {'K', {4}, 1},
                                               {'D', {4}, 0},    {'Q', {}, 0},
                                               {'h', {1, 4}, 1}, {'e', {1, 4, 4, 1, 4}, 2},
                                               {'a', {4, 8}, 0}, {'l', {}, 1}};
  return kLayouts;
}

const Layout* layout_of(char type) {
  for (const auto& l : layouts())
    if (l.type == type) return &l;
  return nullptr;
}

uint64_t mask(int width) { return width >= 8 ? ~uint64_t{0} : (uint64_t{1} << (8 * width)) - 1; }

std::string hex(std::string_view s) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s.substr(0, 64)) {
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  if (s.size() > 64) out += "...";
  return out;
}

// One decode of `data` (a copy of the caller's view): the contract's three outcomes.
// `threw` says whether it threw std::runtime_error.
std::optional<ms::MuxFrame> decode_checked(std::string_view& data, bool& threw) {
  const std::string_view before = data;
  threw = false;
  std::optional<ms::MuxFrame> f;
  try {
    f = ms::decode_mux_frame(data);
  } catch (const std::runtime_error&) {
    threw = true;
  } catch (const std::exception& e) {
    FUZZ_CHECK(false, "decode threw something else than std::runtime_error: %s", e.what());
  }
  if (threw || !f) {
    FUZZ_CHECK(data.data() == before.data() && data.size() == before.size(),
               "the view moved from %zu to %zu bytes without a frame", before.size(), data.size());
    return std::nullopt;
  }
  FUZZ_CHECK(
      data.data() > before.data() && data.data() + data.size() == before.data() + before.size(),
      "a frame, but the view is not a shorter suffix (%zu of %zu bytes left)", data.size(),
      before.size());
  return f;
}

// Every shorter prefix of one whole frame's bytes is "not all there yet".
void check_prefixes(std::string_view whole) {
  for (size_t n = 0; n < whole.size(); ++n) {
    std::string_view cut = whole.substr(0, n);
    bool threw = false;
    auto f = decode_checked(cut, threw);
    FUZZ_CHECK(!threw && !f, "the first %zu of the %zu bytes of a frame gave %s", n, whole.size(),
               threw ? "a throw" : "a frame");
  }
}

void check_fields(const ms::MuxFrame& f) {
  const Layout* l = layout_of(f.type);
  FUZZ_CHECK(l != nullptr, "decoded a frame of unknown type %d",
             static_cast<int>(static_cast<unsigned char>(f.type)));
  FUZZ_CHECK(f.numbers.size() == l->widths.size() && f.strings.size() == l->strings,
             "type '%c': %zu numbers and %zu strings", f.type, f.numbers.size(), f.strings.size());
  for (size_t i = 0; i < f.numbers.size(); ++i)
    FUZZ_CHECK((f.numbers[i] & ~mask(l->widths[i])) == 0, "type '%c' number %zu: %llu too wide",
               f.type, i, static_cast<unsigned long long>(f.numbers[i]));
}

// The input as a stream of frames.
void decode_stream(std::string_view input) {
  std::string_view rest = input;
  for (;;) {
    std::string_view before = rest;
    bool threw = false;
    auto f = decode_checked(rest, threw);
    FUZZ_CHECK(rest.data() + rest.size() == input.data() + input.size(),
               "what is left is not a suffix of the input");
    if (!f) break;
    std::string_view consumed = before.substr(0, before.size() - rest.size());
    check_fields(*f);
    std::string again = ms::encode_mux_frame(*f);
    FUZZ_CHECK(again == consumed, "type '%c': consumed %s, re-encoded %s", f->type,
               hex(consumed).c_str(), hex(again).c_str());
    check_prefixes(consumed);
  }
}

// The input as the makings of one valid frame.
void round_trip(std::string_view input) {
  if (input.empty()) return;
  const Layout& l = layouts()[static_cast<unsigned char>(input[0]) % layouts().size()];
  input.remove_prefix(1);
  ms::MuxFrame f;
  f.type = l.type;
  size_t expected_size = 4 + 1;
  for (int w : l.widths) {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) {
      v <<= 8;
      if (!input.empty()) {
        v |= static_cast<unsigned char>(input[0]);
        input.remove_prefix(1);
      }
    }
    f.numbers.push_back(v & mask(w));
    expected_size += static_cast<size_t>(w);
  }
  for (size_t i = 0; i < l.strings; ++i) {
    size_t n = input.size();
    if (i + 1 < l.strings && !input.empty()) {
      n = std::min<size_t>(static_cast<unsigned char>(input[0]), input.size() - 1);
      input.remove_prefix(1);
    }
    f.strings.emplace_back(input.substr(0, n));
    input.remove_prefix(n);
    expected_size += 4 + n;
  }

  std::string bytes = ms::encode_mux_frame(f);
  FUZZ_CHECK(bytes.size() == expected_size, "type '%c': %zu bytes encoded, %zu expected", f.type,
             bytes.size(), expected_size);
  uint64_t length = 0;
  for (int i = 0; i < 4; ++i) length = (length << 8) | static_cast<unsigned char>(bytes[i]);
  FUZZ_CHECK(length == bytes.size() - 4 && bytes[4] == f.type,
             "type '%c': length %llu and type byte %d in front of %zu bytes", f.type,
             static_cast<unsigned long long>(length), static_cast<int>(bytes[4]), bytes.size());

  std::string_view view(bytes);
  bool threw = false;
  auto back = decode_checked(view, threw);
  FUZZ_CHECK(back.has_value(), "type '%c': %s decoding %s", f.type, threw ? "a throw" : "nullopt",
             hex(bytes).c_str());
  FUZZ_CHECK(view.empty(), "type '%c': %zu of %zu bytes left", f.type, view.size(), bytes.size());
  FUZZ_CHECK(back->type == f.type, "type '%c' came back as %d", f.type,
             static_cast<int>(back->type));
  FUZZ_CHECK(back->numbers == f.numbers, "type '%c': the numbers changed", f.type);
  FUZZ_CHECK(back->strings == f.strings, "type '%c': the strings changed", f.type);
  check_prefixes(bytes);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  decode_stream(input);
  round_trip(input);
  return 0;
}
