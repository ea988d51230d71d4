// The OOM report in words: the names of the victim orders and deciders, and OomReport::format()
// (oom.hpp). Kept apart from the killer's decisions in oom.cpp.
#include <sstream>
#include <string>

#include "memcg/core/wait/charge_wait.hpp"
#include "memcg/core/oom/oom.hpp"

namespace memcg {

const char* oom_order_name(OomOrder o) noexcept {
  switch (o) {
    case OomOrder::kAuto:
      return "auto";
    case OomOrder::kKernel:
      return "kernel";
    case OomOrder::kExcess:
      return "excess";
  }
  return "?";
}

const char* oom_decider_name(OomDecider d) noexcept {
  switch (d) {
    case OomDecider::kNone:
      return "none";
    case OomDecider::kKernelOrder:
      return "kernel";
    case OomDecider::kExcessOrder:
      return "excess";
    case OomDecider::kHandler:
      return "handler";
    case OomDecider::kSpill:
      return "spill";
    case OomDecider::kPreempt:
      return "preempt";
    case OomDecider::kOperator:
      return "operator";
  }
  return "?";
}

std::string OomReport::format() const {
  std::ostringstream o;
  o << "memory cgroup out of memory in " << domain << " (request " << request_units << " units)\n";
  for (const OomHandlerCall& h : handlers)
    o << "  handler " << h.handler << " of " << h.group << ": freed=" << h.freed << " "
      << h.outcome << "\n";
  if (decider == OomDecider::kHandler) {
    o << "  resolved by handler " << handler << ": nobody killed\n";
    return o.str();
  }
  if (!top.empty()) o << "  order " << oom_order_name(order) << "\n";
  for (const OomCandidate& c : top)
    o << "  candidate " << c.member << " in " << c.group << ": charged=" << c.charged
      << " admitted=" << c.admitted << " excess=" << c.excess
      << " priority=" << wait_priority_name(c.priority) << " adj=" << c.score_adj
      << " badness=" << c.badness << "\n";
  for (const std::string& m : spilled) o << "  asked " << m << " to spill\n";
  for (const OomFailure& f : failed)
    o << "  kill of " << f.member << " failed: its callback threw: " << f.error << "\n";
  if (decider == OomDecider::kSpill) {
    o << "  resolved by spill of " << victim << " (reason " << cancel_reason_name(reason)
      << "): nobody killed\n";
  } else if (victim.empty()) {
    o << "  no killable member\n";
  } else {
    o << "  killed " << victim;
    if (!oom_group.empty()) o << " and every member of oom.group " << oom_group;
    o << " (" << killed.size() << " killed, decided by " << oom_decider_name(decider)
      << ", reason " << cancel_reason_name(reason) << ")\n";
  }
  return o.str();
}

}  // namespace memcg
