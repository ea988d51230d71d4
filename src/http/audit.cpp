// The audit ring (audit.hpp).
#include "audit.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <time.h>

#include <cstdio>

#include "json_put.hpp"
#include "server_impl.hpp"

namespace memcg::http::detail {
namespace {

uint64_t wall_ns() noexcept {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
}

// Cuts `v` at kAuditValueBytes on a UTF-8 boundary; true when it cut.
bool cap_value(std::string& v) {
  if (v.size() <= kAuditValueBytes) return false;
  internal::utf8_cap(v, kAuditValueBytes);
  return true;
}

}  // namespace

std::string token_fingerprint(std::string_view token) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a 64
  for (char c : token) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ull;
  }
  char buf[16];
  std::snprintf(buf, sizeof buf, "fp:%08x", static_cast<unsigned>(h >> 32));
  return buf;
}

AuditRecord audit_request(MHD_Connection* c, std::string_view method, std::string_view path) {
  AuditRecord r;
  const MHD_ConnectionInfo* ctx = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
  const Conn* conn = ctx != nullptr ? static_cast<const Conn*>(ctx->socket_context) : nullptr;
  r.method.assign(method);
  r.path.assign(path);
  if (conn != nullptr && conn->unix_peer) {
    r.peer = "uid:" + std::to_string(conn->uid);
    return r;
  }
  const MHD_ConnectionInfo* info = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
  if (info == nullptr || info->client_addr == nullptr) return r;
  char host[INET6_ADDRSTRLEN] = "";
  const sockaddr* sa = info->client_addr;
  if (sa->sa_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(sa);
    ::inet_ntop(AF_INET, &v4->sin_addr, host, sizeof host);
    r.peer = std::string(host) + ":" + std::to_string(ntohs(v4->sin_port));
  } else if (sa->sa_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(sa);
    ::inet_ntop(AF_INET6, &v6->sin6_addr, host, sizeof host);
    r.peer = "[" + std::string(host) + "]:" + std::to_string(ntohs(v6->sin6_port));
  }
  return r;
}

void AuditLog::record(AuditRecord r) noexcept {
  try {
    r.truncated = cap_value(r.old_value) | cap_value(r.new_value) | r.truncated;
    r.time_ns = wall_ns();
    {
      std::lock_guard<std::mutex> lock(mu_);
      r.seq = ++seq_;
      ++by_status_[r.status];
      while (ring_.size() >= capacity_) ring_.pop_front();
      ring_.push_back(r);
    }
  } catch (...) {  // no memory: counted (by seq) but not kept
  }
  if (callback_) {
    try {
      callback_(r);
    } catch (...) {
    }
  }
}

std::vector<AuditRecord> AuditLog::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {ring_.begin(), ring_.end()};
}

uint64_t AuditLog::total() const {
  std::lock_guard<std::mutex> lock(mu_);
  return seq_;
}

std::string AuditLog::render_json() const {
  using namespace json_out;
  const std::vector<AuditRecord> records = snapshot();
  std::string out = "{\"records\":[";
  bool first = true;
  for (const AuditRecord& r : records) {
    if (!first) out += ',';
    first = false;
    out += "{\"seq\":";
    put_u64(out, r.seq);
    out += ",\"time_ns\":";
    put_u64(out, r.time_ns);
    out += ",\"peer\":";
    put_string(out, r.peer);
    out += ",\"token_id\":";
    put_string(out, r.token_id);
    out += ",\"method\":";
    put_string(out, r.method);
    out += ",\"path\":";
    put_string(out, r.path);
    out += ",\"old\":";
    put_string(out, r.old_value);
    out += ",\"new\":";
    put_string(out, r.new_value);
    out += ",\"truncated\":";
    out += r.truncated ? "true" : "false";
    out += ",\"status\":";
    put_i64(out, r.status);
    out += ",\"result\":";
    put_string(out, r.result);
    out += '}';
  }
  out += "],\"total\":";
  put_u64(out, total());
  out += "}\n";
  return out;
}

std::string AuditLog::render_metrics() const {
  std::string out =
      "# HELP memcg_http_audit_records_total Writes and actions asked for over HTTP, by the "
      "status answered.\n"
      "# TYPE memcg_http_audit_records_total counter\n";
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [status, n] : by_status_)
    out += "memcg_http_audit_records_total{status=\"" + std::to_string(status) + "\"} " +
           std::to_string(n) + "\n";
  return out;
}

}  // namespace memcg::http::detail
