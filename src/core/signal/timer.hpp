// The library's timer thread, for deadlines on the SystemClock (private to the library). One
// detached thread, started on first need, runs both the deferred memory.events notifications
// (notify.cpp, which owns the thread) and the PSI trigger polls (psi.cpp). With any other clock
// the same work is done by Controller::tick().
#ifndef MEMCG_CORE_TIMER_HPP_
#define MEMCG_CORE_TIMER_HPP_

#include <cstdint>

namespace memcg {
class Controller;
namespace internal {

// Starts the timer thread if it is not running yet. Throws std::system_error if the thread
// cannot be created.
void start_timer_once();
// Makes the timer thread look at its deadlines again (a PSI poll became due earlier).
void timer_wake() noexcept;

// PSI (psi.cpp): the earliest SystemClock poll deadline (UINT64_MAX when none), read by the
// timer thread under its lock; the polls of SystemClock groups due at `now`; the polls of
// `ctl`'s groups due on its clock (Controller::tick).
uint64_t psi_system_poll_due() noexcept;
void psi_poll_system(uint64_t now) noexcept;
void psi_poll_controller(Controller& ctl) noexcept;

}  // namespace internal
}  // namespace memcg

#endif  // MEMCG_CORE_TIMER_HPP_
