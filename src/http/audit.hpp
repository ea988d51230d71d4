// The audit ring of memcg::http::Server (memcg/http/audit.hpp): records of every write and action,
// bounded, counted by status, handed to the application's callback outside the lock. Private to
// src/http.
//
// For the handlers of new writes and actions: build an AuditRecord with audit_request() (the
// peer from the connection), set token_id (token_fingerprint() of the token shown, or the
// configured token_name; "" on the Unix socket), old_value/new_value/status/result, then
// Impl::audit.record(). handlers.cpp's audit_post() does this for the file writes.
#pragma once

#include <microhttpd.h>

#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "memcg/http/audit.hpp"

namespace memcg::http::detail {

class AuditLog {
 public:
  AuditLog(size_t capacity, AuditCallback callback)
      : capacity_(capacity), callback_(std::move(callback)) {}

  // Stamps `r` (seq, time), caps its values, keeps it (the oldest record goes past the capacity),
  // counts its status, then calls the callback with no lock held. Never throws: a record that
  // cannot be kept for want of memory is still counted.
  void record(AuditRecord r) noexcept;

  // The records held, oldest first, as JSON: {"records":[...],"total":N}.
  std::string render_json() const;
  // Prometheus lines: memcg_http_audit_records_total by status (HELP and TYPE included).
  std::string render_metrics() const;
  uint64_t total() const;
  std::vector<AuditRecord> snapshot() const;

 private:
  const size_t capacity_;
  const AuditCallback callback_;
  mutable std::mutex mu_;
  std::deque<AuditRecord> ring_;           // guarded by mu_
  uint64_t seq_ = 0;                       // guarded by mu_
  std::map<int, uint64_t> by_status_;      // guarded by mu_; statuses are a small fixed set
};

// "fp:" and the first 32 bits of the 64-bit FNV-1a hash of `token`, in hex.
std::string token_fingerprint(std::string_view token);

// A record for the request on `c`: its peer ("uid:N" on the Unix socket), method and path. The
// token id is left to the caller (it knows which token was shown).
AuditRecord audit_request(MHD_Connection* c, std::string_view method, std::string_view path);

}  // namespace memcg::http::detail
