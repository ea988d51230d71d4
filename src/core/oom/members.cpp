#include "memcg/core/oom/members.hpp"

#include <algorithm>
#include <cerrno>

#include "oom_batch.hpp"

namespace memcg {
namespace {

// Largest first; equal sizes in name order, then group order, so the list is stable.
bool before(const MemberSize& a, const MemberSize& b) {
  if (a.bytes != b.bytes) return a.bytes > b.bytes;
  if (a.name != b.name) return a.name < b.name;
  return a.group < b.group;
}

}  // namespace

int largest_members(Group& group, size_t max, MemberList* out) {
  if (out == nullptr || max > kMaxListedMembers) return EINVAL;
  Controller& ctl = group.controller();
  const unsigned shift = ctl.unit_shift();
  auto bytes = [shift](int64_t units) {
    return units <= 0 ? uint64_t{0} : static_cast<uint64_t>(units) << shift;
  };
  MemberList list;
  list.largest.reserve(max + 1);
  // A heap of the `max` largest (its front the smallest kept): a name is copied only when it
  // enters, so a subtree of many members costs its walk, not its names.
  ctl.walk(group, [&](Group& g) {
    const std::string path = g.path();
    internal::LockGuard lock(OomKillerAccess::policy_mutex(g));  // members stay while held
    for (const Member* m : OomKillerAccess::members(g)) {
      MemberSize s;
      s.bytes = bytes(m->charged());
      s.admitted_bytes = bytes(m->admitted());
      ++list.total;
      list.bytes += s.bytes;
      list.admitted_bytes += s.admitted_bytes;
      if (max == 0) continue;
      if (list.largest.size() == max && s.bytes < list.largest.front().bytes) continue;
      s.name = m->name();
      s.group = path;
      s.killed = m->killed();
      list.largest.push_back(std::move(s));
      std::push_heap(list.largest.begin(), list.largest.end(), before);
      if (list.largest.size() > max) {
        std::pop_heap(list.largest.begin(), list.largest.end(), before);
        list.largest.pop_back();
      }
    }
  }, /*include_dying=*/false);
  std::sort_heap(list.largest.begin(), list.largest.end(), before);
  *out = std::move(list);
  return 0;
}

}  // namespace memcg
