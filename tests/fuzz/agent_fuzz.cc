// Fuzzes AgentReader (include/msrun_ssh/agent.h), which reads a launch agent's stdout: login-rc
// noise, the hello line, then frames.
//
// Input layout: byte 0 the number n of chunk sizes (b % 16); the next n bytes are chunk sizes
// 0..255, used cyclically (0: an empty feed); the rest is the stream, fed in those chunks (one
// chunk when n = 0 or every size is 0).
//
// Properties:
//  - no crash, no sanitizer report, and the reader never holds more than what was fed;
//  - the frames, noise, hello() and broken() do not depend on the chunking: they equal those of
//    the whole stream fed at once;
//  - a stream built from frames (agent_frame) after a hello reads back exactly those frames, also
//    when the noise before it holds a partial hello;
//  - noise is handed out at most once, and only with the hello.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_check.h"
#include "msrun_ssh/agent.h"

namespace {

using msrun_ssh::AgentFrame;
using msrun_ssh::AgentReader;

struct Read {
  std::vector<AgentFrame> frames;
  std::string noise;
  int noise_calls = 0;
  bool hello = false, broken = false;
};

Read read_in_chunks(std::string_view stream, const std::vector<size_t>& sizes) {
  Read r;
  AgentReader reader;
  auto feed = [&](std::string_view chunk) {
    bool had_hello = reader.hello();
    reader.feed(
        chunk,
        [&](std::string_view n) {
          FUZZ_CHECK(!had_hello, "noise after the hello");
          r.noise.append(n);
          ++r.noise_calls;
        },
        [&](AgentFrame&& f) { r.frames.push_back(std::move(f)); });
  };
  bool progress = false;
  for (size_t s : sizes) progress = progress || s > 0;
  if (!progress) {
    feed(stream);
  } else {
    for (size_t k = 0, pos = 0; pos < stream.size(); ++k) {
      size_t n = std::min(sizes[k % sizes.size()], stream.size() - pos);
      feed(stream.substr(pos, n));
      pos += n;
    }
  }
  r.hello = reader.hello();
  r.broken = reader.broken();
  FUZZ_CHECK(r.noise_calls <= 1, "noise handed out %d times", r.noise_calls);
  return r;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const size_t n_sizes = data[0] % 16;
  if (size < 1 + n_sizes) return 0;
  std::vector<size_t> sizes(data + 1, data + 1 + n_sizes);
  std::string_view stream(reinterpret_cast<const char*>(data) + 1 + n_sizes, size - 1 - n_sizes);

  Read whole = read_in_chunks(stream, {});
  Read cut = read_in_chunks(stream, sizes);
  FUZZ_CHECK(cut.hello == whole.hello && cut.broken == whole.broken, "state depends on chunks");
  FUZZ_CHECK(cut.frames == whole.frames, "frames depend on chunks: %zu vs %zu", cut.frames.size(),
             whole.frames.size());
  FUZZ_CHECK(cut.noise == whole.noise, "noise depends on chunks");

  // The stream's bytes as frame payloads, after the stream as noise cut before any hello in it.
  std::string_view noise = stream.substr(0, stream.find(msrun_ssh::kAgentHello));
  std::vector<AgentFrame> sent;
  std::string built(noise);
  built += msrun_ssh::kAgentHello;
  // Noise that ends like the start of the hello makes an earlier hello with it: not a case here.
  if (built.find(msrun_ssh::kAgentHello) != noise.size()) return 0;
  for (size_t at = 0, i = 0; at < stream.size(); ++i) {
    size_t n = std::min<size_t>(stream.size() - at, 1 + static_cast<uint8_t>(stream[at]) % 32);
    sent.push_back(AgentFrame{"oexcf"[i % 5], static_cast<uint32_t>(i * 2654435761u),
                              std::string(stream.substr(at, n))});
    built += msrun_ssh::agent_frame(sent.back().op, sent.back().id, sent.back().payload);
    at += n;
  }
  Read back = read_in_chunks(built, sizes);
  FUZZ_CHECK(back.hello && !back.broken, "built stream: hello %d broken %d", back.hello,
             back.broken);
  FUZZ_CHECK(back.frames == sent, "built stream: %zu frames read, %zu sent", back.frames.size(),
             sent.size());
  return 0;
}
