// Tests for apps/pipeline/job_secret.h: where the job secret comes from, and its errors.

#include "apps/pipeline/job_secret.h"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "engine/error.h"

using namespace gradmesh::app;

namespace {

struct SecretDir {
  SecretDir()
      : path(std::filesystem::temp_directory_path() /
             ("gradmesh_job_secret_test_" + std::to_string(::getpid()))) {
    std::filesystem::create_directories(path);
  }
  ~SecretDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string write(const std::string& name, const std::string& content) const {
    std::ofstream(path / name, std::ios::binary) << content;
    return (path / name).string();
  }
  std::filesystem::path path;
};

JobConfig with_file(const std::string& path) {
  JobConfig config;
  config.security.secret_file = path;
  return config;
}

}  // namespace

TEST_CASE("the job secret comes from security.secret_file, else GRADMESH_SECRET, else none",
          "[config][secret]") {
  const SecretDir dir;
  const std::string file = dir.write("secret", "from the file\n");
  CHECK(job_secret(with_file(file), nullptr) == "from the file");  // trailing line break dropped
  CHECK(job_secret(with_file(file), "from the environment") == "from the file");
  CHECK(job_secret(JobConfig{}, "from the environment") == "from the environment");
  CHECK(job_secret(JobConfig{}, nullptr).empty());
  CHECK(job_secret(with_file(dir.write("binary", std::string("a\0b\r\n", 5))), nullptr) ==
        std::string("a\0b", 3));
}

TEST_CASE("a missing or empty secret file is a ConfigError naming the key and the path",
          "[config][secret]") {
  const SecretDir dir;
  const std::string missing = (dir.path / "nope").string();
  CHECK_THROWS_AS(job_secret(with_file(missing), "ignored"), gradmesh::ConfigError);
  CHECK_THROWS_WITH(job_secret(with_file(missing), nullptr),
                    Catch::Contains("security.secret_file") && Catch::Contains(missing) &&
                        Catch::Contains("No such file"));
  const std::string empty = dir.write("empty", "\n");
  CHECK_THROWS_AS(job_secret(with_file(empty), nullptr), gradmesh::ConfigError);
  CHECK_THROWS_WITH(job_secret(with_file(empty), nullptr),
                    Catch::Contains("security.secret_file") && Catch::Contains(empty) &&
                        Catch::Contains("is empty"));
  CHECK_THROWS_WITH(job_secret(with_file(dir.path.string()), nullptr),
                    Catch::Contains("is a directory"));
}
