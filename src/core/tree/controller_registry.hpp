// Which controllers exist: a serial number per controller, never reused, so that a thread-local
// record naming a group of a controller destroyed since can tell, without touching the group.
//
// Internal to the library's sources.
#ifndef MEMCG_SRC_CONTROLLER_REGISTRY_HPP_
#define MEMCG_SRC_CONTROLLER_REGISTRY_HPP_

#include <cstdint>

namespace memcg {
class Group;
}

namespace memcg::internal {

// A new controller's serial (never 0). Called by Controller's constructor.
uint64_t register_controller();
// Called first thing by Controller's destructor: from now on the serial is dead. Waits for a
// put_if_live() on that serial that is running.
void unregister_controller(uint64_t serial) noexcept;
// True if the controller of `serial` still exists. Only a caller that holds a reference to one
// of its groups may go on using the controller afterwards (destroying a controller while its
// groups are in use is the caller's error, as everywhere).
bool controller_live(uint64_t serial) noexcept;
// Runs fn(arg) if the controller of `serial` still exists, holding off its destruction until fn
// returns (a thread's record names a controller without holding any of its groups). fn may take
// the controller's own locks; it must not call back into this registry.
void run_if_live(uint64_t serial, void (*fn)(void*), void* arg) noexcept;
// Drops a thread record's reference to `group` (Group::thread_record_refs) if its controller
// (`serial`) still exists, holding off that
// controller's destruction meanwhile; does nothing otherwise (the controller freed the group).
void put_if_live(uint64_t serial, Group& group) noexcept;

}  // namespace memcg::internal

#endif  // MEMCG_SRC_CONTROLLER_REGISTRY_HPP_
