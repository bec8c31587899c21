// Fuzzes LineFramer (include/msrun_ssh/output.h).
//
// Input layout: byte 0 picks max_line = 1 + b % 64; byte 1 the number n of chunk sizes (b % 16);
// the next n bytes are chunk sizes 0..255, used cyclically (0: an empty feed); the rest is the
// stream, fed in chunks of those sizes (one chunk when n = 0), then finish().
//
// Properties (output.h: "a line of more than max_line bytes (its newline left out) is handed out
// in pieces of that size, the last ending with its newline, wherever the chunks fed happened to
// be cut"):
//  - the pieces handed out, concatenated, are exactly the stream; none is empty;
//  - a piece holds at most one '\n', and only as its last byte; no piece holds more than
//    max_line bytes besides that newline;
//  - a piece handed out by feed() without '\n' is exactly max_line long (a long line cut up);
//  - the piece of finish() has no '\n' and is 1..max_line long; pending() is never above
//    max_line and equals the bytes fed since the end of the last piece;
//  - the pieces do not depend on the chunking: they are exactly those of the stream cut after
//    every '\n', and after max_line bytes that a '\n' does not follow (the Model below, byte by
//    byte).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_check.h"
#include "msrun_ssh/output.h"

namespace {

// The reference, byte by byte and blind to chunk boundaries.
class Model {
 public:
  explicit Model(size_t max_line) : max_line_(max_line) {}
  void feed(std::string_view chunk, std::vector<std::string>& out) {
    for (char c : chunk) {
      if (pending_.size() == max_line_ && c != '\n') {  // a full piece its newline does not end
        out.push_back(pending_);
        pending_.clear();
      }
      pending_ += c;
      if (c == '\n') {
        out.push_back(pending_);
        pending_.clear();
      }
    }
  }
  void finish(std::vector<std::string>& out) {
    if (!pending_.empty()) out.push_back(pending_);
    pending_.clear();
  }

 private:
  size_t max_line_;
  std::string pending_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const size_t max_line = 1 + data[0] % 64;
  const size_t n_sizes = data[1] % 16;
  if (size < 2 + n_sizes) return 0;
  std::vector<size_t> sizes(data + 2, data + 2 + n_sizes);
  std::string_view stream(reinterpret_cast<const char*>(data) + 2 + n_sizes, size - 2 - n_sizes);

  msrun_ssh::LineFramer framer(max_line);
  Model model(max_line);
  std::vector<std::string> pieces, expected;
  std::vector<bool> from_finish;
  size_t since_piece = 0;  // bytes fed since the end of the last piece
  auto take = [&](bool finishing) {
    return [&, finishing](std::string_view piece) {
      FUZZ_CHECK(!piece.empty(), "empty piece");
      pieces.emplace_back(piece);
      from_finish.push_back(finishing);
    };
  };
  auto feed = [&](std::string_view chunk) {
    size_t before = pieces.size();
    framer.feed(chunk, take(false));
    model.feed(chunk, expected);
    since_piece += chunk.size();
    for (size_t i = before; i < pieces.size(); ++i) {
      FUZZ_CHECK(pieces[i].size() <= since_piece, "piece %zu longer than what was fed", i);
      since_piece -= pieces[i].size();
    }
    FUZZ_CHECK(framer.pending() == since_piece, "pending() %zu, %zu bytes fed since last piece",
               framer.pending(), since_piece);
    FUZZ_CHECK(framer.pending() <= max_line, "pending() %zu > max_line %zu", framer.pending(),
               max_line);
  };

  bool progress = false;
  for (size_t s : sizes) progress = progress || s > 0;
  if (!progress) {  // only empty chunks (or none): feed those, then the whole stream at once
    for (size_t k = 0; k < n_sizes; ++k) feed({});
    feed(stream);
  } else {
    for (size_t k = 0, pos = 0; pos < stream.size(); ++k) {
      size_t n = std::min(sizes[k % n_sizes], stream.size() - pos);
      feed(stream.substr(pos, n));
      pos += n;
    }
  }
  size_t pending = framer.pending();
  size_t before = pieces.size();
  framer.finish(take(true));
  model.finish(expected);
  FUZZ_CHECK(pieces.size() == before + (pending ? 1 : 0), "finish() handed out %zu pieces",
             pieces.size() - before);
  FUZZ_CHECK(framer.pending() == 0, "pending() %zu after finish()", framer.pending());

  std::string all;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const std::string& p = pieces[i];
    all += p;
    size_t nl = p.find('\n');
    FUZZ_CHECK(nl == std::string::npos || nl == p.size() - 1, "piece %zu has '\\n' at %zu of %zu",
               i, nl, p.size());
    if (from_finish[i]) {
      FUZZ_CHECK(nl == std::string::npos && p.size() <= max_line,
                 "finish() piece of %zu bytes (max_line %zu)", p.size(), max_line);
    } else if (nl == std::string::npos) {
      FUZZ_CHECK(p.size() == max_line, "cut piece %zu of %zu bytes, max_line %zu", i, p.size(),
                 max_line);
    }
    FUZZ_CHECK(p.size() <= max_line + (nl == std::string::npos ? 0 : 1),
               "piece %zu of %zu bytes, max_line %zu", i, p.size(), max_line);
  }
  FUZZ_CHECK(all == stream, "pieces (%zu bytes) are not the stream (%zu bytes)", all.size(),
             stream.size());
  FUZZ_CHECK(pieces == expected, "%zu pieces, the model has %zu", pieces.size(), expected.size());
  return 0;
}
