// The audit records of memcg::http::Server: every write and every action a client asked for,
// with who asked, what it changed and how it ended. Kept in a bounded ring (GET /v1/audit),
// counted in /metrics by status, and handed to ServerOptions::audit_log if set.
//
// A record never holds a bearer token: the token is named by ServerOptions::token_name, or by a
// fingerprint (the first 32 bits of a 64-bit FNV-1a hash, "fp:1a2b3c4d"), enough to tell two
// tokens apart and useless to authenticate with. Values are capped (kAuditValueBytes) and kept
// as the text the file reads or the client sent, control characters included (JSON escapes
// them).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace memcg::http {

// Bytes of an old or new value an audit record keeps (the rest is cut, `truncated` set).
inline constexpr size_t kAuditValueBytes = 256;

struct AuditRecord {
  uint64_t seq = 0;      // 1, 2, ... since the server started
  uint64_t time_ns = 0;  // wall clock (CLOCK_REALTIME), nanoseconds since the epoch
  std::string peer;      // "127.0.0.1:54321", "[::1]:54321", or "uid:1000" on the Unix socket
  std::string token_id;  // token_name or "fp:xxxxxxxx"; "" when none was given (Unix socket)
  std::string method;    // "POST"
  std::string path;      // the request's path, e.g. "/v1/groups/a/memory.max"
  std::string old_value; // what the file read before (writes; "" if unreadable or refused early)
  std::string new_value; // what was asked for (the body; "" for a request refused on its
                         // headers, e.g. a wrong token: its body is never read)
  bool truncated = false;  // a value was cut at kAuditValueBytes
  int status = 0;        // the HTTP status answered
  std::string result;    // "ok", "accepted" (still running), or why not ("EBUSY", "wrong token")
};

// Called once per record, outside every lock of the server and the library, on the thread that
// served the request. Must not throw (what it throws is dropped) and should be quick.
using AuditCallback = std::function<void(const AuditRecord&)>;

}  // namespace memcg::http
