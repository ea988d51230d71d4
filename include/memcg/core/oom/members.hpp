// The largest members of a subtree, for people and monitoring (memcg::http's group page): who
// holds a group's memory, by charged size, and how much each was admitted with. The OOM killer
// makes its own choice (oom.hpp); this is a read-only look at the same members.
//
// Cost: walks the subtree under the tree lock (shared) and takes each group's member lock in
// turn; keeps at most `max` names, so its memory is bounded whatever the number of members.
// Thread safety: any thread; a member may come or go during the walk (it is then listed or not).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace memcg {

class Group;

struct MemberSize {
  std::string name;              // Member::name(), the application's text as given
  std::string group;             // its group's path
  uint64_t bytes = 0;            // charged (Member::charged(), in bytes)
  uint64_t admitted_bytes = 0;   // admitted with (Member::admitted(), in bytes)
  bool killed = false;           // chosen by the OOM killer, still unwinding
};

struct MemberList {
  std::vector<MemberSize> largest;  // largest charged first (ties: name, then group), <= max
  size_t total = 0;                 // members in the subtree
  uint64_t bytes = 0;               // charged by all of them
  uint64_t admitted_bytes = 0;      // admitted to all of them
};

inline constexpr size_t kMaxListedMembers = 1024;

// Fills `out` with the `max` largest members of `group`'s subtree and the totals of all of them.
// Returns 0, or EINVAL (and changes nothing) when `out` is null or `max` is over
// kMaxListedMembers.
[[nodiscard]] int largest_members(Group& group, size_t max, MemberList* out);

}  // namespace memcg
