#pragma once
// Test helpers for ranks run as threads of one process: run a body per rank, collect what each
// threw, read an exception's message.

#include <cstddef>
#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace gradmesh::testing {

/// Runs body(r) on one thread per rank r of `ranks` (0 .. n - 1 when empty) and joins them all.
/// Rethrows nothing: returns, indexed by rank (size n), what each body threw, or nullptr.
inline std::vector<std::exception_ptr> run_on_threads(std::size_t n,
                                                      const std::function<void(std::size_t)>& body,
                                                      std::vector<std::size_t> ranks = {}) {
  if (ranks.empty())
    for (std::size_t r = 0; r < n; ++r) ranks.push_back(r);
  std::vector<std::exception_ptr> errors(n);
  std::vector<std::thread> threads;
  for (const std::size_t r : ranks) {
    threads.emplace_back([&, r] {
      try {
        body(r);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

/// what() of the std::exception `error` holds ("" for another type).
inline std::string message_of(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
  }
  return {};
}

}  // namespace gradmesh::testing
