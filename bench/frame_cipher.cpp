// bench/frame_cipher: the per-core rate of the frame cipher (net/tcp/frame_cipher.h), the CPU
// cost that authenticated encryption of every frame would add (issue 26, item 5): seal and open
// `bytes`-byte messages in place, `messages` of them, `runs` times; MB/s of payload per core
// (1 MB = 1e6 bytes), one thread. Compare with the uncapped loopback rate of bench_tcp_throughput.
//
//   build/bench/bench_frame_cipher [--bytes B] [--messages N] [--runs K]
// A benchmark, never a test: its figures go in the docs, not in assertions.

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "net/tcp/frame_cipher.h"

int main(int argc, char** argv) {
  std::size_t bytes = 4'000'000, messages = 100, runs = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const std::size_t value = std::strtoull(argv[i + 1], nullptr, 10);
    if (flag == "--bytes")
      bytes = value;
    else if (flag == "--messages")
      messages = value;
    else if (flag == "--runs")
      runs = value;
    else {
      std::fprintf(stderr, "usage: bench_frame_cipher [--bytes B] [--messages N] [--runs K]\n");
      return 2;
    }
  }
  using namespace gradmesh::net::auth;
  CipherKey key{};
  key.fill(3);
  std::vector<std::byte> buffer(bytes, std::byte{0x5a});
  const std::vector<std::byte> prefix(8, std::byte{1});
  std::printf("%zu messages x %zu bytes, in place, one thread\n", messages, bytes);
  std::printf("%4s %12s %12s\n", "run", "seal MB/s", "open MB/s");
  for (std::size_t r = 0; r < runs; ++r) {
    Sealer sealer(key);
    Opener opener(key);
    std::vector<Tag> tags(messages);
    auto t0 = std::chrono::steady_clock::now();
    for (std::size_t m = 0; m < messages; ++m) sealer.seal(prefix, buffer, buffer, tags[m]);
    auto t1 = std::chrono::steady_clock::now();
    // Opening needs the messages as sealed: seal copies again, then open each in turn.
    double open_seconds = 0;
    Sealer again(key);
    for (std::size_t m = 0; m < messages; ++m) {
      again.seal(prefix, buffer, buffer, tags[m]);
      const auto a = std::chrono::steady_clock::now();
      if (!opener.open(prefix, buffer, buffer, tags[m])) {
        std::fprintf(stderr, "bench_frame_cipher: a message did not open\n");
        return 1;
      }
      open_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
    }
    const double seal_seconds = std::chrono::duration<double>(t1 - t0).count();
    const double total = static_cast<double>(messages * bytes) / 1e6;
    std::printf("%4zu %12.0f %12.0f\n", r + 1, total / seal_seconds, total / open_seconds);
  }
  return 0;
}
