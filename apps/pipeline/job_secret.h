#pragma once
// The job secret that authenticates a node's connections (net/tcp/auth.h), from the job config or
// the environment.

#include <string>

#include "apps/config/job_config.h"

namespace gradmesh::app {

/// The environment variable that holds the job secret itself (not a path).
inline constexpr const char* kSecretEnvironmentVariable = "GRADMESH_SECRET";

/// This node's job secret. Precedence: the content of the file at `security.secret_file` when that
/// key is set (not ""), with trailing line breaks dropped (so `echo secret > file` and
/// GRADMESH_SECRET=secret agree); else `environment_secret` (GRADMESH_SECRET's value, nullptr when
/// unset; used as is); else "" (no secret: any host that reaches the node's port may join).
/// The secret is never logged; errors name the key and the path only.
/// @throws gradmesh::ConfigError naming security.secret_file and the path when the file cannot be
///   read, or is empty.
[[nodiscard]] std::string job_secret(const JobConfig& config, const char* environment_secret);

}  // namespace gradmesh::app
