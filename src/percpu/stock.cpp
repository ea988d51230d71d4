// Stock slow paths: install, evict, overflow, busy shards and drains.
//
// Every path here works on a shard only while holding its `disabled` word (Shard::disabled):
// taken with an exchange, it is a try-lock among slow paths, and in rseq mode it also makes every
// critical section on that CPU fail its compare. Before touching the units of a shard in rseq mode
// the holder calls make_exclusive(), which waits out critical sections that read the word before
// it was set (internal/rseq.hpp). Owners are written only by holders, so a holder may read them
// (and call into them: each slot holds a reference) without that wait.
//
// Units and cached statistic counts leave a shard only under the word (take(), apply(),
// fold_stats()), and are given to the owner before the word is released, so that a drain or a
// fold that returns has handed over everything it took, even what another thread took out just
// before. Only stock_put() waits until the word is released: a last put may remove the group and
// call drain_owner().

#include "memcg/percpu/internal/stock.hpp"

#include "memcg/base/internal/shard_word.hpp"

#include <sched.h>

#include <algorithm>

namespace memcg {

Stock::Stock(int nr_shards, int64_t batch, Mode mode)
    : nr_shards_(nr_shards > 0 ? nr_shards : internal::nr_cpu_ids()),
      batch_(std::clamp<int64_t>(batch, 1, kMaxBatch)),
      rseq_(MEMCG_RSEQ_CS && mode == Mode::kAuto && internal::rseq_mode() &&
            nr_shards_ >= internal::nr_cpu_ids()) {
  assert(nr_shards >= 0);
  assert(batch >= 1 && batch <= kMaxBatch);
  shards_ = std::make_unique<Shard[]>(static_cast<size_t>(nr_shards_));
  rseq_shards_ = rseq_ ? static_cast<uint32_t>(nr_shards_) : 0;
  count_span_ = 2 * batch_;
}

// ---- the general hit ------------------------------------------------------------------------

// What the inline hit (stock.hpp) did not commit: plan the change from a plain read of the slot's
// word (re-tag a slot whose count is zero, pass on a kind that is not cached), then commit it in
// a critical section that re-checks CPU, shard word, owner and the fields the plan relied on. An
// abort stored nothing and is retried on the then-current CPU; a failed check, or too many
// aborts, goes to the slow path, which decides under the shard's word.
bool Stock::hit_general(StockOwner* o, int64_t du, int kind) noexcept {
#if MEMCG_RSEQ_CS
  struct rseq* const rs = internal::rseq_area();
  for (int aborts = 0; aborts < kMaxAborts; ++aborts) {
    const auto cpu = static_cast<uint32_t>(__atomic_load_n(&rs->cpu_id, __ATOMIC_RELAXED));
    if (cpu >= rseq_shards_) return false;
    Shard& s = shards_[cpu];
    const int i = s.find(o);
    if (i < 0) return false;
    const Plan p = plan(s.word[i].load(std::memory_order_relaxed), du, kind);
    switch (internal::cs_slot_update(
        static_cast<int>(cpu), reinterpret_cast<const uint64_t*>(&s.disabled),
        reinterpret_cast<const void* const*>(&s.owner[i]), o,
        reinterpret_cast<uint64_t*>(&s.word[i]), p.add, p.mask, p.expect,
        static_cast<uint64_t>(batch_), static_cast<uint64_t>(batch_))) {
      case internal::CsResult::kOk:
        bump(du < 0 ? s.stats.hits : s.stats.refills);
        if (p.direct) {
          bump(s.stats.stat_direct);
          o->stock_stat(kind, -du);
        }
        return true;
      case internal::CsResult::kAborted:
        continue;
      case internal::CsResult::kCompareFailed:  // units or count out of range, busy shard
        return false;
    }
  }
#else
  (void)o;
  (void)du;
  (void)kind;
#endif
  return false;
}

Stock::~Stock() {
  drain_matching([](const StockOwner*) { return true; }, false);
}

// ---- shard ownership ------------------------------------------------------------------------

// The shard word protocol lives in internal/shard_word.hpp (shared with the object stock).
int Stock::local_shard() const noexcept {
  return internal::local_shard(nr_shards_, rseq_);
}

void Stock::make_exclusive(int idx) noexcept {
  internal::make_exclusive(idx, rseq_);
}

bool Stock::try_lock(int idx) noexcept {
  return internal::shard_try_lock(shards_[idx].disabled, idx, rseq_);
}

void Stock::lock_wait(int idx) noexcept {
  internal::shard_lock_wait(shards_[idx].disabled);
}

void Stock::unlock(int idx) noexcept {
  internal::shard_unlock(shards_[idx].disabled);
}

Stock::Taken Stock::take(Shard& s, int i) noexcept {
  const uint64_t w = s.word[i].load(std::memory_order_relaxed);
  Taken t{s.owner[i].load(std::memory_order_relaxed), Word::units(w), kind_of(Word::tag(w)),
          Word::count(w)};
  s.word[i].store(0, std::memory_order_relaxed);
  s.owner[i].store(nullptr, std::memory_order_release);
  return t;
}

// Under the word: hands the units and the cached count of a taken slot to its owner.
void Stock::uncharge_taken(Taken& t) noexcept {
  if (t.owner != nullptr) {
    if (t.units > 0) t.owner->stock_uncharge(t.units);
    if (t.kind != kNoKind && t.count != 0) t.owner->stock_stat(t.kind, t.count);
  }
  t.units = 0;
  t.count = 0;
}

// After the word is released: drops the slot's reference.
void Stock::give_back(const Taken& t) noexcept {
  if (t.owner == nullptr) return;
  if (t.units > 0) t.owner->stock_uncharge(t.units);
  if (t.kind != kNoKind && t.count != 0) t.owner->stock_stat(t.kind, t.count);
  t.owner->stock_put();
}

// Under the word: adds du units to slot i (the caller checked the range) and du's statistic of
// `kind` to the slot's cached count, deciding as a hit does (plan()); what cannot be cached, and
// a count that leaves [-batch, batch], is passed to `o` at once.
void Stock::apply(Shard& s, int i, StockOwner* o, int64_t du, int kind) noexcept {
  const uint64_t w = s.word[i].load(std::memory_order_relaxed);
  const Plan p = plan(w, du, kind);
  uint64_t v = w + p.add;
  if (p.direct) {
    o->stock_stat(kind, -du);
    bump(s.stats.stat_direct);
  } else if (const int64_t count = Word::count(v); count > batch_ || count < -batch_) {
    o->stock_stat(kind, count);
    v = Word::make(Word::units(v), Word::tag(v), 0);
    bump(s.stats.stat_spills);
  }
  s.word[i].store(v, std::memory_order_relaxed);
}

// ---- local slow paths -----------------------------------------------------------------------

bool Stock::consume_slow(StockOwner* o, int64_t n, int kind) noexcept {
  const int idx = local_shard();
  if (n < 1 || n > batch_ || idx < 0) {
    if (idx >= 0) bump(shards_[idx].stats.misses);
    return false;
  }
  Shard& s = shards_[idx];
  if (!try_lock(idx)) {
    bump(s.stats.misses);
    return false;
  }
  bool hit = false;
  if (const int i = s.find(o); i >= 0) {
    if (Word::units(s.word[i].load(std::memory_order_relaxed)) >= n) {
      apply(s, i, o, -n, kind);
      hit = true;
    }
  }
  bump(hit ? s.stats.hits : s.stats.misses);
  unlock(idx);
  return hit;
}

void Stock::refill_slow(StockOwner* o, int64_t n, int kind) noexcept {
  if (n <= 0) return;
  const int idx = n <= batch_ ? local_shard() : -1;
  if (idx < 0 || !try_lock(idx)) {
    o->stock_uncharge(n);  // too large, or the shard is busy: bypass the stock
    if (kind != kNoKind) o->stock_stat(kind, -n);
    return;
  }
  Shard& s = shards_[idx];
  Taken out{nullptr, 0, kNoKind, 0};
  const int found = s.find(o);
  if (found < 0 && !o->stock_cacheable()) {
    // No slot for a removed owner: straight back to the counters.
    unlock(idx);
    o->stock_uncharge(n);
    if (kind != kNoKind) o->stock_stat(kind, -n);
    return;
  }
  if (int i = found; i >= 0) {
    if (Word::units(s.word[i].load(std::memory_order_relaxed)) + n > batch_) {
      out = take(s, i);  // over the batch: the whole slot, and n, go back
      out.units += n;
      uncharge_taken(out);
      if (kind != kNoKind) o->stock_stat(kind, -n);
      bump(s.stats.overflow_drains);
    } else {
      apply(s, i, o, n, kind);
      bump(s.stats.refills);
    }
  } else {
    for (i = 0; i < kSlots; ++i) {
      if (s.owner[i].load(std::memory_order_relaxed) == nullptr) break;
    }
    if (i == kSlots) {
      // Round robin: the victim is the slot the cursor names, whatever it holds. Fair to every
      // owner and constant-time; an LRU would need a write per hit.
      i = s.cursor;
      s.cursor = static_cast<uint8_t>((i + 1) % kSlots);
      out = take(s, i);
      uncharge_taken(out);
      bump(s.stats.evictions);
    }
    o->stock_get();
    s.word[i].store(0, std::memory_order_relaxed);
    s.owner[i].store(o, std::memory_order_relaxed);
    apply(s, i, o, n, kind);
    bump(s.stats.refills);
  }
  unlock(idx);
  give_back(out);
}

// ---- drains ---------------------------------------------------------------------------------

template <typename Match>
void Stock::drain_matching(Match match, bool count_remote) noexcept {
  for (int idx = 0; idx < nr_shards_; ++idx) {
    Shard& s = shards_[idx];
    // Unlocked pre-check: an empty shard needs neither the word nor a fence. A slot installed
    // concurrently with this call may be missed; one installed before it is seen. The word is
    // read first, seq_cst: a free word read from an install's unlock makes that install's owner
    // visible below, and otherwise the install takes the word later in the seq_cst order and
    // sees whatever the caller stored (seq_cst) before this call (Controller::remove).
    const bool busy = s.disabled.load(std::memory_order_seq_cst) != 0;
    bool occupied = busy;
    for (int i = 0; i < kSlots && !occupied; ++i) {
      occupied |= s.owner[i].load(std::memory_order_acquire) != nullptr;
    }
    if (!occupied) continue;

    lock_wait(idx);
    // Owners are stable and referenced while the word is held: match them before paying for a
    // fence, which only the units need.
    bool selected[kSlots] = {};
    bool any = false;
    for (int i = 0; i < kSlots; ++i) {
      const StockOwner* owner = s.owner[i].load(std::memory_order_relaxed);
      selected[i] = owner != nullptr && match(owner);
      any |= selected[i];
    }
    Taken out[kSlots] = {};
    if (any) {
      make_exclusive(idx);
      for (int i = 0; i < kSlots; ++i) {
        if (selected[i]) {
          out[i] = take(s, i);
          uncharge_taken(out[i]);
        }
      }
      if (count_remote) bump(s.stats.remote_drains);
    }
    unlock(idx);
    for (const Taken& t : out) give_back(t);
  }
}

void Stock::drain_cpu_local() noexcept {
  const int idx = local_shard();
  if (idx < 0) return;
  Shard& s = shards_[idx];
  lock_wait(idx);
  make_exclusive(idx);
  Taken out[kSlots];
  for (int i = 0; i < kSlots; ++i) {
    out[i] = take(s, i);
    uncharge_taken(out[i]);
  }
  unlock(idx);
  for (const Taken& t : out) give_back(t);
}

void Stock::drain_all(const StockOwner* root) noexcept {
  if (root == nullptr) {
    drain_matching([](const StockOwner*) { return true; }, true);
  } else {
    drain_matching([root](const StockOwner* o) { return o->stock_is_within(root); }, true);
  }
}

void Stock::drain_owner(const StockOwner* o) noexcept {
  drain_matching([o](const StockOwner* owner) { return owner == o; }, true);
}

void Stock::fold_stats() noexcept {
  for (int idx = 0; idx < nr_shards_; ++idx) {
    Shard& s = shards_[idx];
    // Unlocked pre-check: a shard caching no count needs neither the word nor a fence. A count
    // cached concurrently may be missed; one cached before the call (and ordered before it) is
    // seen.
    bool cached = false;
    for (int i = 0; i < kSlots; ++i) {
      cached |= Word::count(s.word[i].load(std::memory_order_acquire)) != 0;
    }
    if (!cached) continue;
    lock_wait(idx);
    make_exclusive(idx);
    for (int i = 0; i < kSlots; ++i) {
      const uint64_t w = s.word[i].load(std::memory_order_relaxed);
      StockOwner* owner = s.owner[i].load(std::memory_order_relaxed);
      if (owner == nullptr || Word::count(w) == 0) continue;
      owner->stock_stat(kind_of(Word::tag(w)), Word::count(w));
      s.word[i].store(Word::make(Word::units(w), Word::tag(w), 0), std::memory_order_relaxed);
    }
    unlock(idx);
  }
}

int64_t Stock::stocked(const StockOwner* o) const noexcept {
  int64_t sum = 0;
  for (int idx = 0; idx < nr_shards_; ++idx) {
    const Shard& s = shards_[idx];
    for (int i = 0; i < kSlots; ++i) {
      if (s.owner[i].load(std::memory_order_relaxed) == o) {
        sum += Word::units(s.word[i].load(std::memory_order_relaxed));
      }
    }
  }
  return sum;
}

Stock::Stats Stock::stats() const noexcept {
  Stats st{};
  for (int idx = 0; idx < nr_shards_; ++idx) {
    const Shard& s = shards_[idx];
    st.hits += s.stats.hits.load(std::memory_order_relaxed);
    st.misses += s.stats.misses.load(std::memory_order_relaxed);
    st.refills += s.stats.refills.load(std::memory_order_relaxed);
    st.evictions += s.stats.evictions.load(std::memory_order_relaxed);
    st.overflow_drains += s.stats.overflow_drains.load(std::memory_order_relaxed);
    st.remote_drains += s.stats.remote_drains.load(std::memory_order_relaxed);
    st.stat_spills += s.stats.stat_spills.load(std::memory_order_relaxed);
    st.stat_direct += s.stats.stat_direct.load(std::memory_order_relaxed);
  }
  return st;
}

}  // namespace memcg
