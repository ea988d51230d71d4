// Object stock slow paths: unit refills, owner switches, returns, pools, drains.
//
// Shard ownership follows Stock (stock.cpp): every path here changes a shard only while holding
// its `disabled` word, and in rseq mode calls make_exclusive() before touching `bytes`. Nothing
// that can call back into the library (unit charges, uncharges, statistics, the last put of a
// group) runs while a shard is held: slow paths take what they need out of the shard, release it,
// and then act. The one exception is a hit on this CPU's unit stock (Stock::refill_hit), which
// is a single restartable store and calls nothing.
//
// Lifetime: a free holds no reference to its group. Until its bytes are in a reserve, the units
// backing them keep the group's object-layer count, and so the group, alive; from then on a
// drain on another CPU may return that reserve and the shard's credit, so whatever the free
// still does with the group after releasing the shard is covered by units it holds on purpose.
//
// Byte conservation, per group: units charged here x unit = live bytes + reserves + pool.
// Statistics: for each shard, reported - bytes is the byte delta of its owner's kind not yet
// given to the group (a hit moves `bytes` alone). A slow path adds its own live delta to
// `reported`, and folds the whole pending delta into the group once it passes one unit.

#include "memcg/core/charge/obj_stock.hpp"

#include "memcg/base/internal/hook_bypass.hpp"
#include "memcg/base/internal/shard_word.hpp"

#include <sched.h>

#include <cassert>
#include <cstdlib>

namespace memcg {
namespace {

constexpr uintptr_t kKindMask = ObjStock::kMaxKinds - 1;
static_assert(alignof(Group) >= ObjStock::kMaxKinds, "kinds are packed into group addresses");

Group* group_of(const void* owner) noexcept {
  return reinterpret_cast<Group*>(reinterpret_cast<uintptr_t>(owner) & ~kKindMask);
}
int kind_of(const void* owner) noexcept {
  return static_cast<int>(reinterpret_cast<uintptr_t>(owner) & kKindMask);
}
int64_t magnitude(int64_t d) noexcept {
  return d < 0 ? -d : d;
}

}  // namespace

ObjStock::ObjStock(int nr_shards, unsigned unit_shift, Mode mode, int nr_kinds)
    : nr_shards_(nr_shards > 0 ? nr_shards : internal::nr_cpu_ids()),
      nr_kinds_(nr_kinds < 0 ? 0 : nr_kinds),
      shift_(unit_shift),
      unit_(int64_t{1} << unit_shift),
      rseq_(MEMCG_RSEQ_CS && mode == Mode::kAuto && internal::rseq_mode() &&
            nr_shards_ >= internal::nr_cpu_ids()),
      // A unit above 2^61 could overflow the hit's sum (obj_stock.hpp): such a stock takes
      // every call through the slow path.
      rseq_shards_(rseq_ && unit_shift <= 61 ? static_cast<uint32_t>(nr_shards_) : 0) {
  shards_ = std::make_unique<Shard[]>(static_cast<size_t>(nr_shards_));
}

bool ObjStock::hit_retry(Group& g, uint64_t bytes, int kind, bool charge) noexcept {
#if MEMCG_RSEQ_CS
  struct rseq* const rs = internal::rseq_area();
  const void* const owner = tag(g, kind);
  for (int aborts = 1; aborts < kMaxAborts; ++aborts) {
    const auto cpu = static_cast<uint32_t>(__atomic_load_n(&rs->cpu_id, __ATOMIC_RELAXED));
    if (cpu >= rseq_shards_) return false;
    Shard& s = shards_[cpu];
    const auto& disabled = *reinterpret_cast<const uint64_t*>(&s.disabled);
    const auto& slot = *reinterpret_cast<const void* const*>(&s.owner);
    auto& reserve = *reinterpret_cast<int64_t*>(&s.bytes);
    const internal::CsResult r =
        charge ? internal::cs_add_floor(rs, static_cast<int>(cpu), disabled, slot, owner, reserve,
                                        -static_cast<int64_t>(bytes), 0)
               : internal::cs_add_ceil(rs, static_cast<int>(cpu), disabled, slot, owner, reserve,
                                       static_cast<int64_t>(bytes), unit_);
    if (r != internal::CsResult::kAborted) return r == internal::CsResult::kOk;
  }
#else
  (void)g;
  (void)bytes;
  (void)kind;
  (void)charge;
#endif
  return false;
}

ObjStock::~ObjStock() {
  drain_matching([](const Group*) { return true; });
}

// ---- shard ownership (as in Stock) ------------------------------------------------------------

// The shard word protocol lives in internal/shard_word.hpp (shared with the unit stock).
int ObjStock::local_shard() const noexcept {
  return internal::local_shard(nr_shards_, rseq_);
}

void ObjStock::make_exclusive(int idx) noexcept {
  internal::make_exclusive(idx, rseq_);
}

bool ObjStock::try_lock(int idx) noexcept {
  return internal::shard_try_lock(shards_[idx].disabled, idx, rseq_);
}

void ObjStock::lock_wait(int idx) noexcept {
  internal::shard_lock_wait(shards_[idx].disabled);
}

void ObjStock::unlock(int idx) noexcept {
  internal::shard_unlock(shards_[idx].disabled);
}

ObjStock::Taken ObjStock::take(Shard& s) noexcept {
  Taken t{s.owner.load(std::memory_order_relaxed), s.bytes.load(std::memory_order_relaxed), 0,
          s.credit};
  t.pending = s.reported - t.bytes;
  s.bytes.store(0, std::memory_order_relaxed);
  s.owner.store(nullptr, std::memory_order_relaxed);
  s.reported = 0;
  s.credit = 0;
  return t;
}

// ---- what runs after a shard is released -------------------------------------------------------

void ObjStock::flush_stat(Group& g, int kind, int64_t delta) noexcept {
  if (delta == 0 || kind < 0) return;
  g.stat_add(kind, delta, ((magnitude(delta) - 1) >> shift_) + 1);
}

// Units enter the group's count. The caller holds a reference (a charge's, or a shard's), so a
// concurrent last return cannot free g before the get.
void ObjStock::count_units(Group& g, int64_t units) noexcept {
  if (units > 0 && g.obj_units_.fetch_add(units, std::memory_order_acq_rel) == 0) g.get();
}

// `units` leave the object layer (uncharged) and `uncounted` leave the group's count (the same
// units, or a shard's surplus credit, or both). The count reaching zero drops the layer's
// reference, which may free a removed group: nothing touches `g` after it.
void ObjStock::return_units(Group& g, int64_t units, int64_t uncounted, bool direct) noexcept {
  if (units > 0) {
    if (direct) {
      uncharge_direct(g, units, kNoStatKind);
    } else {
      memcg::uncharge(g, units, kNoStatKind);
    }
  }
  if (uncounted > 0 && g.obj_units_.fetch_sub(uncounted, std::memory_order_acq_rel) == uncounted)
    g.put();
}

// Parks sub-unit leftovers; whole units that accumulate in the pool go back at once.
//
// One exchange both publishes the bytes and takes out the whole units they complete, and it is
// the last access to `g` unless it took units. A free holds no reference: once its bytes are in
// the pool, another thread can take them, return their units and drop the group's last
// reference, so nothing may touch the pool after publishing (a fetch_add followed by a CAS did).
// Units taken out by the exchange stay in the group's count until return_units() gives them
// back, which keeps `g` alive until then.
void ObjStock::pool_add(Group& g, int64_t bytes, bool direct) noexcept {
  if (bytes <= 0) return;
  int64_t v = g.obj_pool_bytes_.load(std::memory_order_relaxed);
  int64_t units;
  // acq_rel on success: pairs with the exchange of put_bytes() that picks the pool up.
  do {
    units = (v + bytes) >> shift_;
  } while (!g.obj_pool_bytes_.compare_exchange_weak(v, v + bytes - (units << shift_),
                                                    std::memory_order_acq_rel,
                                                    std::memory_order_relaxed));
  if (units > 0) return_units(g, units, units, direct);
}

void ObjStock::give_back(const Taken& t, bool direct) noexcept {
  if (t.owner == nullptr) return;
  Group& g = *group_of(t.owner);
  flush_stat(g, kind_of(t.owner), t.pending);
  const int64_t units = t.bytes >> shift_;
  return_units(g, units, units + t.credit, direct);
  pool_add(g, t.bytes & (unit_ - 1), direct);  // pool_add may put one of the group's units;
  g.put();                                     // the slot's reference is still held here
}

// ---- slow paths ---------------------------------------------------------------------------------

// The slow paths may allocate (reclaim, statistics, notifications): the global operator new
// hook must not charge those allocations while it is charging (HookBypass). The hits allocate
// nothing, so the hook's hot path sets no bypass of its own.
ChargeStatus ObjStock::charge_slow(Group& g, uint64_t size, uint32_t flags, int kind) noexcept {
  if (g.is_root() || size == 0) return ChargeStatus::kOk;
  internal::HookBypass bypass;
  // An invalid kind is never installed in a reserve, so a hit never sees one.
  kind = checked_kind(kind);
  // Sizes no allocator can serve; also keeps every sum below in range.
  if (size > kMaxBytes) return ChargeStatus::kNoMem;
  const auto s = static_cast<int64_t>(size);
  const bool cached = static_cast<unsigned>(kind) < static_cast<unsigned>(kMaxKinds);
  const void* const owner = cached ? tag(g, kind) : nullptr;

  int64_t have = 0;  // reserve bytes taken towards s
  const int idx = cached ? local_shard() : -1;
  if (idx >= 0 && try_lock(idx)) {
    Shard& sh = shards_[idx];
    if (sh.owner.load(std::memory_order_relaxed) == owner) {
      const int64_t r = sh.bytes.load(std::memory_order_relaxed);
      if (r >= s) {  // a hit that the fast path could not take (busy, aborted, no rseq)
        sh.bytes.store(r - s, std::memory_order_relaxed);
        unlock(idx);
        return ChargeStatus::kOk;
      }
      // Take the whole reserve; it leaves as non-live bytes (reported moves with it).
      have = r;
      sh.bytes.store(0, std::memory_order_relaxed);
      sh.reported -= r;
    }
    unlock(idx);
  } else {
    if (idx >= 0) bump(shards_[idx].stats.bypasses);
  }

  const int64_t need = s - have;
  const int64_t units = ((need - 1) >> shift_) + 1;
  const ChargeStatus st = memcg::try_charge(g, units, flags, kNoStatKind);
  if (st == ChargeStatus::kNoMem) {
    put_bytes(g, kind, have, 0, 0, true);
    return st;
  }
  if (idx >= 0) bump(shards_[idx].stats.refills);  // approximate: the shard is not held
  put_bytes(g, kind, (units << shift_) - need, s, units, true);
  return st;
}

void ObjStock::uncharge_slow(Group& g, uint64_t size, int kind) noexcept {
  // A size no charge could have had (kMaxBytes) is ignored: it would not fit the signed sums.
  if (g.is_root() || size == 0 || size > kMaxBytes) return;
  internal::HookBypass bypass;
  kind = checked_kind(kind);  // as its charge did
  const auto s = static_cast<int64_t>(size);
  put_bytes(g, kind, s, -s, 0, false);
}

// Adds `add` bytes to the local reserve of (g, kind) and `live` to the kind's byte statistic,
// installing the reserve (and switching away from another owner) when needed. `units_in`: units
// the caller just charged for the object layer, to be counted. `referenced`: the caller holds a
// reference to g (a charge); a free holds none, and once its bytes are in the reserve a drain on
// another CPU may give the reserve and the shard's credit back at any moment, so the work left
// after the word is released keeps some of the group's count (`held`) until it is done.
void ObjStock::put_bytes(Group& g, int kind, int64_t add, int64_t live, int64_t units_in,
                         bool referenced) noexcept {
  const bool cached = static_cast<unsigned>(kind) < static_cast<unsigned>(kMaxKinds);
  const int idx = cached ? local_shard() : -1;
  if (idx < 0 || !try_lock(idx)) {
    // No reserve to use: the count and the statistic directly, the bytes to the pool.
    if (idx >= 0) bump(shards_[idx].stats.bypasses);
    count_units(g, units_in);
    flush_stat(g, kind, live);
    pool_add(g, add, false);
    return;
  }
  Shard& sh = shards_[idx];
  const void* const owner = tag(g, kind);
  Taken old;
  int64_t r;
  int64_t reported;
  int64_t credit = 0;
  if (sh.owner.load(std::memory_order_relaxed) == owner) {
    r = sh.bytes.load(std::memory_order_relaxed);
    reported = sh.reported;
    credit = sh.credit;
  } else if (!g.stock_cacheable()) {
    // A removed group is never installed (as in the unit stock): its reserve was drained by
    // Controller::remove, and a free after that must not cache it again, or the reserve would
    // keep the group dying (and a unit charged) until something drained this CPU. Its bytes go
    // to the group's pool, which returns each unit as it completes. seq_cst: pairs with the
    // store in Controller::remove and the drain's read of the word.
    unlock(idx);
    count_units(g, units_in);
    flush_stat(g, kind, live);
    pool_add(g, add, false);
    return;
  } else {
    old = take(sh);
    g.get();  // the slot's reference
    // Whatever another shard parked for this group is picked up here.
    r = g.obj_pool_bytes_.load(std::memory_order_relaxed) != 0
            ? g.obj_pool_bytes_.exchange(0, std::memory_order_acq_rel)
            : 0;
    reported = r;
    sh.owner.store(owner, std::memory_order_relaxed);
    if (old.owner != nullptr) bump(sh.stats.switches);
  }
  r += add;
  reported += add + live;
  int64_t units_out = 0;
  if (r > unit_) {
    units_out = r >> shift_;
    r -= units_out << shift_;
    reported -= units_out << shift_;
    bump(sh.stats.returns);
  }
  int64_t flush = 0;
  if (magnitude(reported - r) > unit_) {
    flush = reported - r;
    reported = r;
    bump(sh.stats.stat_flushes);
  }
  // The count covers units before their bytes are published: a refill short of credit counts
  // them (and a fresh credit) here, under the word.
  credit -= units_in;
  if (credit < 0) {
    count_units(g, kCredit - credit);
    credit = kCredit;
  }
  // Returned units go to this CPU's unit stock under the word when it takes them with a hit (no
  // callback possible there), else after the word is released. Units uncharged join this
  // shard's credit. A free keeps units that are still to be uncharged counted until then, or,
  // with only a statistic to fold, holds one unit of the credit meanwhile.
  const bool uncharged =
      units_out > 0 && g.charge_stock()->refill_hit(&g, units_out, kNoStatKind);
  int64_t held = 0;
  if (!referenced && units_out > 0 && !uncharged) {
    held = units_out;
  } else {
    credit += units_out;
    if (!referenced && flush != 0) {
      if (credit > 0) {
        --credit;
      } else {
        count_units(g, 1);
      }
      held = 1;
    }
  }
  int64_t uncounted = 0;
  if (credit > 2 * kCredit) {
    uncounted = credit - kCredit;
    credit = kCredit;
  }
  sh.bytes.store(r, std::memory_order_relaxed);
  sh.reported = reported;
  sh.credit = credit;
  unlock(idx);

  // g is alive here through the caller's reference or the units held; the surplus leaving the
  // count cannot be its last unit while units are held, and is the last touch of g otherwise.
  flush_stat(g, kind, flush);
  if (units_out > 0 && !uncharged) memcg::uncharge(g, units_out, kNoStatKind);
  return_units(g, 0, uncounted, false);
  if (held > 0) release_held(g, kind, held);
  give_back(old, false);
}

// Gives `held` units of g's count to this CPU's shard as credit when it still caches (g, kind),
// else back to the group's count (which may drop the object layer's reference: nothing touches
// g after that).
void ObjStock::release_held(Group& g, int kind, int64_t held) noexcept {
  const int idx = local_shard();
  if (idx >= 0 && try_lock(idx)) {
    Shard& sh = shards_[idx];
    if (sh.owner.load(std::memory_order_relaxed) == tag(g, kind)) {
      int64_t credit = sh.credit + held;
      int64_t uncounted = 0;
      if (credit > 2 * kCredit) {
        uncounted = credit - kCredit;
        credit = kCredit;
      }
      sh.credit = credit;
      unlock(idx);
      // The shard keeps kCredit, but a drain may give that back before this runs: it may be
      // the last of the count, and nothing here touches g after it.
      return_units(g, 0, uncounted, false);
      return;
    }
    unlock(idx);
  }
  return_units(g, 0, held, false);
}

// ---- drains -----------------------------------------------------------------------------------

template <typename Match>
void ObjStock::drain_matching(Match match) noexcept {
  for (int idx = 0; idx < nr_shards_; ++idx) {
    Shard& s = shards_[idx];
    // Unlocked pre-check, as in Stock: an empty shard needs neither the word nor a fence. The
    // word is read first, seq_cst: a free word read from an install's unlock makes that
    // install's owner visible, and otherwise the install takes the word later in the seq_cst
    // order and sees the group offline (Controller::remove's store before its drain).
    const bool busy = s.disabled.load(std::memory_order_seq_cst) != 0;
    if (!busy && s.owner.load(std::memory_order_acquire) == nullptr) continue;
    lock_wait(idx);
    Taken t;
    const void* owner = s.owner.load(std::memory_order_relaxed);
    // The slot's reference keeps the owner valid while the word is held.
    if (owner != nullptr && match(group_of(owner))) {
      make_exclusive(idx);
      t = take(s);
      bump(s.stats.drains);
    }
    unlock(idx);
    give_back(t, true);
  }
}

void ObjStock::drain_cpu_local() noexcept {
  const int idx = local_shard();
  if (idx < 0) return;
  lock_wait(idx);
  make_exclusive(idx);
  const Taken t = take(shards_[idx]);
  unlock(idx);
  give_back(t, true);
}

void ObjStock::drain_all(const Group* root) noexcept {
  if (root == nullptr) {
    drain_matching([](const Group*) { return true; });
  } else {
    drain_matching([root](const Group* g) { return g->is_descendant_of(*root); });
  }
}

void ObjStock::drain_owner(const Group* group) noexcept {
  drain_matching([group](const Group* g) { return g == group; });
}

void ObjStock::fold_stats() noexcept {
  for (int idx = 0; idx < nr_shards_; ++idx) {
    Shard& s = shards_[idx];
    // Unlocked pre-check, as in drain_matching.
    if (s.owner.load(std::memory_order_relaxed) == nullptr) continue;
    lock_wait(idx);
    make_exclusive(idx);  // `bytes` is read: wait out hits that read the word before
    const void* owner = s.owner.load(std::memory_order_relaxed);
    int64_t pending = 0;
    if (owner != nullptr) {
      const int64_t r = s.bytes.load(std::memory_order_relaxed);
      pending = s.reported - r;
      s.reported = r;
      // The slot's reference keeps the group valid under the word; this one until the fold
      // below is done (a drain may take the slot as soon as the word is released).
      if (pending != 0) group_of(owner)->get();
    }
    unlock(idx);
    if (pending != 0) {
      Group& g = *group_of(owner);
      flush_stat(g, kind_of(owner), pending);
      bump(s.stats.stat_flushes);
      g.put();
    }
  }
}

int64_t ObjStock::stocked(const Group* group) const noexcept {
  int64_t sum = 0;
  for (int idx = 0; idx < nr_shards_; ++idx) {
    const Shard& s = shards_[idx];
    if (group_of(s.owner.load(std::memory_order_relaxed)) == group)
      sum += s.bytes.load(std::memory_order_relaxed);
  }
  return sum;
}

int64_t ObjStock::pooled(const Group& group) noexcept {
  return group.obj_pool_bytes_.load(std::memory_order_relaxed);
}

ObjStock::Stats ObjStock::stats() const noexcept {
  Stats st{};
  for (int idx = 0; idx < nr_shards_; ++idx) {
    const Shard::Counters& c = shards_[idx].stats;
    st.refills += c.refills.load(std::memory_order_relaxed);
    st.switches += c.switches.load(std::memory_order_relaxed);
    st.returns += c.returns.load(std::memory_order_relaxed);
    st.bypasses += c.bypasses.load(std::memory_order_relaxed);
    st.drains += c.drains.load(std::memory_order_relaxed);
    st.stat_flushes += c.stat_flushes.load(std::memory_order_relaxed);
  }
  return st;
}

}  // namespace memcg
