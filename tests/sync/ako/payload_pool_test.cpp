#include "sync/ako/payload_pool.h"

#include <atomic>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

using gradmesh::net::Payload;
using gradmesh::sync::ako::PayloadPool;

TEST_CASE("a buffer comes back to the pool when the last copy of its payload dies", "[ako][pool]") {
  PayloadPool pool(2, 4);
  std::atomic<int> released{0};
  pool.set_on_release([&] { ++released; });
  auto a = pool.acquire();
  auto b = pool.acquire();
  REQUIRE(a.valid());
  REQUIRE(b.valid());
  CHECK_FALSE(pool.acquire().valid());  // all lent out
  a.data()[0] = 1.5f;
  a.data()[1] = 2.5f;
  Payload pa = a.payload(2);
  CHECK_FALSE(a.valid());
  CHECK(pa.size() == 2 * sizeof(float));
  CHECK(pa.as<float>()[1] == 2.5f);
  Payload copy = pa;
  pa = Payload();
  CHECK(pool.available() == 0);
  std::thread([c = std::move(copy)]() mutable { c = Payload(); }).join();  // e.g. the loop thread
  CHECK(pool.available() == 1);
  CHECK(released == 1);
  { auto dropped = std::move(b); }  // a lease never turned into a payload returns too
  CHECK(pool.available() == 2);
  CHECK(released == 2);
  pool.set_on_release({});
}

TEST_CASE("payloads may outlive the pool object", "[ako][pool]") {
  Payload kept;
  {
    PayloadPool pool(1, 3);
    auto lease = pool.acquire();
    lease.data()[2] = 7.0f;
    kept = lease.payload(3);
  }
  CHECK(kept.as<float>()[2] == 7.0f);
}

TEST_CASE("lending and returning from many threads keeps the count", "[ako][pool]") {
  PayloadPool pool(8, 16);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&pool] {
      for (int i = 0; i < 2000; ++i) {
        auto lease = pool.acquire();
        if (!lease.valid()) continue;
        lease.data()[0] = static_cast<float>(i);
        Payload p = lease.payload(1);
        Payload q = p;
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(pool.available() == 8);
}
