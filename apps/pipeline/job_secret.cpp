#include "apps/pipeline/job_secret.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "engine/error.h"

namespace gradmesh::app {

std::string job_secret(const JobConfig& config, const char* environment_secret) {
  const std::string& path = config.security.secret_file;
  if (path.empty()) return environment_secret != nullptr ? std::string(environment_secret) : "";
  const auto fail = [&path](const std::string& why) {
    return ConfigError("security.secret_file = \"" + path + "\": " + why +
                       "; expected a readable file holding the job secret");
  };
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw fail("is a directory");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw fail(std::string("cannot open: ") + std::strerror(errno));
  std::string secret((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw fail("read error");
  while (!secret.empty() && (secret.back() == '\n' || secret.back() == '\r')) secret.pop_back();
  if (secret.empty()) throw fail("is empty");
  return secret;
}

}  // namespace gradmesh::app
