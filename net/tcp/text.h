#pragma once
// Internal to net/tcp/ (includes <uv.h>): text for the TCP transport's log lines and errors.

#include <uv.h>

#include <cstdio>
#include <string>

namespace gradmesh::net::tcp {

/// "ECONNREFUSED: connection refused" for a libuv error code (`status` < 0).
inline std::string uv_error_text(int status) {
  return std::string(uv_err_name(status)) + ": " + uv_strerror(status);
}

/// `seconds` with one decimal ("2.5").
inline std::string seconds_text(double seconds) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f", seconds);
  return text;
}

}  // namespace gradmesh::net::tcp
