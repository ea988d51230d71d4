#include "memcg/core/tree/group.hpp"
#include "memcg/core/signal/event_bus.hpp"
#include "memcg/base/internal/lock.hpp"

#include <algorithm>
#include <cerrno>
#include <shared_mutex>

#include "memcg/core/tree/controller.hpp"
#include "memcg/core/admission/internal/admission_queue_state.hpp"
#include "memcg/core/admission/internal/admission_state.hpp"
#include "memcg/core/wait/internal/charge_wait_hooks.hpp"
#include "core/signal/pressure_state.hpp"

namespace memcg {

Group::Group(Controller& controller, Group* parent, std::string name, uint64_t id)
    : memory_(parent ? &parent->memory_ : nullptr, controller.max_units()),
      controller_(controller),
      charge_stock_(parent ? &controller.stock() : nullptr),
      object_stock_(parent ? &controller.obj_stock() : nullptr),
      parent_(parent),
      name_(std::move(name)),
      id_(id),
      stat_node_(controller.rstat(), parent ? &parent->stat_node_ : nullptr),
      pressure_(std::make_unique<internal::GroupPressure>(controller.clock().now_ns())) {
  // A child keeps its parent alive: charges and reclaim walk upwards through it.
  if (parent_) parent_->get();
}

// Its waiting-charge queue (empty by now: every waiter holds a reference) goes with it.
Group::~Group() {
  internal::charge_wait_group_freed(*this);
  internal::admit_group_freed(*this);
  internal::admit_queue_group_freed(*this);
}

std::string Group::path() const {
  if (is_root()) return "/";
  std::string p = name_;
  for (const Group* g = parent_; g && !g->is_root(); g = g->parent_) p = g->name_ + "/" + p;
  return p;
}

bool Group::is_descendant_of(const Group& ancestor) const noexcept {
  for (const Group* g = this; g; g = g->parent_)
    if (g == &ancestor) return true;
  return false;
}

std::vector<GroupRef> Group::children() const {
  internal::SharedLock lock(controller_.tree_mutex_);
  std::vector<GroupRef> out;
  out.reserve(children_.size());
  for (Group* c : children_) out.emplace_back(c);
  return out;
}

void Group::stat_add(int item, int64_t delta, int64_t magnitude_units) noexcept {
  controller_.rstat().update(stat_node_, item, delta, magnitude_units);
}

// The stock's cached per-kind counts, in units: the same update try_charge makes off the hot path.
void Group::stock_stat(int kind, int64_t units) noexcept {
  stat_add(kind, units << controller_.unit_shift(), units < 0 ? -units : units);
}

uint64_t Group::to_bytes(int64_t units) const noexcept {
  return controller_.to_bytes(units);
}
int64_t Group::to_units(uint64_t bytes) const noexcept {
  return controller_.to_units_floor(bytes);
}

void Group::set_min(uint64_t bytes) noexcept {
  internal::LockGuard lock(knob_mutex_);
  memory_.set_min(to_units(bytes));
}

void Group::set_low(uint64_t bytes) noexcept {
  internal::LockGuard lock(knob_mutex_);
  memory_.set_low(to_units(bytes));
}

void Group::set_high(uint64_t bytes) noexcept {
  internal::LockGuard lock(knob_mutex_);
  memory_.set_high(to_units(bytes));
}

void Group::set_max(uint64_t bytes) noexcept {
  internal::LockGuard lock(knob_mutex_);
  memory_.exchange_max(to_units(bytes));
}

int Group::set_max_checked(uint64_t bytes) noexcept {
  internal::LockGuard lock(knob_mutex_);
  return memory_.set_max_checked(to_units(bytes));
}

void Group::raise(Event e) noexcept {
  events_local_.add(e);
  if (controller_.options().local_events) {
    if (!is_root()) events_.add(e);
  } else {
    for (Group* g = this; g && !g->is_root(); g = g->parent_) g->events_.add(e);
  }
  // Listeners of the files just changed (notify.hpp); one relaxed load while there are none.
  if (internal::event_listeners_exist()) [[unlikely]]
    internal::notify_events_raised(*this);
  // The event stream (event_bus.hpp): one relaxed load while nothing records.
  if (controller_.events().recording()) [[unlikely]]
    internal::publish_memory_event(*this, static_cast<int>(e));
}

int Group::attach() noexcept {
  internal::SharedLock lock(controller_.tree_mutex_);
  if (!is_online()) return ENOENT;
  get();
  attached_.fetch_add(1, std::memory_order_relaxed);
  return 0;
}

void Group::detach() noexcept {
  attached_.fetch_sub(1, std::memory_order_relaxed);
  put();
}

void Group::put() noexcept {
  // acq_rel: the thread that drops the last reference must see every write made through the
  // others before it frees the group.
  if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) controller_.release(this);
}

Group::PeakWatcher::~PeakWatcher() {
  internal::LockGuard lock(group_.knob_mutex_);
  auto& v = group_.peak_watchers_;
  v.erase(std::remove(v.begin(), v.end(), this), v.end());
}

uint64_t Group::PeakWatcher::read() const {
  internal::LockGuard lock(group_.knob_mutex_);
  const PageCounter& m = group_.memory_;
  if (value_ < 0) return group_.to_bytes(m.watermark());
  return group_.to_bytes(std::max(value_, m.local_watermark()));
}

void Group::PeakWatcher::reset() {
  internal::LockGuard lock(group_.knob_mutex_);
  PageCounter& m = group_.memory_;
  const int64_t seen = m.reset_local_watermark();
  const int64_t usage = m.local_watermark();
  for (PeakWatcher* peer : group_.peak_watchers_)
    if (peer != this) peer->value_ = std::max(peer->value_, seen);
  if (value_ < 0) group_.peak_watchers_.push_back(this);
  value_ = usage;
}

}  // namespace memcg
