#include "memcg/core/tree/controller.hpp"
#include "memcg/base/internal/lock.hpp"
#include "memcg/base/internal/defer_callbacks.hpp"
#include "memcg/core/wait/internal/charge_wait_hooks.hpp"

#include "controller_registry.hpp"
#include "core/signal/pressure_state.hpp"
#include "core/signal/timer.hpp"

#include "memcg/base/internal/hook_bypass.hpp"
#include "memcg/core/signal/event_bus.hpp"
#include "memcg/core/signal/notify.hpp"
#include "memcg/core/charge/obj_stock.hpp"
#include "memcg/core/oom/oom.hpp"
#include "memcg/core/oom/oom_log.hpp"
#include "memcg/core/reclaim/reclaim.hpp"
#include "memcg/core/tree/internal/file_node.hpp"
#include "memcg/percpu/internal/stock.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <string>

namespace memcg {

Controller::Controller(Options options)
    : options_(options), clock_(options.clock ? options.clock : &SystemClock::instance()) {
  if (options_.unit_shift < 6 || options_.unit_shift > 30)
    throw std::invalid_argument("memcg: unit_shift must be in 6..30");
  if (options_.batch < 1 || options_.batch > 127)
    throw std::invalid_argument("memcg: batch must be in 1..127 units");
  if (options_.nr_shards < 0 || options_.nr_shards > 4096)
    throw std::invalid_argument("memcg: nr_shards must be in 0..4096");
  for (const std::string& kind : options_.stat_kinds)
    if (registry_.add(kind, StatKind::kState) < 0)
      throw std::invalid_argument("memcg: bad or duplicate stat kind '" + kind + "'");
  registry_.freeze();
  Rstat::Options ro;
  ro.nr_shards = options_.nr_shards;
  ro.batch = options_.batch;
  rstat_ = std::make_unique<Rstat>(registry_.size(), ro);
  root_ = new Group(*this, nullptr, "", 0);
  // A kind that is not this controller's counts in no item (charge.hpp): the unit stock passes
  // kinds on as they are (the statistics ignore unknown items); the object layer maps them to
  // none before a reserve can be tagged with one.
  stock_ = std::make_unique<Stock>(options_.nr_shards, options_.batch);
  obj_stock_ = std::make_unique<ObjStock>(options_.nr_shards, options_.unit_shift,
                                          ObjStock::Mode::kAuto,
                                          static_cast<int>(registry_.size()));
  oom_ = std::make_unique<internal::OomState>();
  oom_log_ = std::make_unique<OomLog>();
  events_ = std::make_unique<EventBus>();
  serial_ = internal::register_controller();
}

Controller::~Controller() {
  // Waiting charges (charge_wait.hpp) are woken and have left before anything is freed.
  internal::charge_wait_controller_gone(*this);
  // First: thread-local records naming our groups (memory.high pending) must not touch them.
  internal::unregister_controller(serial_);
  internal::charge_wait_controller_freed(*this);  // no safe point reads it from here on
  internal::HookTeardown teardown;  // memcg_hook: frees below must not reach the groups
  // Stocks first: draining them uncharges and drops the references their slots hold.
  obj_stock_.reset();  // its units go straight back to the counters
  stock_.reset();
  // Checked lifetimes (Options::check_lifetimes): whatever a user still holds would point into
  // the groups freed below.
  if (options_.check_lifetimes) {
    const std::string left = in_use_report();
    if (!left.empty()) {
      std::fprintf(stderr,
                   "memcg: Controller destroyed while still in use; destroy these first:\n%s",
                   left.c_str());
      std::fflush(stderr);
      std::abort();
    }
  }
  // Free bottom-up: every group, online or dying, regardless of outstanding references.
  std::vector<Group*> order;
  std::vector<Group*> stack{root_};
  while (!stack.empty()) {
    Group* g = stack.back();
    stack.pop_back();
    order.push_back(g);
    for (Group* c : g->children_) stack.push_back(c);
    for (Group* c : g->dying_) stack.push_back(c);
  }
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    if (*it != root_) rstat_->detach((*it)->stat_node());
    delete *it;
  }
  rstat_.reset();  // while `teardown` holds: buffers it grew may be charged to the groups
  oom_.reset();
  oom_log_.reset();
  // The event bus's subscribers are told it closes; its notifier thread is joined.
  events_.reset();
}

bool Controller::valid_name(std::string_view name) noexcept {
  if (name.empty() || name.size() > 255 || name == "." || name == "..") return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-' || c == '.' || c == ':' || c == '@' || c == '+';
  });
}

namespace {
// Splits "a/b/c" (leading and trailing '/' tolerated) into segments; false if a segment is empty.
bool split_path(std::string_view path, std::vector<std::string_view>* out) {
  while (!path.empty() && path.front() == '/') path.remove_prefix(1);
  while (!path.empty() && path.back() == '/') path.remove_suffix(1);
  out->clear();
  while (!path.empty()) {
    const size_t slash = path.find('/');
    std::string_view seg = path.substr(0, slash);
    if (seg.empty()) return false;
    out->push_back(seg);
    path = slash == std::string_view::npos ? std::string_view() : path.substr(slash + 1);
  }
  return true;
}

Group* find_child(const std::vector<Group*>& children, std::string_view name) {
  auto it = std::lower_bound(children.begin(), children.end(), name,
                             [](const Group* g, std::string_view n) { return g->name() < n; });
  return it != children.end() && (*it)->name() == name ? *it : nullptr;
}
}  // namespace

Group* Controller::find_locked(std::string_view path) const {
  std::vector<std::string_view> segs;
  if (!split_path(path, &segs)) return nullptr;
  Group* g = root_;
  for (std::string_view s : segs) {
    g = find_child(g->children_, s);
    if (!g) return nullptr;
  }
  return g;
}

// Entry points below hold a HookBypass (internal/lock.hpp): the path segments, the group and the
// tree's vectors are the library's own memory, never charged to the caller's group.
int Controller::create(std::string_view path, GroupRef* out) {
  internal::HookBypass bypass;
  std::vector<std::string_view> segs;
  if (!split_path(path, &segs) || segs.empty()) return EINVAL;
  for (std::string_view s : segs)
    if (!valid_name(s)) return EINVAL;
  GroupRef parent;
  {
    internal::SharedLock lock(tree_mutex_);
    Group* g = root_;
    for (size_t i = 0; i + 1 < segs.size(); ++i) {
      g = find_child(g->children_, segs[i]);
      if (!g) return ENOENT;
    }
    parent = GroupRef(g);
  }
  return create(*parent, segs.back(), out);
}

int Controller::create(Group& parent, std::string_view name, GroupRef* out) {
  if (!valid_name(name)) return EINVAL;
  internal::HookBypass bypass;
  std::string created;  // its path, for the event bus (recorded outside the tree lock)
  {
    internal::UniqueLock lock(tree_mutex_);
    if (!parent.is_online()) return ENOENT;
    auto& siblings = parent.children_;
    auto it = std::lower_bound(siblings.begin(), siblings.end(), name,
                               [](const Group* g, std::string_view n) { return g->name() < n; });
    if (it != siblings.end() && (*it)->name() == name) return EEXIST;
    Group* g = new Group(*this, &parent, std::string(name), next_id_++);
    siblings.insert(it, g);
    ++nr_groups_;
    if (out) *out = GroupRef(g);
    if (events_->recording()) [[unlikely]] {
      try {
        created = g->path();
      } catch (...) {  // no memory for the path: the event is lost, the group is made
      }
    }
  }
  if (!created.empty()) events_->publish(BusEventType::kGroupCreated, created, "{}");
  return 0;
}

GroupRef Controller::lookup(std::string_view path) const {
  internal::HookBypass bypass;
  internal::SharedLock lock(tree_mutex_);
  return GroupRef(find_locked(path));
}

int Controller::remove(std::string_view path) {
  internal::HookBypass bypass;
  GroupRef g = lookup(path);
  if (!g) return ENOENT;
  return remove(*g);
}

int Controller::remove(Group& group) {
  if (group.is_root()) return EINVAL;
  internal::HookBypass bypass;
  {
    internal::UniqueLock lock(tree_mutex_);
    if (!group.is_online()) return ENOENT;
    if (!group.children_.empty() || group.nr_attached() > 0) return EBUSY;
    auto& siblings = group.parent_->children_;
    siblings.erase(std::find(siblings.begin(), siblings.end(), &group));
    group.parent_->dying_.push_back(&group);
    // seq_cst: ordered before the stock drains below against refills (see there).
    group.online_.store(false, std::memory_order_seq_cst);
    --nr_groups_;
    ++nr_dying_;
  }
  // Its open files first: from here on they answer ENODEV and stop holding it (kernfs).
  internal::files_group_removed(group);
  // Nothing of it may stay hidden in a per-CPU stock. A refill that takes a shard after the
  // drain passed it sees the group offline (the seq_cst store above, Group::stock_cacheable)
  // and bypasses the stock; one that took it before is seen by the drain (Stock's pre-check).
  obj_stock_->drain_owner(&group);  // first: it returns units to the counters
  stock_->drain_owner(&group);
  // An offline group protects nothing (the kernel resets min and low of a dying cgroup).
  group.set_min(0);
  group.set_low(0);
  internal::charge_wait_group_removed(group);  // its waiting charges return kRemoved
  internal::notify_group_removed(group);       // the final notification of its listeners
  internal::vmpressure_group_removed(group);   // ... of its vmpressure listeners
  internal::psi_group_removed(group);          // ... and of its PSI triggers
  if (events_->recording()) [[unlikely]]
    events_->publish(BusEventType::kGroupRemoved, group, "{}");
  group.put();  // the tree's reference
  return 0;
}

void Controller::release(Group* g) noexcept {
  Group* parent = g->parent_;
  {
    internal::UniqueLock lock(tree_mutex_);
    auto& dying = parent->dying_;
    dying.erase(std::find(dying.begin(), dying.end(), g));
    // Its dying children hold references to it, so none can be left here.
    --nr_dying_;
  }
  // Whatever statistics it still had pending go to its parent: nothing is lost.
  rstat_->detach(g->stat_node());
  delete g;
  parent->put();
}

void Controller::flush_stats() {
  obj_stock_->fold_stats();  // the object layer's deferred byte deltas
  stock_->fold_stats();
  rstat_->flush(root_->stat_node());
}

void Controller::drain_stocks() {
  obj_stock_->drain_all(nullptr);  // first: it returns units to the unit stock's counters
  stock_->drain_all(nullptr);
}

uint64_t Controller::stat_staleness_bound_units(uint64_t levels, uint64_t groups) const noexcept {
  const uint64_t per_group = static_cast<uint64_t>(stock_->batch()) *
                             static_cast<uint64_t>(stock_->nr_shards());
  const uint64_t cached = std::min(groups * per_group,
                                   static_cast<uint64_t>(stock_->stat_slack_bound()));
  return levels * Rstat::staleness_bound_units(rstat_->options().batch, rstat_->nr_shards()) +
         cached;
}

void Controller::tick() {
  if (rstat_->claim_period(clock_->now_ns())) {
    stock_->fold_stats();
    rstat_->flush(root_->stat_node());
  }
  // A reader that must not run callbacks leaves them queued (defer_callbacks.hpp).
  if (!internal::callbacks_deferred()) {
    internal::deliver_due_notifications(*this);
    internal::psi_poll_controller(*this);  // PSI triggers due on this clock (timer.hpp)
  }
}

void Controller::walk(Group& from, const std::function<void(Group&)>& fn,
                      bool include_dying) const {
  internal::SharedLock lock(tree_mutex_);
  std::vector<Group*> stack{&from};
  while (!stack.empty()) {
    Group* g = stack.back();
    stack.pop_back();
    fn(*g);
    // Push in reverse so that children are visited in name order.
    if (include_dying)
      for (auto it = g->dying_.rbegin(); it != g->dying_.rend(); ++it) stack.push_back(*it);
    for (auto it = g->children_.rbegin(); it != g->children_.rend(); ++it) stack.push_back(*it);
  }
}

size_t Controller::nr_groups() const noexcept {
  internal::SharedLock lock(tree_mutex_);
  return nr_groups_;
}

size_t Controller::nr_dying() const noexcept {
  internal::SharedLock lock(tree_mutex_);
  return nr_dying_;
}

uint64_t Controller::to_bytes(int64_t units) const noexcept {
  if (units >= max_units()) return kUnlimited;
  return static_cast<uint64_t>(units) << options_.unit_shift;
}

int64_t Controller::to_units_floor(uint64_t bytes) const noexcept {
  const uint64_t units = bytes >> options_.unit_shift;
  return units >= static_cast<uint64_t>(max_units()) ? max_units() : static_cast<int64_t>(units);
}

int64_t Controller::to_units_ceil(uint64_t bytes) const noexcept {
  const uint64_t units = (bytes >> options_.unit_shift) + ((bytes & (unit_size() - 1)) != 0);
  return units >= static_cast<uint64_t>(max_units()) ? max_units() : static_cast<int64_t>(units);
}

}  // namespace memcg

namespace memcg {

int64_t Controller::reclaim_for_charge(Group& target, int64_t units) {
  if (!reclaim_hook_) return reclaim(target, units, ReclaimReason::kLimit);  // confirms itself
  // A hook's report counts as far as the counters confirm it, as the driver's does.
  const int64_t before = target.memory().usage();
  const int64_t reported = reclaim_hook_(target, units);
  return internal::confirmed_reclaim(reported, before, target.memory().usage());
}

bool Controller::out_of_memory(Group& domain, int64_t units) {
  return oom_hook_ ? oom_hook_(domain, units) : OomKiller::kill(domain, units);
}

}  // namespace memcg
