// The lifetime check of ~Controller: what users still hold when the controller goes.
//
// A group's references at that point, once the stocks are drained, are the tree's (while
// online), one per child (online or dying), the memory.high records of threads (which may
// outlive the controller: charge.cpp), and the object layer's while it counts units. Anything
// beyond is a handle of the user: a GroupRef, an attachment, a Member (a reference and an
// attachment), a listener, a trigger, an open file, a charge handle or a Reservation, a jemalloc
// arena. Members and registrations are named on their own.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "memcg/core/tree/controller.hpp"
#include "memcg/core/oom/oom.hpp"
#include "core/signal/pressure_state.hpp"

namespace memcg {

bool lifetime_checks_default() noexcept {
  // The environment decides first, so that a release build can be checked without a rebuild.
  if (const char* v = std::getenv("MEMCG_CHECK_LIFETIMES"); v != nullptr && *v != '\0')
    return std::strcmp(v, "0") != 0;
#if !defined(NDEBUG) || defined(MEMCG_CHECK_LIFETIMES)
  return true;
#else
  return false;
#endif
}

std::string Controller::in_use_report() const {
  std::string out;
  std::vector<Group*> stack{root_};
  while (!stack.empty()) {
    Group* g = stack.back();
    stack.pop_back();
    for (Group* c : g->children_) stack.push_back(c);
    for (Group* c : g->dying_) stack.push_back(c);
    int64_t expected = (g->is_online() ? 1 : 0) +
                       static_cast<int64_t>(g->children_.size() + g->dying_.size()) +
                       g->thread_record_refs().load(std::memory_order_relaxed) +
                       (g->obj_units_.load(std::memory_order_relaxed) != 0 ? 1 : 0);
    if (g->is_root()) expected = g->refs_.load(std::memory_order_relaxed);  // never released
    const int64_t refs = g->refs_.load(std::memory_order_relaxed) - expected;
    std::string what;
    const auto add = [&](int64_t n, const char* one, const char* many) {
      if (n <= 0) return;
      if (!what.empty()) what += ", ";
      what += std::to_string(n) + " " + (n == 1 ? one : many);
    };
    add(refs, "reference (GroupRef, attachment, member, listener, trigger, file, handle, arena)",
        "references (GroupRef, attachment, member, listener, trigger, file, handle, arena)");
    add(g->nr_attached(), "attached thread or member", "attached threads or members");
    if (!g->members_.empty()) {
      std::string names;
      for (const Member* m : g->members_) names += (names.empty() ? "" : " ") + m->name();
      add(static_cast<int64_t>(g->members_.size()), ("member (" + names + ")").c_str(),
          ("members (" + names + ")").c_str());
    }
    add(static_cast<int64_t>(g->reclaimers_.size()), "reclaimer registration (cache, arena)",
        "reclaimer registrations (caches, arenas)");
    const internal::GroupPressure& p = g->pressure_state();
    if (const auto list = p.vmp.listeners)
      add(static_cast<int64_t>(list->size()), "vmpressure listener", "vmpressure listeners");
    add(static_cast<int64_t>(p.psi.triggers.size()), "PSI trigger", "PSI triggers");
    if (!what.empty()) out += "  group " + g->path() + ": " + what + "\n";
  }
  return out;
}

}  // namespace memcg
