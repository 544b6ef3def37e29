#pragma once
// Child processes for the end-to-end tests: spawn with output to a file, wait with a deadline,
// kill. Every wait is bounded, so a hung node fails its test instead of hanging CI.

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace gradmesh::testing {

/// A spawned child; killed (SIGKILL) and reaped on destruction if still running.
class Process {
 public:
  /// Starts `argv` (argv[0] is the executable path) with stdout and stderr appended to `log`.
  Process(const std::vector<std::string>& argv, const std::filesystem::path& log);
  Process(Process&& other) noexcept;
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;
  /// Kills and reaps this one if still running, then takes `other`'s child.
  Process& operator=(Process&& other) noexcept;
  ~Process();

  /// Waits up to `limit` for the exit; returns the exit status (128 + signal if killed), or
  /// nullopt on time-out.
  std::optional<int> wait_for(std::chrono::milliseconds limit);
  void kill_now();
  [[nodiscard]] pid_t pid() const noexcept { return pid_; }

 private:
  void kill_and_reap() noexcept;  // if still running
  pid_t pid_ = -1;
  std::optional<int> status_;
};

/// Runs `argv` (as Process does) to its end; returns its exit status, or -1 if it outlived
/// `limit` (it is then killed).
int run_to_end(const std::vector<std::string>& argv, const std::filesystem::path& log,
               std::chrono::milliseconds limit);

/// The whole content of a file ("" if missing).
std::string read_file(const std::filesystem::path& path);

/// Waits up to `limit` until `path` contains `text`.
bool wait_for_text(const std::filesystem::path& path, const std::string& text,
                   std::chrono::milliseconds limit);

/// A fresh, empty directory under the system temp dir, named after `stem` and this process.
std::filesystem::path fresh_directory(const std::string& stem);

/// `count` TCP ports on 127.0.0.1 that were free a moment ago (bound to port 0, then released).
std::vector<int> free_ports(std::size_t count);

}  // namespace gradmesh::testing
