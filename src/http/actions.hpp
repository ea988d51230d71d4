// The actions of memcg::http (docs/http.md, "Actions"): GET /v1/members[/<id>], POST
// /v1/members/<id>/kill and /preempt, GET /v1/memory, GET/PUT/DELETE /v1/budget. The answers are
// built here without libmicrohttpd, so that handlers.cpp only routes and sends them. Not
// installed.
#pragma once

#include <string>
#include <string_view>

namespace memcg::http::detail {

struct Impl;

// An answer: status, JSON body (an error is {"error": "...", "status": N}), and the headers that
// go with some statuses.
struct ActionAnswer {
  unsigned status = 200;
  std::string body;
  const char* allow = nullptr;  // "Allow" for a 405
  bool retry_after = false;     // "Retry-After: 1" for a 503
  // For the audit record of an action: what it acted on before (a member's state, the budget's)
  // and how it ended ("ok", "accepted", "killing", or the error).
  std::string old_value;
  std::string result;
  // The group the action concerns, for its event: a member's group, or the root for the process
  // (the budget).
  std::string group = "/";
};

// True for the paths served here: /v1/members, /v1/members/..., /v1/memory, /v1/budget.
bool is_action_path(std::string_view path);
// True when `method` on `path` acts (token-protected, like a POSTed write).
bool is_acting(std::string_view method, std::string_view path);

// GET on an action path. `raw_target` carries the query (?group=).
ActionAnswer serve_action_read(Impl& s, std::string_view path, std::string_view raw_target);
// POST/PUT/DELETE on an action path; the token was checked. May wait (bounded by the server's
// read_timeout) for a kill callback on the writer thread.
ActionAnswer serve_action_write(Impl& s, std::string_view method, std::string_view path,
                                std::string_view raw_target, const std::string& body);

// A flat JSON object's value by key, for the bodies here: {"bytes": N, "force": true}. Returns
// 0 with the field's raw text ("" when absent) or 400 when the body is not such an object.
int json_field(std::string_view body, std::string_view key, std::string* value);

}  // namespace memcg::http::detail
