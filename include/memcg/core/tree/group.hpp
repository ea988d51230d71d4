// Group: one node of the control tree, the in-process analogue of a cgroup with the memory
// controller enabled. It owns the hierarchical usage counter, the knobs (memory.min, .low,
// .high, .max, .oom.group), the watermarks behind memory.peak and the event counters.
//
// Lifetime: groups are reference counted. The tree holds one reference while the group is online;
// GroupRef handles, attached threads and per-CPU stock slots hold the others. Removing a group
// takes it offline (invisible to lookup, its min/low reset to 0) but keeps it alive while anything
// refers to it, so that charges it still holds can be uncharged and reclaimed through its parent.
// When the last reference goes, whatever it still holds stays counted in its ancestors, like the
// kernel's reparenting of a dead cgroup's charges.
//
// Thread safety: every public call may be made from any thread. Charges never lock; knob setters
// of one group are serialised by a per-group mutex.
//
// REQUIRES for every call: the caller holds a reference (GroupRef, an attachment, or the
// Controller's root) for the duration of the call.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "memcg/base/events.hpp"
#include "memcg/base/internal/notify_slot.hpp"
#include "memcg/counter/page_counter.hpp"
#include "memcg/percpu/internal/rstat.hpp"
#include "memcg/percpu/internal/stock.hpp"

namespace memcg {

class Controller;
class GroupRef;
class Member;
class ObjStock;
struct ReclaimerEntry;
namespace internal {
struct GroupPressure;  // vmpressure and PSI state (vmpressure.hpp, psi.hpp)
class FileNode;        // an open File (core/internal/file_node.hpp)
struct FileAccess;
struct NotifyAccess;
struct WaitAccess;  // charge_wait_hooks.hpp
struct WaitQueue;   // charge_wait.cpp
struct AdmitAccess; // admission.cpp
struct AdmitState;  // admission.cpp
struct QueueAccess;      // admission_queue.cpp
struct QueueGroupState;  // admission_queue.cpp
}

// "max" in the typed, byte-denominated API.
inline constexpr uint64_t kUnlimited = UINT64_MAX;

class Group final : public StockOwner {
 public:
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;

  // ---- identity and tree --------------------------------------------------------------------
  Controller& controller() const noexcept { return controller_; }
  Group* parent() const noexcept { return parent_; }
  const std::string& name() const noexcept { return name_; }
  // "/" for the root, else the segments below the root joined by '/' ("tenants/a/q17").
  std::string path() const;
  uint64_t id() const noexcept { return id_; }
  bool is_root() const noexcept { return parent_ == nullptr; }
  // False once removed: the group is dying, invisible to lookup, still valid for uncharges.
  bool is_online() const noexcept { return online_.load(std::memory_order_acquire); }
  // True if this is `ancestor` or lies below it.
  bool is_descendant_of(const Group& ancestor) const noexcept;
  // Online children, in name order.
  std::vector<GroupRef> children() const;

  // ---- knobs, in bytes (kUnlimited = "max"); writes floor to whole units and clamp ----------
  uint64_t min() const noexcept { return to_bytes(memory_.min()); }
  uint64_t low() const noexcept { return to_bytes(memory_.low()); }
  uint64_t high() const noexcept { return to_bytes(memory_.high()); }
  uint64_t max() const noexcept { return to_bytes(memory_.max()); }
  bool oom_group() const noexcept { return oom_group_.load(std::memory_order_relaxed); }

  // Plain stores with the kernel's propagation of protected usage. The enforcement that a
  // cgroup-v2 write of memory.high/max adds (drain, reclaim, OOM) is layered on top, in the
  // charge and reclaim code, so that these stay cheap and predictable.
  void set_min(uint64_t bytes) noexcept;
  void set_low(uint64_t bytes) noexcept;
  void set_high(uint64_t bytes) noexcept;
  void set_max(uint64_t bytes) noexcept;  // never refuses, even below usage (cgroup v2)
  // The kernel's page_counter_set_max: EBUSY if usage is above the new limit.
  [[nodiscard]] int set_max_checked(uint64_t bytes) noexcept;
  void set_oom_group(bool on) noexcept { oom_group_.store(on, std::memory_order_relaxed); }

  // ---- reads ----------------------------------------------------------------------------------
  // memory.current: bytes charged to this group and its descendants, including units that sit
  // pre-charged in per-CPU stocks.
  uint64_t current() const noexcept { return to_bytes(memory_.usage()); }
  // All-time peak of current(), in bytes.
  uint64_t peak() const noexcept { return to_bytes(memory_.watermark()); }
  const EventCounters& events() const noexcept { return events_; }
  const EventCounters& events_local() const noexcept { return events_local_; }
  // Counts `e` on this group (memory.events.local) and, hierarchically, on this group and its
  // ancestors below the root (memory.events), honouring the controller's local_events option.
  void raise(Event e) noexcept;

  // memory.peak per open handle: a handle that was never written reads the all-time peak; once
  // written it reads the peak since its own last write. See PeakWatcher.
  class PeakWatcher;

  PageCounter& memory() noexcept { return memory_; }
  const PageCounter& memory() const noexcept { return memory_; }
  // The per-CPU stock that charges of this group go through (the controller's); nullptr for the
  // root, which is never charged. Kept here so that the inline charge path needs one load.
  Stock* charge_stock() const noexcept { return charge_stock_; }
  // The object layer (obj_stock.hpp) byte charges of this group go through; nullptr for the
  // root, whose objects are not recorded. Cached for the same reason.
  ObjStock* object_stock() const noexcept { return object_stock_; }

  // ---- statistics -----------------------------------------------------------------------------
  // Hierarchical (this group and its descendants) and local totals of stat item `item` as of the
  // last fold that covered this group, clamped at 0: bytes for state items, counts for events.
  // An item that is not one of the controller's (Controller::stats()) reads 0.
  int64_t stat(int item) const noexcept { return stat_node_.total(item); }
  int64_t stat_local(int item) const noexcept { return stat_node_.local(item); }
  // Adds `delta` (bytes or a count) to item `item` of this group on the calling thread's CPU;
  // `magnitude_units` is its size in charge units for the fold threshold. An item that is not
  // one of the controller's changes nothing.
  void stat_add(int item, int64_t delta, int64_t magnitude_units) noexcept;
  RstatNode& stat_node() noexcept { return stat_node_; }

  // ---- references -----------------------------------------------------------------------------
  void get() noexcept { refs_.fetch_add(1, std::memory_order_relaxed); }
  // Takes a reference unless the last one is already gone (the group is being released). For
  // code that finds groups through the tree (walks), where a dying group's count may be 0.
  bool try_get() noexcept {
    int64_t refs = refs_.load(std::memory_order_relaxed);
    while (refs > 0)
      if (refs_.compare_exchange_weak(refs, refs + 1, std::memory_order_relaxed)) return true;
    return false;
  }
  void put() noexcept;
  int64_t nr_refs() const noexcept { return refs_.load(std::memory_order_relaxed); }
  int nr_attached() const noexcept { return attached_.load(std::memory_order_relaxed); }
  // Internal: references held by threads' own records, the memory.high record (charge.cpp) and
  // the records allocator hooks leave for the next safe point (charge_ladder.hpp). Such a record
  // may legitimately outlive the controller (a thread that never reaches a safe point), so
  // ~Controller's lifetime check does not count them. Every such reference is taken and dropped
  // with this count: get() + fetch_add, fetch_sub + put().
  std::atomic<int64_t>& thread_record_refs() noexcept { return thread_record_refs_; }
  // Internal: the controller-clock time before which no thread runs a forced-only deferred
  // ladder for this group, after one that could not bring it back under memory.max
  // (safe_point.hpp, kStalledLadderBackoffNs).
  std::atomic<uint64_t>& stalled_ladder_until() noexcept { return stalled_ladder_until_; }
  // Thread attachment (attach.hpp): takes a reference and an attach count; ENOENT when the
  // group is offline. Atomic with respect to remove(), which refuses groups with attachments.
  [[nodiscard]] int attach() noexcept;
  void detach() noexcept;

  // Pressure signals of this group (vmpressure.hpp, psi.hpp); internal to the library.
  internal::GroupPressure& pressure_state() const noexcept { return *pressure_; }

 private:
  friend class Controller;
  friend class PeakWatcher;

  friend class Stock;
  friend class ObjStock;
  friend class Member;
  friend class OomKiller;
  friend struct ReclaimAccess;
  friend struct OomKillerAccess;
  friend struct internal::NotifyAccess;
  friend struct internal::WaitAccess;
  friend struct internal::FileAccess;
  friend struct internal::AdmitAccess;
  friend struct internal::QueueAccess;
  Group(Controller& controller, Group* parent, std::string name, uint64_t id);
  ~Group();

  // StockOwner: called by the per-CPU stock on its slow paths.
  void stock_uncharge(int64_t units) noexcept override { memory_.uncharge(units); }
  void stock_stat(int kind, int64_t units) noexcept override;
  void stock_get() noexcept override { get(); }
  void stock_put() noexcept override { put(); }
  // seq_cst: pairs with the store in Controller::remove() (see there).
  bool stock_cacheable() const noexcept override {
    return online_.load(std::memory_order_seq_cst);
  }
  bool stock_is_within(const StockOwner* root) const noexcept override {
    return is_descendant_of(*static_cast<const Group*>(root));
  }

  uint64_t to_bytes(int64_t units) const noexcept;
  int64_t to_units(uint64_t bytes) const noexcept;

  // The counter comes first: it is 128-byte aligned and its hot block must not share a line with
  // anything else of the group.
  PageCounter memory_;
  Controller& controller_;
  Stock* const charge_stock_;
  ObjStock* const object_stock_;
  Group* const parent_;
  // Waiting charges queued on this group's memory.max now (charge_wait.cpp). Next to parent_:
  // an uncharge that walks up to see whether anyone waits on its path reads the same line.
  std::atomic<int> wait_count_{0};
  // Their queue, created by the first waiter (or a priority set) and freed with the group.
  std::atomic<internal::WaitQueue*> wait_queue_{nullptr};
  const std::string name_;
  const uint64_t id_;
  // Requests refused at once for this group's memory.max (charge_wait.hpp, never_fits); off the
  // waiters' line above: written only on such a refusal.
  std::atomic<uint64_t> never_fits_{0};
  // Admission by learned peak (admission.hpp): created on first use, freed with the group.
  std::atomic<internal::AdmitState*> admit_{nullptr};
  // Admission queues (admission_queue.hpp): weight and statistics, created on first use.
  std::atomic<internal::QueueGroupState*> admit_queue_{nullptr};
  std::atomic<int64_t> refs_{1};  // the tree's reference
  std::atomic<int> attached_{0};  // attached threads (removal is refused while any)
  std::atomic<int64_t> thread_record_refs_{0};  // see thread_record_refs()
  std::atomic<uint64_t> stalled_ladder_until_{0};  // see stalled_ladder_until()
  std::atomic<bool> online_{true};
  std::atomic<bool> oom_group_{false};
  std::atomic<uint8_t> oom_order_{0};  // memory.oom.order (oom.hpp, OomOrder); 0 = auto
  EventCounters events_;
  EventCounters events_local_;
  RstatNode stat_node_;
  // Object layer: sub-unit bytes charged to this group but unused, parked by a per-CPU object
  // reserve that switched to another group (obj_stock.hpp). Whole units never stay here.
  std::atomic<int64_t> obj_pool_bytes_{0};
  // Object layer: units it charged and has not returned; one reference is held while non-zero.
  std::atomic<int64_t> obj_units_{0};

  // Guarded by knob_mutex_: serialises setters and the memory.peak watchers of this group.
  mutable std::mutex knob_mutex_;
  std::vector<PeakWatcher*> peak_watchers_;

  // Guarded by policy_mutex_: what reclaim and the OOM killer may act on in this group. Never
  // held while calling a reclaimer or a kill callback.
  mutable std::mutex policy_mutex_;
  std::vector<std::shared_ptr<ReclaimerEntry>> reclaimers_;
  std::vector<Member*> members_;
  // Where the next partial reclaim walk rooted here resumes (id of the last group visited; 0 =
  // from the start), so that successive reclaims spread over the subtree as in the kernel.
  std::atomic<uint64_t> reclaim_cursor_{0};

  // Guarded by the controller's tree lock.
  std::vector<Group*> children_;  // online, sorted by name
  std::vector<Group*> dying_;     // removed but still referenced

  // Created with the group, freed with it (vmpressure and PSI).
  const std::unique_ptr<internal::GroupPressure> pressure_;
  // ---- change notification of memory.events and memory.events.local (notify.hpp) ----------
  // Listeners and rate-limit state; empty until the first listener subscribes.
  internal::NotifySlot notify_;
  // ---- end of change notification ----
  // The open Files of this group, deactivated by its removal (core/internal/file_node.hpp).
  // Guarded by files_mutex_, a leaf lock.
  std::mutex files_mutex_;
  std::vector<std::shared_ptr<internal::FileNode>> files_;
};

// One open memory.peak handle. Mirrors the kernel's per-file peak: writing resets this handle's
// peak to the current usage; other handles are unaffected. Deviation from the kernel: when a write
// resets the shared local watermark, peers are raised to the watermark they had seen (the kernel
// raises them only to current usage, losing a peak reached between resets).
class Group::PeakWatcher {
 public:
  explicit PeakWatcher(Group& group) : group_(group) {}
  ~PeakWatcher();
  PeakWatcher(const PeakWatcher&) = delete;
  PeakWatcher& operator=(const PeakWatcher&) = delete;
  uint64_t read() const;  // bytes
  void reset();

 private:
  friend class Group;
  Group& group_;
  int64_t value_ = -1;  // units; -1 until the first reset. Guarded by group_.knob_mutex_.
};

// An owning handle to a group (like std::shared_ptr, intrusive). Empty when default-constructed
// or when a lookup found nothing.
class GroupRef {
 public:
  GroupRef() = default;
  explicit GroupRef(Group* g) noexcept : g_(g) {
    if (g_) g_->get();
  }
  GroupRef(const GroupRef& o) noexcept : GroupRef(o.g_) {}
  // A reference to `g` if it is not being released, else an empty handle (see Group::try_get).
  static GroupRef try_acquire(Group* g) noexcept {
    GroupRef r;
    if (g && g->try_get()) r.g_ = g;
    return r;
  }
  GroupRef(GroupRef&& o) noexcept : g_(o.g_) { o.g_ = nullptr; }
  GroupRef& operator=(GroupRef o) noexcept {
    std::swap(g_, o.g_);
    return *this;
  }
  ~GroupRef() {
    if (g_) g_->put();
  }
  Group* get() const noexcept { return g_; }
  Group* operator->() const noexcept { return g_; }
  Group& operator*() const noexcept { return *g_; }
  explicit operator bool() const noexcept { return g_ != nullptr; }
  void reset() noexcept { GroupRef().swap(*this); }
  void swap(GroupRef& o) noexcept { std::swap(g_, o.g_); }

 private:
  Group* g_ = nullptr;
};

}  // namespace memcg
