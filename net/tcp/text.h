#pragma once
// Internal to net/tcp/ (includes <uv.h>): text for the TCP transport's log lines and errors.

#include <uv.h>

#include <cstddef>
#include <cstdio>
#include <string>

#include "net/frame.h"

namespace gradmesh::net::tcp {

/// "ECONNREFUSED: connection refused" for a libuv error code (`status` < 0).
inline std::string uv_error_text(int status) {
  return std::string(uv_err_name(status)) + ": " + uv_strerror(status);
}

/// A rank not (yet) known: an inbound connection before its Challenge names one.
inline constexpr std::size_t kNoRank = static_cast<std::size_t>(-1);

/// A frame body's name for errors ("Challenge"), "unknown" for one out of the schema.
inline const char* body_name(schema::Body type) {
  const char* name = schema::EnumNameBody(type);
  return (name != nullptr && *name != '\0') ? name : "unknown";
}

/// `seconds` with one decimal ("2.5").
inline std::string seconds_text(double seconds) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f", seconds);
  return text;
}

}  // namespace gradmesh::net::tcp
