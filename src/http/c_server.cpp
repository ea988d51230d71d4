// The HTTP endpoint from C (include/memcg/c/http.h): options set by name as text, the C++
// Server made at start from them (its constructor checks the ranges), so that a program in
// another language needs no struct layout of ours.
// The C API's handles first: they declare the header's experimental part too.
#include "c/handles.hpp"
#include "memcg/c/http.h"

#include <cerrno>
#include <charconv>
#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>

#include "memcg/http/server.hpp"

struct memcg_server {
  explicit memcg_server(memcg_controller* owner) noexcept : count(owner) {}
  memcg::capi::HandleCount count;
  // Start, stop, set and destroy of one server may come from several threads of the program:
  // `life` orders them, and is held through a stop's join of the server's threads.
  std::mutex life;
  memcg::http::ServerOptions options;  // GUARDED_BY(life)
  bool changed = true;                 // options set since `cpp` was made; GUARDED_BY(life)
  // Guards only the pointer, never held across a stop: port and running read through it (the
  // Server's own figures are atomics), so a callback the server runs may ask them while
  // another thread stops it.
  mutable std::mutex mu;
  std::unique_ptr<memcg::http::Server> cpp;  // made by the first start after a change
};

namespace {

using memcg::capi::guarded;

template <class T>
bool parse_number(std::string_view text, T* out) {
  if (text.empty()) return false;
  T v{};
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size()) return false;
  *out = v;
  return true;
}

bool parse_bool(std::string_view text, bool* out) {
  if (text == "1" || text == "true") return *out = true, true;
  if (text == "0" || text == "false") return *out = false, true;
  return false;
}

// "1000,1001" (or "" for none) into `out`.
bool parse_uids(std::string_view text, std::vector<uint32_t>* out) {
  std::vector<uint32_t> uids;
  while (!text.empty()) {
    const size_t comma = text.find(',');
    uint32_t uid;
    if (!parse_number(text.substr(0, comma), &uid)) return false;
    uids.push_back(uid);
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
    if (text.empty()) return false;  // a trailing comma
  }
  *out = std::move(uids);
  return true;
}

// The entry of `table` (options of one kind: a name and the field) named `name`, or null.
template <class Entry, size_t N>
const Entry* find(const Entry (&table)[N], std::string_view name) {
  for (const Entry& e : table)
    if (name == e.name) return &e;
  return nullptr;
}

// Puts `next` in place of the handle's server under `mu` and returns the one it held, to be
// freed by the caller after `mu` is let go. REQUIRES: `life` held (the only writer).
std::unique_ptr<memcg::http::Server> replace(memcg_server& s,
                                             std::unique_ptr<memcg::http::Server> next) {
  std::lock_guard<std::mutex> ptr(s.mu);
  s.cpp.swap(next);
  return next;
}

// Sets `name` of `o`; false for an unknown name or a value not of the option's form.
bool set_option(memcg::http::ServerOptions& o, std::string_view name, std::string_view value) {
  using std::chrono::milliseconds;
  using std::chrono::seconds;
  struct SizeOption {
    const char* name;
    size_t memcg::http::ServerOptions::*field;
  };
  static constexpr SizeOption kSizes[] = {
      {"threads", &memcg::http::ServerOptions::threads},
      {"max_queued", &memcg::http::ServerOptions::max_queued},
      {"max_connections_per_peer", &memcg::http::ServerOptions::max_connections_per_peer},
      {"max_header_bytes", &memcg::http::ServerOptions::max_header_bytes},
      {"max_headers", &memcg::http::ServerOptions::max_headers},
      {"max_body_bytes", &memcg::http::ServerOptions::max_body_bytes},
      {"max_answers_in_flight", &memcg::http::ServerOptions::max_answers_in_flight},
      {"history_groups", &memcg::http::ServerOptions::history_groups},
      {"history_samples", &memcg::http::ServerOptions::history_samples},
      {"max_event_streams", &memcg::http::ServerOptions::max_event_streams},
      {"event_stream_lag", &memcg::http::ServerOptions::event_stream_lag},
      {"audit_records", &memcg::http::ServerOptions::audit_records},
  };
  if (const SizeOption* s = find(kSizes, name)) return parse_number(value, &(o.*s->field));
  struct TextOption {
    const char* name;
    std::string memcg::http::ServerOptions::*field;
  };
  static constexpr TextOption kTexts[] = {
      {"address", &memcg::http::ServerOptions::address},
      {"token", &memcg::http::ServerOptions::token},
      {"token_name", &memcg::http::ServerOptions::token_name},
      {"runbook_base", &memcg::http::ServerOptions::runbook_base},
      {"unix_socket", &memcg::http::ServerOptions::unix_socket},
  };
  if (const TextOption* t = find(kTexts, name)) {
    o.*t->field = std::string(value);
    return true;
  }
  struct MsOption {
    const char* name;
    milliseconds memcg::http::ServerOptions::*field;
  };
  static constexpr MsOption kDurations[] = {
      {"read_timeout_ms", &memcg::http::ServerOptions::read_timeout},
      {"write_timeout_ms", &memcg::http::ServerOptions::write_timeout},
      {"history_interval_ms", &memcg::http::ServerOptions::history_interval},
      {"event_heartbeat_ms", &memcg::http::ServerOptions::event_heartbeat},
  };
  if (const MsOption* d = find(kDurations, name)) {
    int64_t ms;
    if (!parse_number(value, &ms)) return false;
    o.*d->field = milliseconds(ms);
    return true;
  }
  if (name == "port") return parse_number(value, &o.port);
  if (name == "keep_alive_timeout_s") {
    int64_t s;
    if (!parse_number(value, &s)) return false;
    o.keep_alive_timeout = seconds(s);
    return true;
  }
  if (name == "allow_writes") return parse_bool(value, &o.allow_writes);
  if (name == "unix_allowed_uids") return parse_uids(value, &o.unix_allowed_uids);
  return false;
}

void write_error(std::string_view message, char* error, size_t size) {
  if (error == nullptr || size == 0) return;
  const size_t n = std::min(message.size(), size - 1);
  std::memcpy(error, message.data(), n);
  error[n] = '\0';
}

}  // namespace

extern "C" {

int memcg_server_create(memcg_controller* controller, memcg_server** out) {
  if (controller == nullptr || out == nullptr) return EINVAL;
  return guarded([&] {
    *out = new memcg_server(controller);
    return 0;
  });
}

int memcg_server_set(memcg_server* server, const char* name, const char* value) {
  if (server == nullptr || name == nullptr || value == nullptr) return EINVAL;
  return guarded([&] {
    std::lock_guard<std::mutex> lock(server->life);
    if (server->cpp != nullptr && server->cpp->running()) return EBUSY;
    memcg::http::ServerOptions next = server->options;  // unchanged when the value is refused
    if (!set_option(next, name, value)) return EINVAL;
    server->options = std::move(next);
    server->changed = true;
    return 0;
  });
}

int memcg_server_start(memcg_server* server, char* error, size_t error_size) {
  if (server == nullptr) return EINVAL;
  std::string message;
  const int err = guarded([&] {
    std::lock_guard<std::mutex> lock(server->life);
    // `cpp` changes only here, under `life` (replace()): it may be read without `mu` below.
    if (server->cpp != nullptr && server->changed) {
      server->cpp->stop();  // threads may still run: a server whose listener was lost
      replace(*server, nullptr);
    }
    if (server->cpp == nullptr) {
      std::unique_ptr<memcg::http::Server> made;
      try {
        made = std::make_unique<memcg::http::Server>(server->count.owner()->cpp, server->options);
      } catch (const std::invalid_argument& e) {
        message = e.what();
        return EINVAL;
      }
      replace(*server, std::move(made));
      server->changed = false;
    }
    return server->cpp->start(&message);
  });
  if (err != 0) {
    if (message.empty()) message = memcg_errno_name(err);
    write_error(message, error, error_size);
  }
  return err;
}

int memcg_server_port(const memcg_server* server) {
  if (server == nullptr) return 0;
  const memcg_server& s = *server;
  std::lock_guard<std::mutex> lock(s.mu);
  return s.cpp != nullptr ? s.cpp->port() : 0;
}

int memcg_server_running(const memcg_server* server) {
  if (server == nullptr) return 0;
  const memcg_server& s = *server;
  std::lock_guard<std::mutex> lock(s.mu);
  return s.cpp != nullptr && s.cpp->running() ? 1 : 0;
}

void memcg_server_stop(memcg_server* server) {
  if (server == nullptr) return;
  // `life` only: port and running (under `mu`) do not wait for the join.
  std::lock_guard<std::mutex> lock(server->life);
  if (server->cpp != nullptr) server->cpp->stop();
}

void memcg_server_destroy(memcg_server* server) {
  if (server == nullptr) return;
  memcg_server_stop(server);
  delete server;
}

}  // extern "C"
