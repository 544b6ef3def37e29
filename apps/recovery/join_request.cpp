#include "apps/recovery/join_request.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <system_error>

#include <spdlog/spdlog.h>
#include <zlib.h>
#include <nlohmann/json.hpp>

#include "apps/recovery/checkpoint_file.h"
#include "topo/peer_list.h"

namespace gradmesh::app {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

fs::path requests_dir(const fs::path& root) { return root / "join-requests"; }

/// "host:port" as a file name: every byte that is not a letter, digit, '.' or '-' becomes '_'.
std::string file_stem(const std::string& address) {
  std::string out = address;
  for (char& c : out) {
    const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                       c == '.' || c == '-';
    if (!plain) c = '_';
  }
  return out;
}

fs::path request_path(const fs::path& root, const std::string& address) {
  return requests_dir(root) / (file_stem(address) + ".json");
}

fs::path refusal_path(const fs::path& root, const std::string& address) {
  return requests_dir(root) / (file_stem(address) + ".refused.json");
}

void write_json(const fs::path& path, const json& value) {
  fs::create_directories(path.parent_path());
  const std::string text = value.dump(2) + "\n";
  write_file_atomically(path, std::as_bytes(std::span(text.data(), text.size())));
}

/// The file's JSON, or nullopt (logged) when it cannot be read or parsed; a missing file is
/// nullopt without a word (it may have been withdrawn since the folder was listed).
std::optional<json> read_json(const fs::path& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    spdlog::warn("skipping {}: not JSON ({})", path.string(), e.what());
    return std::nullopt;
  }
}

std::uint64_t fresh_nonce() {
  std::random_device device;
  std::uint64_t nonce = 0;
  while (nonce == 0) nonce = (std::uint64_t{device()} << 32) ^ device();
  return nonce;
}

}  // namespace

JoinRequest file_join_request(const fs::path& root, const std::string& address) {
  JoinRequest request{fresh_nonce(), address};
  write_json(request_path(root, address), json{{"nonce", request.nonce}, {"address", address}});
  return request;
}

std::vector<JoinRequest> read_join_requests(const fs::path& root) {
  std::vector<JoinRequest> out;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(requests_dir(root), error)) {
    const fs::path& path = entry.path();
    const std::string name = path.filename().string();
    if (path.extension() != ".json" || name.ends_with(".refused.json")) continue;
    const std::optional<json> value = read_json(path);
    if (!value) continue;
    try {
      JoinRequest request{value->at("nonce").get<std::uint64_t>(),
                          value->at("address").get<std::string>()};
      if (request.address.empty() || request_path(root, request.address) != path) {
        spdlog::warn("skipping {}: its address '{}' is not the one its name says", path.string(),
                     request.address);
        continue;
      }
      // Admitted, an address that is not one HOST:PORT would fail every node's next view.
      std::string why;
      try {
        if (topo::PeerList::parse(request.address).size() != 1) why = "several addresses";
      } catch (const ConfigError& e) {
        why = e.what();
      }
      if (!why.empty()) {
        spdlog::warn("skipping {}: '{}' is not one HOST:PORT ({})", path.string(), request.address,
                     why);
        continue;
      }
      out.push_back(std::move(request));
    } catch (const json::exception& e) {
      spdlog::warn("skipping {}: not a join request ({})", path.string(), e.what());
    }
  }
  return out;
}

void withdraw_join_request(const fs::path& root, const JoinRequest& request) {
  const fs::path path = request_path(root, request.address);
  const std::optional<json> value = read_json(path);
  if (!value || value->value("nonce", std::uint64_t{0}) != request.nonce) return;
  std::error_code ignored;
  fs::remove(path, ignored);
}

std::vector<std::uint64_t> encode_join_requests(std::span<const JoinRequest> requests) {
  std::vector<std::uint64_t> out;
  for (const JoinRequest& r : requests) {
    out.push_back(r.nonce);
    out.push_back(r.address.size());
    const std::size_t words = (r.address.size() + 7) / 8;
    const std::size_t at = out.size();
    out.resize(at + words, 0);
    if (!r.address.empty()) std::memcpy(out.data() + at, r.address.data(), r.address.size());
  }
  return out;
}

std::vector<JoinRequest> decode_join_requests(std::span<const std::uint64_t> words) {
  constexpr std::uint64_t kMaxAddress = 1024;
  std::vector<JoinRequest> out;
  std::size_t at = 0;
  while (at < words.size()) {
    if (words.size() - at < 2) throw ProtocolError("a join request list ends inside a request");
    const std::uint64_t nonce = words[at], length = words[at + 1];
    at += 2;
    if (length == 0 || length > kMaxAddress || (length + 7) / 8 > words.size() - at) {
      throw ProtocolError("a join request's address of " + std::to_string(length) +
                          " bytes does not fit the list");
    }
    std::string address(static_cast<std::size_t>(length), '\0');
    std::memcpy(address.data(), words.data() + at, address.size());
    at += (length + 7) / 8;
    out.push_back(JoinRequest{nonce, std::move(address)});
  }
  return out;
}

std::vector<JoinRequest> merge_join_requests(const std::vector<std::vector<std::uint64_t>>& lists) {
  std::map<std::string, std::uint64_t> by_address;
  for (const auto& list : lists) {
    for (JoinRequest& r : decode_join_requests(list)) {
      std::uint64_t& nonce = by_address[r.address];
      nonce = std::max(nonce, r.nonce);
    }
  }
  std::vector<JoinRequest> out;
  for (const auto& [address, nonce] : by_address) out.push_back(JoinRequest{nonce, address});
  return out;
}

std::string view_id(const std::vector<std::string>& peers) {
  std::string joined;
  for (const std::string& p : peers) joined += (joined.empty() ? "" : ",") + p;
  const uLong crc = crc32(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(joined.data()),
                          static_cast<uInt>(joined.size()));
  return fmt::format("{:08x}", static_cast<std::uint32_t>(crc));
}

fs::path view_dir(const fs::path& root, std::uint64_t view, const std::vector<std::string>& peers) {
  return view == 0 ? root : root / ("view-" + std::to_string(view) + "-" + view_id(peers));
}

void write_view_admission(const fs::path& root, const ViewAdmission& a) {
  write_json(view_dir(root, a.view, a.peers) / "view.json", json{{"view", a.view},
                                                                 {"peers", a.peers},
                                                                 {"resume", a.resume.string()},
                                                                 {"resume_nodes", a.resume_nodes},
                                                                 {"iteration", a.iteration},
                                                                 {"admitted", a.admitted}});
}

std::optional<ViewAdmission> find_view_admission(const fs::path& root, std::uint64_t nonce) {
  std::optional<ViewAdmission> found;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(root, error)) {
    if (!entry.path().filename().string().starts_with("view-")) continue;
    const fs::path path = entry.path() / "view.json";
    const std::optional<json> value = read_json(path);  // none: a view no node grew into
    if (!value) continue;
    try {
      ViewAdmission a;
      a.view = value->at("view").get<std::uint64_t>();
      a.peers = value->at("peers").get<std::vector<std::string>>();
      a.resume = value->at("resume").get<std::string>();
      a.resume_nodes = value->at("resume_nodes").get<std::size_t>();
      a.iteration = value->at("iteration").get<std::uint64_t>();
      a.admitted = value->at("admitted").get<std::vector<std::uint64_t>>();
      const bool mine = std::find(a.admitted.begin(), a.admitted.end(), nonce) != a.admitted.end();
      if (mine && (!found || a.view > found->view)) found = std::move(a);
    } catch (const json::exception& e) {
      spdlog::warn("skipping {}: not a view's members ({})", path.string(), e.what());
    }
  }
  return found;
}

void write_join_refusal(const fs::path& root, const JoinRequest& request,
                        const std::string& reason) {
  write_json(refusal_path(root, request.address),
             json{{"nonce", request.nonce}, {"reason", reason}});
}

std::optional<std::string> find_join_refusal(const fs::path& root, const JoinRequest& request) {
  const std::optional<json> value = read_json(refusal_path(root, request.address));
  if (!value || value->value("nonce", std::uint64_t{0}) != request.nonce) return std::nullopt;
  return value->value("reason", std::string("(no reason given)"));
}

ViewGrowth::ViewGrowth(std::uint64_t iteration, std::vector<JoinRequest> joiners)
    : Error("the job takes " + std::to_string(joiners.size()) +
            " restarted node(s) back at the checkpoint of iteration " + std::to_string(iteration)),
      iteration_(iteration),
      joiners_(std::move(joiners)) {}

}  // namespace gradmesh::app
