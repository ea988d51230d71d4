// The actions of memcg::http (actions.hpp): members and what an operator does to them, the
// memory document for an arbiter, the process budget.
#include "actions.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <thread>
#include <vector>

#include "memcg/core/admission/admission.hpp"
#include "memcg/core/admission/budget.hpp"
#include "memcg/core/oom/operator.hpp"
#include "memcg/core/reclaim/reclaim.hpp"
#include "memcg/core/wait/charge_wait.hpp"
#include "json_put.hpp"
#include "server_impl.hpp"
#include "target.hpp"

namespace memcg::http::detail {
namespace {

using namespace json_out;

constexpr std::string_view kMembers = "/v1/members";
constexpr size_t kMaxMembersListed = kMaxMemberInfos;
// How often a request with a deadline looks at its member again.
constexpr auto kPollStep = std::chrono::milliseconds(2);

ActionAnswer error(unsigned status, std::string_view why) {
  ActionAnswer a;
  a.status = status;
  a.body = "{\"error\":";
  put_string(a.body, why);
  a.body += ",\"status\":";
  put_u64(a.body, status);
  a.body += "}\n";
  a.result.assign(why);
  return a;
}

// "123": the number, or false for anything else (empty, a sign, a non-digit, past 2^64 - 1).
bool parse_u64(std::string_view s, uint64_t* out) {
  if (s.empty() || s.size() > 20) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    const uint64_t d = static_cast<uint64_t>(c - '0');
    if (v > (UINT64_MAX - d) / 10) return false;
    v = v * 10 + d;
  }
  *out = v;
  return true;
}

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\n' ||
                        s.front() == '\r'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n' ||
                        s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

// The value of `key` in the query of `raw_target` (not decoded), or "" when absent; `*present`
// tells an empty value from an absent one.
std::string_view query_param(std::string_view raw_target, std::string_view key, bool* present) {
  *present = false;
  const size_t q = raw_target.find('?');
  if (q == std::string_view::npos) return {};
  std::string_view rest = raw_target.substr(q + 1);
  while (!rest.empty()) {
    const size_t amp = std::min(rest.find('&'), rest.size());
    const std::string_view pair = rest.substr(0, amp);
    rest.remove_prefix(std::min(amp + 1, rest.size()));
    const size_t eq = pair.find('=');
    if (pair.substr(0, eq) != key) continue;
    *present = true;
    return eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1);
  }
  return {};
}

void put_bytes_or_null(std::string& out, uint64_t v) {
  if (v == kUnlimited)
    out += "null";
  else
    put_u64(out, v);
}

void put_member(std::string& out, const MemberInfo& m, bool with_key) {
  out += "{\"id\":";
  put_u64(out, m.id);
  out += ",\"state\":";
  put_string(out, member_state_name(m.state));
  if (m.state == MemberState::kGone && m.name.empty()) {  // destroyed: only its id is known
    out += '}';
    return;
  }
  out += ",\"name\":";
  put_string(out, m.name);
  out += ",\"group\":";
  put_string(out, m.group);
  out += ",\"charged_bytes\":";
  put_u64(out, m.charged_bytes);
  out += ",\"admitted_bytes\":";
  put_u64(out, m.admitted_bytes);
  out += ",\"priority\":";
  put_string(out, wait_priority_name(m.priority));
  out += ",\"score_adj\":";
  put_i64(out, m.score_adj);
  if (with_key) {
    const VictimKey& k = m.key;
    out += ",\"victim_rank\":";
    put_u64(out, m.rank);
    out += ",\"victim_key\":{\"order\":";
    put_string(out, oom_order_name(k.order));
    out += ",\"immune\":";
    out += k.immune ? "true" : "false";
    out += ",\"beyond_units\":";
    put_i64(out, k.beyond);
    out += ",\"excess_units\":";
    put_i64(out, k.excess);
    out += ",\"class\":";
    put_i64(out, k.cls);
    out += ",\"badness\":";
    put_i64(out, k.badness);
    // The tuple compared from the left, larger first: what several processes compare.
    out += ",\"tuple\":[";
    if (k.order == OomOrder::kExcess) {
      put_i64(out, k.beyond);
      out += ',';
      put_i64(out, k.excess);
      out += ',';
      put_i64(out, -k.cls);
      out += ',';
    }
    put_i64(out, k.badness);
    out += "]}";
  }
  out += '}';
}

// "/v1/members/<id>[/<verb>]": the id and the verb ("" for none); false when malformed.
bool member_target(std::string_view path, uint64_t* id, std::string_view* verb) {
  std::string_view rest = path.substr(kMembers.size());
  if (rest.empty() || rest.front() != '/') return false;
  rest.remove_prefix(1);
  const size_t slash = rest.find('/');
  const std::string_view digits = rest.substr(0, slash);
  *verb = slash == std::string_view::npos ? std::string_view() : rest.substr(slash + 1);
  return parse_u64(digits, id) && *id != 0;
}

ActionAnswer members_list(Impl& s, std::string_view raw_target) {
  bool present = false;
  const std::string_view raw_group = query_param(raw_target, "group", &present);
  std::string group_path = "/";
  if (present) {
    std::string decoded;
    if (decode_target(raw_group, &decoded) != 0 || decoded.empty())
      return error(400, "invalid group");
    group_path = decoded;
  }
  GroupRef g = s.ctl.lookup(group_path);
  if (!g) return error(404, "no such group");
  std::vector<MemberInfo> members;
  size_t total = 0;
  if (list_members(*g, kMaxMembersListed, &members, &total) != 0)
    return error(500, "cannot list the members");
  ActionAnswer a;
  a.body = "{\"group\":";
  put_string(a.body, g->path());
  a.body += ",\"total\":";
  put_u64(a.body, total);
  a.body += ",\"truncated\":";
  a.body += total > members.size() ? "true" : "false";
  a.body += ",\"members\":[";
  for (size_t i = 0; i < members.size(); ++i) {
    if (i) a.body += ',';
    put_member(a.body, members[i], true);
  }
  a.body += "]}\n";
  return a;
}

ActionAnswer member_get(Impl& s, uint64_t id) {
  MemberInfo info;
  if (member_info(s.ctl, id, &info) != 0) return error(404, "no such member");
  ActionAnswer a;
  put_member(a.body, info, false);
  a.body += '\n';
  return a;
}

// The group's subtree: bytes waiting on its limits and how many charges wait.
void waiting_below(Controller& ctl, Group& g, uint64_t* bytes, uint64_t* waiters) {
  std::vector<GroupRef> groups;
  ctl.walk(g, [&](Group& x) { groups.push_back(GroupRef::try_acquire(&x)); }, false);
  *bytes = *waiters = 0;
  for (const GroupRef& x : groups) {
    if (!x) continue;
    const WaitStats w = wait_stats(*x);
    *bytes += w.queued_bytes;
    *waiters += w.waiters;
  }
}

void put_memory_fields(std::string& out, Controller& ctl, Group& g, int64_t promised_units) {
  const uint64_t unit = ctl.unit_size();
  const int64_t reclaimable = internal::reclaimable_now(g);
  uint64_t waiting = 0, waiters = 0;
  waiting_below(ctl, g, &waiting, &waiters);
  out += "\"capacity_bytes\":";
  put_bytes_or_null(out, g.max());
  out += ",\"used_bytes\":";
  put_u64(out, g.current());
  out += ",\"reclaimable_bytes\":";
  put_u64(out, reclaimable > 0 ? static_cast<uint64_t>(reclaimable) * unit : 0);
  out += ",\"promised_bytes\":";
  put_u64(out, promised_units > 0 ? static_cast<uint64_t>(promised_units) * unit : 0);
  out += ",\"waiting_bytes\":";
  put_u64(out, waiting);
  out += ",\"waiters\":";
  put_u64(out, waiters);
  out += ",\"protected_min_bytes\":";
  put_u64(out, g.min());
  out += ",\"protected_low_bytes\":";
  put_u64(out, g.low());
}

ActionAnswer memory_doc(Impl& s) {
  Controller& ctl = s.ctl;
  Group& root = ctl.root();
  std::vector<GroupRef> tops;
  ctl.walk(root, [&](Group& g) {
    if (g.parent() == &root) tops.push_back(GroupRef::try_acquire(&g));
  }, false);
  std::vector<int64_t> promised(tops.size(), 0);
  int64_t promised_all = 0;
  for (size_t i = 0; i < tops.size(); ++i) {
    if (!tops[i]) continue;
    promised[i] = admit_stats(*tops[i]).promised_units;
    promised_all += std::max<int64_t>(0, promised[i]);
  }
  const BudgetStatus b = s.budget->status();
  ActionAnswer a;
  std::string& out = a.body;
  out = "{";
  put_memory_fields(out, ctl, root, promised_all);
  // Where the capacity comes from: a process budget, the kernel limit (memcg::host) or the
  // root's memory.max as written.
  out += ",\"capacity_from\":";
  put_string(out, b.state != BudgetState::kNone ? (std::string_view(b.limited_by) == "host"
                                                      ? "host"
                                                      : "budget")
                  : b.bound ? "host"
                            : "root");
  out += ",\"budget\":";
  put_string(out, budget_state_name(b.state));
  out += ",\"groups\":[";
  bool first = true;
  for (size_t i = 0; i < tops.size(); ++i) {
    if (!tops[i]) continue;
    if (!first) out += ',';
    first = false;
    out += "{\"group\":";
    put_string(out, tops[i]->path());
    out += ',';
    put_memory_fields(out, ctl, *tops[i], promised[i]);
    out += '}';
  }
  out += "]}\n";
  return a;
}

std::string budget_json(const BudgetStatus& b) {
  std::string out = "{\"state\":";
  put_string(out, budget_state_name(b.state));
  out += ",\"generation\":";
  put_u64(out, b.generation);
  out += ",\"target_bytes\":";
  if (b.state == BudgetState::kNone)
    out += "null";
  else
    put_u64(out, b.target_bytes);
  out += ",\"force\":";
  out += b.force ? "true" : "false";
  out += ",\"bound\":";
  out += b.bound ? "true" : "false";
  out += ",\"limit_bytes\":";
  put_bytes_or_null(out, b.limit_bytes);
  out += ",\"root_max_bytes\":";
  put_bytes_or_null(out, b.root_max_bytes);
  out += ",\"limited_by\":";
  put_string(out, b.limited_by);
  out += ",\"current_bytes\":";
  put_u64(out, b.current_bytes);
  out += ",\"done\":{\"drains\":";
  put_u64(out, b.drains);
  out += ",\"reclaimed_bytes\":";
  put_u64(out, b.reclaimed_bytes);
  out += ",\"preempted\":";
  put_u64(out, b.preempted);
  out += ",\"killed\":";
  put_u64(out, b.killed);
  out += "},\"elapsed_ms\":";
  put_u64(out, b.elapsed_ns / 1'000'000);
  out += ",\"error\":";
  put_string(out, b.error);
  out += "}\n";
  return out;
}

ActionAnswer budget_put(Impl& s, const std::string& body) {
  const std::string_view text = trim(body);
  uint64_t bytes = 0;
  bool force = false;
  if (!text.empty() && text.front() == '{') {
    std::string v, f;
    if (json_field(text, "bytes", &v) != 0 || json_field(text, "force", &f) != 0)
      return error(400, "malformed JSON: {\"bytes\": N, \"force\": false} expected");
    if (v.empty()) return error(400, "no \"bytes\" in the body");
    if (f == "true")
      force = true;
    else if (!f.empty() && f != "false")
      return error(400, "\"force\" must be true or false");
    if (!parse_u64(v, &bytes))
      return error(400, all_digits(v) ? "bytes out of range (above 2^64 - 1)"
                                      : "\"bytes\" must be a whole number of bytes");
  } else if (!parse_u64(text, &bytes)) {
    return error(400, all_digits(text) ? "bytes out of range (above 2^64 - 1)"
                                       : "a number of bytes or {\"bytes\": N} expected");
  }
  std::string why;
  const int err = s.budget->set(bytes, force, &why);
  if (err == EBUSY) return error(409, why);
  if (err == EINVAL || err == ERANGE) return error(400, why);
  if (err != 0) {
    ActionAnswer a = error(503, why);
    a.retry_after = true;
    return a;
  }
  ActionAnswer a;
  a.status = 202;  // being reached on the budget's thread: GET /v1/budget follows it
  a.body = budget_json(s.budget->status());
  a.result = "accepted";
  return a;
}

// Runs `fn` on the server's writer thread (kill callbacks may block), waiting at most
// read_timeout. 0 with its result in `*result`, or the status that answers instead.
template <typename Fn>
unsigned on_writer(Impl& s, Fn fn, int* result) {
  auto job = std::make_shared<WriteJob>();
  job->action = std::move(fn);
  Writer& w = *s.writer;
  std::unique_lock<std::mutex> lock(w.mutex);
  if (w.stopping) return 503;
  if (w.job) return 429;
  w.job = job;
  w.cv.notify_all();
  const auto until = SteadyClock::now() + s.options.read_timeout;
  w.cv.wait_until(lock, until, [&] { return job->done || w.stopping; });
  if (!job->done) {
    if (!job->started) {
      w.job.reset();
      return 503;
    }
    return 202;  // its callback still runs
  }
  *result = job->result;
  return 0;
}

ActionAnswer member_act(Impl& s, uint64_t id, std::string_view verb, std::string_view raw_target,
                        const std::string& body) {
  const bool kill = verb == "kill";
  if (!kill && verb != "preempt") return error(404, "not found");
  // The deadline: ?deadline_ms=N or {"deadline_ms": N}; at most the server's read_timeout.
  bool present = false;
  std::string deadline_text(query_param(raw_target, "deadline_ms", &present));
  if (!present && !trim(body).empty()) {
    if (json_field(trim(body), "deadline_ms", &deadline_text) != 0)
      return error(400, "malformed JSON: {\"deadline_ms\": N} expected");
    present = !deadline_text.empty();
  }
  uint64_t deadline_ms = 0;
  if (present) {
    if (!parse_u64(deadline_text, &deadline_ms))
      return error(400, "deadline_ms must be a whole number of milliseconds");
    if (deadline_ms > static_cast<uint64_t>(s.options.read_timeout.count()))
      return error(400, "deadline_ms above the server's read timeout");
  }
  const auto start = SteadyClock::now();
  MemberInfo info;
  if (member_info(s.ctl, id, &info) != 0) return error(404, "no such member");
  std::string before = std::string("state=") + member_state_name(info.state);
  std::string group = info.group;  // as it was: a member gone after the action names none
  int result = 0;
  Controller& ctl = s.ctl;
  const unsigned busy = on_writer(
      s, [&ctl, id, kill] { return kill ? kill_member(ctl, id) : preempt_member(ctl, id); },
      &result);
  if (busy == 429 || busy == 503) {
    ActionAnswer a = error(503, busy == 429 ? "another write or action is running"
                                            : "the server is stopping");
    a.retry_after = true;
    return a;
  }
  if (busy == 0 && result == EIO) return error(500, "the member's callback threw");
  if (busy == 0 && result == ENOENT) return error(404, "no such member");
  // Released: a killed member holds nothing (gone), a preempted one holds nothing (gone or
  // running with nothing charged).
  auto released = [&](const MemberInfo& m) {
    return m.state == MemberState::kGone ||
           (!kill && m.state == MemberState::kRunning && m.charged_bytes == 0);
  };
  static_cast<void>(member_info(s.ctl, id, &info));
  if (present) {
    const auto until = start + std::chrono::milliseconds(deadline_ms);
    while (!released(info) && SteadyClock::now() < until) {
      std::this_thread::sleep_for(kPollStep);
      static_cast<void>(member_info(s.ctl, id, &info));
    }
  }
  ActionAnswer a;
  a.group = std::move(group);
  const bool done = released(info);
  a.status = done ? 200 : 202;
  a.result = done                  ? "released"
             : present             ? "not released by the deadline"
                                   : member_state_name(info.state);
  a.body = "{\"action\":";
  put_string(a.body, kill ? "kill" : "preempt");
  a.body += ",\"released\":";
  a.body += done ? "true" : "false";
  a.body += ",\"deadline_passed\":";
  a.body += present && !done ? "true" : "false";
  a.body += ",\"callback_running\":";
  a.body += busy == 202 ? "true" : "false";
  a.body += ",\"member\":";
  put_member(a.body, info, false);
  a.body += "}\n";
  a.old_value = std::move(before);
  return a;
}

}  // namespace

bool is_action_path(std::string_view path) {
  return path == kMembers || path.rfind("/v1/members/", 0) == 0 || path == "/v1/memory" ||
         path == "/v1/budget";
}

bool is_acting(std::string_view method, std::string_view path) {
  if (method == "GET" || method == "HEAD") return false;
  return is_action_path(path);
}

ActionAnswer serve_action_read(Impl& s, std::string_view path, std::string_view raw_target) {
  if (path == kMembers) return members_list(s, raw_target);
  if (path == "/v1/memory") return memory_doc(s);
  if (path == "/v1/budget") {
    ActionAnswer a;
    a.body = budget_json(s.budget->status());
    return a;
  }
  uint64_t id = 0;
  std::string_view verb;
  if (!member_target(path, &id, &verb)) return error(404, "no such member");
  if (!verb.empty()) {
    ActionAnswer a = error(405, "POST to act on a member");
    a.allow = "POST";
    return a;
  }
  return member_get(s, id);
}

ActionAnswer serve_action_write(Impl& s, std::string_view method, std::string_view path,
                                std::string_view raw_target, const std::string& body) {
  if (path == "/v1/budget") {
    const BudgetStatus before = s.budget->status();
    std::string old = std::string("state=") + budget_state_name(before.state);
    if (before.state != BudgetState::kNone) old += " target=" + std::to_string(before.target_bytes);
    if (method == "PUT") {
      ActionAnswer a = budget_put(s, body);
      a.old_value = std::move(old);
      return a;
    }
    if (method == "DELETE") {
      if (s.budget->clear() == ENOENT) return error(404, "no budget is set");
      ActionAnswer a;
      a.body = budget_json(s.budget->status());
      a.result = "ok";
      a.old_value = std::move(old);
      return a;
    }
    ActionAnswer a = error(405, "PUT, DELETE or GET");
    a.allow = "GET, HEAD, PUT, DELETE";
    return a;
  }
  if (path == kMembers || path == "/v1/memory") {
    ActionAnswer a = error(405, "read-only");
    a.allow = "GET, HEAD";
    return a;
  }
  uint64_t id = 0;
  std::string_view verb;
  if (!member_target(path, &id, &verb)) return error(404, "no such member");
  if (method != "POST") {
    ActionAnswer a = error(405, "POST to act on a member");
    a.allow = "POST";
    return a;
  }
  if (verb.empty()) {
    ActionAnswer a = error(405, "GET a member; POST to .../kill or .../preempt");
    a.allow = "GET, HEAD";
    return a;
  }
  return member_act(s, id, verb, raw_target, body);
}

int json_field(std::string_view body, std::string_view key, std::string* value) {
  value->clear();
  size_t i = 0;
  auto ws = [&] {
    while (i < body.size() && (body[i] == ' ' || body[i] == '\t' || body[i] == '\n' ||
                               body[i] == '\r'))
      ++i;
  };
  // A string without escapes beyond \" and \\ (keys and values here are plain).
  auto str = [&](std::string* out) {
    if (i >= body.size() || body[i] != '"') return false;
    ++i;
    out->clear();
    while (i < body.size() && body[i] != '"') {
      if (static_cast<unsigned char>(body[i]) < 0x20) return false;
      if (body[i] == '\\') {
        if (++i >= body.size() || (body[i] != '"' && body[i] != '\\')) return false;
      }
      out->push_back(body[i++]);
    }
    if (i >= body.size()) return false;
    ++i;
    return true;
  };
  ws();
  if (i >= body.size() || body[i] != '{') return 400;
  ++i;
  ws();
  if (i < body.size() && body[i] == '}') {
    ++i;
    ws();
    return i == body.size() ? 0 : 400;
  }
  for (;;) {
    std::string k, v;
    ws();
    if (!str(&k)) return 400;
    ws();
    if (i >= body.size() || body[i] != ':') return 400;
    ++i;
    ws();
    if (i < body.size() && body[i] == '"') {
      if (!str(&v)) return 400;
    } else {
      const size_t start = i;
      while (i < body.size() && ((body[i] >= '0' && body[i] <= '9') || body[i] == '-' ||
                                 (body[i] >= 'a' && body[i] <= 'z')))
        ++i;
      v.assign(body.substr(start, i - start));
      if (v.empty()) return 400;  // an object, an array, or nothing
      if (!all_digits(v) && v != "true" && v != "false" && v != "null" &&
          !(v[0] == '-' && all_digits(std::string_view(v).substr(1))))
        return 400;
    }
    if (k == key) *value = std::move(v);
    ws();
    if (i < body.size() && body[i] == ',') {
      ++i;
      continue;
    }
    if (i < body.size() && body[i] == '}') {
      ++i;
      ws();
      return i == body.size() ? 0 : 400;
    }
    return 400;
  }
}

}  // namespace memcg::http::detail
