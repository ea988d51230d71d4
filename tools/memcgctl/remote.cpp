// `memcgctl remote` (remote.hpp): a small HTTP/1.1 client of its own, so that TCP and Unix
// sockets are one code path and the event stream is read as it comes.
#include "remote.hpp"

#include <CLI/CLI.hpp>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>

#include "memcg/files/parse.hpp"
#include "top_view.hpp"

namespace memcgctl {
namespace {

using nlohmann::json;

constexpr int kExitRefused = 1;
constexpr int kExitUsage = 2;
// Past this a header block is not an HTTP answer worth reading.
constexpr size_t kMaxHeaderBytes = 64 * 1024;
// A document larger than this is cut (the server's own answers are far smaller).
constexpr size_t kMaxBodyBytes = 256u << 20;

struct Endpoint {
  bool unix_socket = false;
  std::string host, port, path;  // path: the socket's, for unix:PATH
  std::string display;
};

bool parse_target(std::string t, Endpoint* e, std::string* error) {
  e->display = t;
  if (t.rfind("unix:", 0) == 0) {
    e->unix_socket = true;
    e->path = t.substr(5);
    if (e->path.empty() || e->path.size() >= sizeof(sockaddr_un{}.sun_path)) {
      *error = "unix:PATH needs a socket path shorter than 108 bytes";
      return false;
    }
    return true;
  }
  if (!t.empty() && t.back() == '/') t.pop_back();
  if (t.rfind("http://", 0) != 0) {
    *error = "'" + t + "' is neither http://HOST:PORT nor unix:PATH";
    return false;
  }
  std::string rest = t.substr(7);
  if (rest.empty() || rest.find('/') != std::string::npos) {
    *error = "'" + t + "' is not of the form http://HOST:PORT";
    return false;
  }
  std::string host = rest, port = "80";
  if (rest.front() == '[') {  // [::1]:9180
    const size_t close = rest.find(']');
    if (close == std::string::npos) {
      *error = "unterminated IPv6 address in '" + t + "'";
      return false;
    }
    host = rest.substr(1, close - 1);
    if (close + 1 < rest.size() && rest[close + 1] == ':') port = rest.substr(close + 2);
  } else if (const size_t colon = rest.rfind(':'); colon != std::string::npos) {
    host = rest.substr(0, colon);
    port = rest.substr(colon + 1);
  }
  if (host.empty() || port.empty()) {
    *error = "'" + t + "' has no host or port";
    return false;
  }
  e->host = host;
  e->port = port;
  return true;
}

int connect_to(const Endpoint& e, int timeout_s, std::string* error) {
  int fd = -1;
  if (e.unix_socket) {
    fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::memcpy(a.sun_path, e.path.data(), e.path.size());
    if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      *error = "cannot connect to " + e.path + ": " + std::strerror(errno);
      ::close(fd);
      return -1;
    }
  } else {
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    if (int rc = ::getaddrinfo(e.host.c_str(), e.port.c_str(), &hints, &res); rc != 0) {
      *error = "cannot resolve " + e.host + ": " + ::gai_strerror(rc);
      return -1;
    }
    for (addrinfo* p = res; p; p = p->ai_next) {
      fd = ::socket(p->ai_family, p->ai_socktype | SOCK_CLOEXEC, p->ai_protocol);
      if (fd < 0) continue;
      if (::connect(fd, p->ai_addr, p->ai_addrlen) == 0) break;
      *error = "cannot connect to " + e.display + ": " + std::strerror(errno);
      ::close(fd);
      fd = -1;
    }
    ::freeaddrinfo(res);
  }
  if (fd < 0) {
    if (error->empty()) *error = "cannot open a socket: " + std::string(std::strerror(errno));
    return -1;
  }
  if (timeout_s > 0) {
    timeval tv{timeout_s, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  }
  return fd;
}

struct Response {
  int status = 0;
  std::map<std::string, std::string> headers;  // names in lower case
  std::string body;
};

// One request on its own connection. With `on_data`, the body is handed over as it arrives (an
// event stream) until it ends or on_data returns false; otherwise it is kept in `r->body`.
bool request(const Endpoint& e, const std::string& method, const std::string& target,
             const std::map<std::string, std::string>& headers, const std::string& body,
             Response* r, std::string* error,
             const std::function<bool(std::string_view)>& on_data = {}) {
  const int fd = connect_to(e, on_data ? 0 : 30, error);
  if (fd < 0) return false;
  std::string req = method + " " + target + " HTTP/1.1\r\nHost: " +
                    (e.unix_socket ? std::string("localhost") : e.host) +
                    "\r\nConnection: close\r\nUser-Agent: memcgctl\r\n";
  for (const auto& [k, v] : headers) req += k + ": " + v + "\r\n";
  if (!body.empty() || method == "POST" || method == "PUT")
    req += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  req += "\r\n" + body;
  for (size_t sent = 0; sent < req.size();) {
    const ssize_t n = ::send(fd, req.data() + sent, req.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) {
      *error = "cannot send the request: " + std::string(std::strerror(errno));
      ::close(fd);
      return false;
    }
    sent += static_cast<size_t>(n);
  }
  std::string buf;
  char chunk[16384];
  auto fill = [&]() -> bool {
    const ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
    if (n <= 0) return false;
    buf.append(chunk, static_cast<size_t>(n));
    return true;
  };
  size_t end;
  while ((end = buf.find("\r\n\r\n")) == std::string::npos) {
    if (buf.size() > kMaxHeaderBytes || !fill()) {
      *error = buf.empty() ? "the server closed the connection without an answer"
                           : "a malformed answer";
      ::close(fd);
      return false;
    }
  }
  std::istringstream head(buf.substr(0, end));
  std::string line;
  std::getline(head, line);
  if (line.rfind("HTTP/1.", 0) != 0 || line.size() < 12) {
    *error = "not an HTTP answer";
    ::close(fd);
    return false;
  }
  r->status = std::atoi(line.c_str() + 9);
  while (std::getline(head, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string k = line.substr(0, colon), v = line.substr(colon + 1);
    for (char& c : k) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    while (!v.empty() && v.front() == ' ') v.erase(0, 1);
    r->headers[k] = v;
  }
  buf.erase(0, end + 4);
  const bool chunked = r->headers.count("transfer-encoding") &&
                       r->headers["transfer-encoding"].find("chunked") != std::string::npos;
  long long length = -1;
  if (!chunked && r->headers.count("content-length"))
    length = std::atoll(r->headers["content-length"].c_str());
  auto deliver = [&](std::string_view data) {
    if (on_data && r->status == 200) return on_data(data);
    if (r->body.size() + data.size() > kMaxBodyBytes) return false;
    r->body.append(data);
    return true;
  };
  bool ok = true;
  if (chunked) {
    for (;;) {
      size_t eol;
      while ((eol = buf.find("\r\n")) == std::string::npos)
        if (!fill()) goto done;
      const unsigned long size = std::strtoul(buf.c_str(), nullptr, 16);
      buf.erase(0, eol + 2);
      if (size == 0) break;
      while (buf.size() < size + 2)
        if (!fill()) goto done;
      if (!deliver(std::string_view(buf).substr(0, size))) {
        ok = true;
        goto done;
      }
      buf.erase(0, size + 2);
    }
  } else {
    for (;;) {
      if (!buf.empty()) {
        std::string_view data(buf);
        if (length >= 0 && data.size() > static_cast<size_t>(length)) data = data.substr(0, length);
        if (!deliver(data)) break;
        if (length >= 0) length -= static_cast<long long>(data.size());
        buf.clear();
      }
      if (length == 0 || !fill()) break;
    }
    if (length > 0 && !on_data) {
      *error = "the answer was cut short";
      ok = false;
    }
  }
done:
  ::close(fd);
  return ok;
}

std::string read_token(const RemoteOptions& o, std::string* error) {
  std::string file = o.token_file;
  if (file.empty())
    if (const char* env = std::getenv("MEMCG_TOKEN_FILE")) file = env;
  if (file.empty()) return {};
  std::ifstream in(file);
  if (!in) {
    *error = "cannot read the token file " + file;
    return {};
  }
  std::string token;
  std::getline(in, token);
  while (!token.empty() && (token.back() == '\r' || token.back() == ' ')) token.pop_back();
  return token;
}

std::string bytes_text(const json& v) {
  if (v.is_null()) return "max";
  if (!v.is_number()) return "-";
  return human_bytes(v.get<uint64_t>());
}

// "/a/b" → "a/b" for the URL; the root is "/".
std::string group_url(std::string g) {
  while (!g.empty() && g.front() == '/') g.erase(0, 1);
  return g.empty() ? std::string("/v1/groups/") : "/v1/groups/" + g + "/";
}

// Percent-encodes a query value.
std::string encode(const std::string& s) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '/' || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

void print_members(const json& j, std::ostream& out) {
  char line[512];
  std::snprintf(line, sizeof line, "%-6s %-20s %-24s %9s %9s %-7s %-10s %5s  %s\n", "ID", "NAME",
                "GROUP", "CHARGED", "ADMITTED", "PRIO", "STATE", "RANK", "VICTIM KEY");
  out << line;
  for (const json& m : j.value("members", json::array())) {
    std::string key;
    for (const json& k : m["victim_key"].value("tuple", json::array()))
      key += (key.empty() ? "" : ",") + std::to_string(k.get<int64_t>());
    key = m["victim_key"].value("order", "") + "(" + key + ")";
    if (m["victim_key"].value("immune", false)) key = "immune";
    const uint64_t rank = m.value("victim_rank", uint64_t{0});
    std::snprintf(line, sizeof line, "%-6llu %-20s %-24s %9s %9s %-7s %-10s %5s  %s\n",
                  static_cast<unsigned long long>(m.value("id", uint64_t{0})),
                  m.value("name", "").c_str(), m.value("group", "").c_str(),
                  human_bytes(m.value("charged_bytes", uint64_t{0})).c_str(),
                  human_bytes(m.value("admitted_bytes", uint64_t{0})).c_str(),
                  m.value("priority", "").c_str(), m.value("state", "").c_str(),
                  rank ? std::to_string(rank).c_str() : "-", key.c_str());
    out << line;
  }
  out << j.value("total", 0) << " members" << (j.value("truncated", false) ? " (list cut)" : "")
      << "\n";
}

void print_budget(const json& j, std::ostream& out) {
  out << "state       " << j.value("state", "?") << "\n";
  if (j.value("state", "none") == "none") return;
  out << "target      " << bytes_text(j["target_bytes"]) << (j.value("force", false) ? " (force)" : "")
      << "\n";
  out << "current     " << bytes_text(j["current_bytes"]) << "\n";
  out << "root limit  " << bytes_text(j["root_max_bytes"]) << " (held by " << j.value("limited_by", "?")
      << (j.value("bound", false) ? ", bound to the kernel cgroup" : "") << ")\n";
  const json d = j.value("done", json::object());
  out << "done        drains " << d.value("drains", 0) << ", reclaimed "
      << human_bytes(d.value("reclaimed_bytes", uint64_t{0})) << ", preempted "
      << d.value("preempted", 0) << ", killed " << d.value("killed", 0) << "\n";
  out << "elapsed     " << j.value("elapsed_ms", 0) << " ms\n";
  if (!j.value("error", "").empty()) out << "error       " << j.value("error", "") << "\n";
}

void print_memory(const json& j, std::ostream& out) {
  char line[512];
  auto row = [&](const std::string& name, const json& g) {
    std::snprintf(line, sizeof line, "%-24s %9s %9s %11s %9s %9s\n", name.c_str(),
                  bytes_text(g["capacity_bytes"]).c_str(), bytes_text(g["used_bytes"]).c_str(),
                  bytes_text(g["reclaimable_bytes"]).c_str(), bytes_text(g["promised_bytes"]).c_str(),
                  bytes_text(g["waiting_bytes"]).c_str());
    out << line;
  };
  std::snprintf(line, sizeof line, "%-24s %9s %9s %11s %9s %9s\n", "GROUP", "CAPACITY", "USED",
                "RECLAIMABLE", "PROMISED", "WAITING");
  out << line;
  row("/ (" + j.value("capacity_from", std::string("?")) + ")", j);
  for (const json& g : j.value("groups", json::array())) row(g.value("group", ""), g);
}

void print_groups(const json& j, std::ostream& out) {
  char line[512];
  std::snprintf(line, sizeof line, "%-32s %9s %9s %9s %9s %9s %8s %8s\n", "GROUP", "CURRENT",
                "PEAK", "MAX", "HIGH", "LOW", "E.OOM", "E.KILL");
  out << line;
  auto opt = [](const json& g, const char* outer, const char* key) -> std::string {
    if (!g.contains(outer)) return "-";
    return bytes_text(g[outer].value(key, json()));
  };
  for (const json& g : j.value("groups", json::array())) {
    const json ev = g.value("events", json::object());
    std::snprintf(line, sizeof line, "%-32s %9s %9s %9s %9s %9s %8s %8s\n",
                  g.value("path", "").c_str(), bytes_text(g.value("current", json())).c_str(),
                  bytes_text(g.value("peak", json())).c_str(), opt(g, "limits", "max").c_str(),
                  opt(g, "limits", "high").c_str(), opt(g, "protection", "low").c_str(),
                  ev.contains("oom") ? std::to_string(ev["oom"].get<uint64_t>()).c_str() : "-",
                  ev.contains("oom_kill") ? std::to_string(ev["oom_kill"].get<uint64_t>()).c_str()
                                          : "-");
    out << line;
  }
}

// A refusal: the JSON error's text, or the body.
int refused(const Response& r, const std::string& what, std::ostream& err) {
  const json j = json::parse(r.body, nullptr, false);
  std::string why = !j.is_discarded() && j.is_object() && j.contains("error")
                        ? j["error"].get<std::string>()
                        : r.body;
  while (!why.empty() && why.back() == '\n') why.pop_back();
  err << "memcgctl remote: " << what << ": " << r.status << " " << why << "\n";
  if (r.status == 404 && (what.find("/v1/events") != std::string::npos ||
                          what.find("/v1/audit") != std::string::npos))
    err << "memcgctl remote: this server does not serve it (an older memcg::http)\n";
  return kExitRefused;
}

// The event stream: each event printed as it comes; after a disconnect, resumed with
// Last-Event-ID from the last id seen (1 s later).
int follow_events(const Endpoint& e, const std::map<std::string, std::string>& base,
                  const RemoteOptions& o, std::ostream& out, std::ostream& err) {
  std::string target = "/v1/events";
  std::string q;
  if (!o.event_type.empty()) q += "type=" + encode(o.event_type);
  if (!o.group.empty()) q += std::string(q.empty() ? "" : "&") + "group=" + encode(o.group);
  if (!q.empty()) target += "?" + q;
  std::string last_id;
  int64_t seen = 0;
  for (int attempt = 0;; ++attempt) {
    std::map<std::string, std::string> h = base;
    h["Accept"] = "text/event-stream";
    if (!last_id.empty()) h["Last-Event-ID"] = last_id;
    std::string pending, id, type, data;
    Response r;
    std::string error;
    const bool ok = request(e, "GET", target, h, "", &r, &error, [&](std::string_view chunk) {
      pending.append(chunk);
      size_t nl;
      while ((nl = pending.find('\n')) != std::string::npos) {
        std::string line = pending.substr(0, nl);
        pending.erase(0, nl + 1);
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.empty()) {  // the end of one event
          if (!data.empty() || !type.empty()) {
            if (!id.empty()) last_id = id;
            if (o.json) {
              out << data << "\n";
            } else {
              // id, time, type, group, then what the event says.
              const json ev = json::parse(data, nullptr, false);
              std::string when = "-", group = "-", what = data;
              if (!ev.is_discarded() && ev.is_object()) {
                if (ev.contains("time_ns") && ev["time_ns"].is_number()) {
                  const std::time_t t =
                      static_cast<std::time_t>(ev["time_ns"].get<uint64_t>() / 1'000'000'000);
                  char buf[16];
                  std::strftime(buf, sizeof buf, "%H:%M:%S", std::localtime(&t));
                  when = buf;
                }
                group = ev.value("group", std::string("-"));
                if (group.empty()) group = "/";
                if (ev.contains("data")) what = ev["data"].dump();
              }
              out << (id.empty() ? "-" : id) << "  " << when << "  "
                  << (type.empty() ? "message" : type) << "  " << group << "  " << what << "\n";
            }
            out.flush();
            ++seen;
            if (o.max_events >= 0 && seen >= o.max_events) return false;
          }
          id.clear();
          type.clear();
          data.clear();
          continue;
        }
        if (line[0] == ':') continue;  // a comment (keep-alive)
        const size_t colon = line.find(':');
        const std::string field = line.substr(0, colon);
        std::string value = colon == std::string::npos ? "" : line.substr(colon + 1);
        if (!value.empty() && value[0] == ' ') value.erase(0, 1);
        if (field == "id") id = value;
        else if (field == "event") type = value;
        else if (field == "data") data += (data.empty() ? "" : "\n") + value;
      }
      return true;
    });
    if (o.max_events >= 0 && seen >= o.max_events) return 0;
    if (ok && r.status != 0 && r.status != 200) return refused(r, "GET " + target, err);
    if (!ok && attempt == 0 && r.status == 0) {
      err << "memcgctl remote: " << e.display << ": " << error << "\n";
      return kExitRefused;
    }
    err << "memcgctl remote: the stream ended; resuming"
        << (last_id.empty() ? "" : " after event " + last_id) << "\n";
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
}

}  // namespace

CLI::App* add_remote_command(CLI::App& app, RemoteOptions* o) {
  CLI::App* remote = app.add_subcommand(
      "remote", "read and act on a process serving memcg::http (docs/http.md)");
  remote->add_option("TARGET", o->target, "http://HOST:PORT or unix:PATH")->required();
  remote->add_option("--token-file", o->token_file,
                     "a file holding the bearer token (default: $MEMCG_TOKEN_FILE)");
  remote->add_flag("--json", o->json, "print the server's JSON instead of a table");
  remote->require_subcommand(1);
  remote->fallthrough();
  auto sub = [&](const char* name, const char* help) {
    CLI::App* s = remote->add_subcommand(name, help);
    s->final_callback([o, name] { o->command = name; });
    return s;
  };
  sub("groups", "every group with its usage and limits");
  CLI::App* get = sub("get", "print one group file");
  get->add_option("GROUP", o->group, "group path (/ for the root)")->required();
  get->add_option("FILE", o->file, "file name, e.g. memory.max")->required();
  CLI::App* set = sub("set", "write one group file (needs the token)");
  set->add_option("GROUP", o->group, "group path")->required();
  set->add_option("FILE", o->file, "file name")->required();
  set->add_option("VALUE", o->value, "what to write")->required();
  CLI::App* members = sub("members", "the members, in the OOM killer's order");
  members->add_option("--group", o->group, "only this group's subtree");
  for (const char* verb : {"kill", "preempt"}) {
    CLI::App* s = sub(verb, verb[0] == 'k' ? "kill a member (its callback, reason operator)"
                                           : "ask a member to give memory back");
    s->add_option("ID", o->id, "the member's id (memcgctl remote ... members)")->required();
    s->add_option("--deadline-ms", o->deadline_ms, "wait this long for its memory");
  }
  sub("memory", "capacity, used, reclaimable, promised and waiting memory");
  CLI::App* budget = sub("budget", "show, set (BYTES, e.g. 512M) or clear the process budget");
  budget->add_option("BYTES", o->budget, "the target, or 'clear'");
  budget->add_flag("--force", o->force, "let the OOM killer reach it by policy");
  CLI::App* events = sub("events", "follow the event stream (resumes after a disconnect)");
  events->add_option("--type", o->event_type, "only events of this type");
  events->add_option("--group", o->group, "only events of this subtree");
  events->add_option("--max", o->max_events, "stop after this many events");
  sub("audit", "the recent writes and actions");
  return remote;
}

int run_remote(RemoteOptions o, std::ostream& out, std::ostream& err) {
  Endpoint e;
  std::string error;
  if (!parse_target(o.target, &e, &error)) {
    err << "memcgctl remote: " << error << "\n";
    return kExitUsage;
  }
  const std::string token = read_token(o, &error);
  if (!error.empty()) {
    err << "memcgctl remote: " << error << "\n";
    return kExitUsage;
  }
  std::map<std::string, std::string> h;
  if (!token.empty()) h["Authorization"] = "Bearer " + token;
  if (o.command == "events") return follow_events(e, h, o, out, err);

  std::string method = "GET", target, body;
  if (o.command == "groups") {
    target = "/v1/groups";
  } else if (o.command == "get" || o.command == "set") {
    target = group_url(o.group) + o.file;
    if (o.command == "set") {
      method = "POST";
      body = o.value;
    }
  } else if (o.command == "members") {
    target = "/v1/members";
    if (!o.group.empty()) target += "?group=" + encode(o.group);
  } else if (o.command == "kill" || o.command == "preempt") {
    method = "POST";
    target = "/v1/members/" + encode(o.id) + "/" + o.command;
    if (o.deadline_ms >= 0) target += "?deadline_ms=" + std::to_string(o.deadline_ms);
  } else if (o.command == "memory") {
    target = "/v1/memory";
  } else if (o.command == "budget") {
    target = "/v1/budget";
    if (o.budget == "clear") {
      method = "DELETE";
    } else if (!o.budget.empty()) {
      uint64_t bytes = 0;
      if (memcg::parse_bytes(o.budget, &bytes) != 0 || bytes == UINT64_MAX) {
        err << "memcgctl remote: budget '" << o.budget << "' is not a size (512M, 1G, bytes)\n";
        return kExitUsage;
      }
      method = "PUT";
      body = "{\"bytes\":" + std::to_string(bytes) + ",\"force\":" + (o.force ? "true" : "false") +
             "}";
    }
  } else if (o.command == "audit") {
    target = "/v1/audit";
  } else {
    err << "memcgctl remote: no command\n";
    return kExitUsage;
  }
  Response r;
  if (!request(e, method, target, h, body, &r, &error)) {
    err << "memcgctl remote: " << e.display << ": " << error << "\n";
    return kExitRefused;
  }
  if (r.status < 200 || r.status >= 300) return refused(r, method + " " + target, err);
  if (o.json || o.command == "get" || o.command == "audit") {
    out << r.body;
    if (!r.body.empty() && r.body.back() != '\n') out << "\n";
    return 0;
  }
  if (o.command == "set") {
    out << "ok\n";
    return 0;
  }
  const json j = json::parse(r.body, nullptr, false);
  if (j.is_discarded()) {
    out << r.body;
    return 0;
  }
  if (o.command == "groups") print_groups(j, out);
  else if (o.command == "members") print_members(j, out);
  else if (o.command == "memory") print_memory(j, out);
  else if (o.command == "budget") print_budget(j, out);
  else {  // kill, preempt
    const json m = j.value("member", json::object());
    out << "member " << m.value("id", uint64_t{0}) << " (" << m.value("name", "?") << "): "
        << m.value("state", "?");
    if (j.value("released", false))
      out << ", memory given back\n";
    else if (j.value("deadline_passed", false))
      out << ", memory NOT given back within the deadline\n";
    else
      out << ", memory on its way back\n";
  }
  return 0;
}

}  // namespace memcgctl
