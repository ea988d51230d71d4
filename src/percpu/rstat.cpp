#include "memcg/percpu/internal/rstat.hpp"
#include "memcg/base/internal/lock.hpp"

#include <unistd.h>

#include <bit>
#include <cstdint>
#include <new>
#include <stdexcept>

namespace memcg {

namespace {

constexpr size_t kCacheLine = 64;

int resolve_shards(int nr_shards) {
  if (nr_shards < 0) throw std::invalid_argument("rstat: nr_shards < 0");
  if (nr_shards > 0) return nr_shards;
  const long cpus = sysconf(_SC_NPROCESSORS_CONF);
  return cpus > 0 ? static_cast<int>(cpus) : 1;
}

// batch × nr_shards, validated before it is computed so that it cannot overflow.
int64_t flush_threshold_for(int64_t batch, int nr_shards) {
  if (batch < 1) throw std::invalid_argument("rstat: batch < 1");
  if (batch > INT64_MAX / nr_shards) throw std::invalid_argument("rstat: batch too large");
  return batch * nr_shards;
}

int64_t clamp_non_negative(int64_t v) noexcept {
  return v < 0 ? 0 : v;
}

}  // namespace

// ---- RstatNode ----

RstatNode::RstatNode(Rstat& rs, RstatNode* parent) : rs_(rs), parent_(parent) {
  const size_t nr_items = rs.nr_items_;
  const size_t nr_shards = static_cast<size_t>(rs.nr_shards_);
  shards_ =
      static_cast<std::byte*>(::operator new (nr_shards* rs.stride_, std::align_val_t{kCacheLine}));
  for (size_t s = 0; s < nr_shards; ++s) {
    std::byte* block = shards_ + s * rs.stride_;
    auto* h = new (block) Rstat::ShardHeader;
    h->children = this;  // self-terminated: no child has pending deltas
    auto* counters = reinterpret_cast<std::atomic<int64_t>*>(block + sizeof(Rstat::ShardHeader));
    for (size_t i = 0; i < nr_items; ++i) new (&counters[i]) std::atomic<int64_t>(0);
  }
  prev_ = std::make_unique<int64_t[]>(nr_shards * nr_items);
  pending_ = std::make_unique<int64_t[]>(nr_items);
  totals_ = std::make_unique<std::atomic<int64_t>[]>(2 * nr_items);
  if (parent_ == nullptr) {
    RstatNode* expected = nullptr;
    const bool first_root = rs.root_.compare_exchange_strong(expected, this);
    assert(first_root && "one root per Rstat");
    (void)first_root;
  } else {
    assert(!parent_->detached_);
    parent_->nr_children_.fetch_add(1, std::memory_order_relaxed);
  }
}

RstatNode::~RstatNode() {
  assert(nr_children_.load(std::memory_order_relaxed) == 0);
  if (parent_ == nullptr) {
    rs_.root_.store(nullptr, std::memory_order_relaxed);
  } else {
    assert(detached_ && "REQUIRES: Rstat::detach() before destruction");
  }
  // Headers and counters are trivially destructible.
  ::operator delete (shards_, std::align_val_t{kCacheLine});
}

int64_t RstatNode::total(int item) const noexcept {
  if (static_cast<size_t>(static_cast<unsigned>(item)) >= rs_.nr_items_) return 0;
  return clamp_non_negative(totals_[item].load(std::memory_order_relaxed));
}

int64_t RstatNode::local(int item) const noexcept {
  if (static_cast<size_t>(static_cast<unsigned>(item)) >= rs_.nr_items_) return 0;
  return clamp_non_negative(totals_[rs_.nr_items_ + item].load(std::memory_order_relaxed));
}

// ---- Rstat: construction and readers ----

Rstat::Rstat(size_t nr_items, Options options)
    : nr_items_(nr_items),
      nr_shards_(resolve_shards(options.nr_shards)),
      cs_mode_(MEMCG_RSEQ_CS && internal::rseq_mode() && nr_shards_ >= internal::nr_cpu_ids()),
      options_(options),
      stride_((sizeof(ShardHeader) + nr_items * sizeof(int64_t) + kCacheLine - 1) / kCacheLine *
              kCacheLine),
      flush_threshold_(flush_threshold_for(options.batch, nr_shards_)),
      nr_mask_words_((static_cast<size_t>(nr_shards_) + 63) / 64) {
  shard_locks_ = std::make_unique<ShardLock[]>(static_cast<size_t>(nr_shards_));
  nonempty_ = std::make_unique<std::atomic<uint64_t>[]>(nr_mask_words_);
}

Rstat::~Rstat() {
  assert(root_.load(std::memory_order_relaxed) == nullptr);
}

int64_t Rstat::raw(const RstatNode& n, int shard, int item) const noexcept {
  return counters_of(n, shard)[item].load(std::memory_order_relaxed);
}

int64_t Rstat::recorded_magnitude(const RstatNode& n) const noexcept {
  int64_t sum = n.updates_total_.load(std::memory_order_relaxed);
  for (int s = 0; s < nr_shards_; ++s) sum += header(n, s).tally.load(std::memory_order_relaxed);
  return sum;
}

Rstat::Counters Rstat::counters() const noexcept {
  constexpr auto kRelaxed = std::memory_order_relaxed;
  return {counters_.shard_lock_acquisitions.load(kRelaxed),
          counters_.shards_skipped_by_mask.load(kRelaxed),
          counters_.shards_skipped_by_speculative_check.load(kRelaxed),
          counters_.nodes_flushed.load(kRelaxed), counters_.flushes.load(kRelaxed)};
}

// ---- update side, slow path ----

void Rstat::set_nonempty(int shard) noexcept {
  nonempty_[shard / 64].fetch_or(uint64_t{1} << (shard % 64), std::memory_order_relaxed);
}

void Rstat::clear_nonempty(int shard) noexcept {
  nonempty_[shard / 64].fetch_and(~(uint64_t{1} << (shard % 64)), std::memory_order_relaxed);
}

// Links n and every ancestor not yet on the shard's tree, bottom-up, stopping at the first one
// already there. Pushing at the head keeps it O(depth). The nodes are made visible as "on the
// tree" one by one while the lock is held; an unlocked reader that sees one early at worst skips
// its own link step, and the lock orders it before any flush of this shard.
void Rstat::link_updated(RstatNode& n, int shard) noexcept {
  internal::LockGuard lock(shard_locks_[shard].mu);
  for (RstatNode* g = &n;;) {
    ShardHeader& h = header(*g, shard);
    if (h.next.load(std::memory_order_relaxed) != nullptr) return;  // linked meanwhile
    if (g->parent_ == nullptr) {
      h.next.store(g, std::memory_order_seq_cst);  // the root on the tree points at itself
      if (options_.nonempty_mask) set_nonempty(shard);
      return;
    }
    ShardHeader& ph = header(*g->parent_, shard);
    h.next.store(ph.children, std::memory_order_seq_cst);
    ph.children = g;
    g = g->parent_;
  }
}

// ---- flush side ----

void Rstat::flush(RstatNode& r) {
  assert(!r.detached_);
  counters_.flushes.fetch_add(1, std::memory_order_relaxed);
  if (!options_.nonempty_mask) {
    for (int s = 0; s < nr_shards_; ++s) flush_shard_checked(r, s);
    return;
  }
  // Visit only the shards whose bit is set; a clean shard costs one bit of a shared word. A bit
  // set after this snapshot belongs to an update that the next flush will see.
  uint64_t skipped = 0;
  for (size_t w = 0; w < nr_mask_words_; ++w) {
    uint64_t bits = nonempty_[w].load(std::memory_order_acquire);
    const int base = static_cast<int>(w * 64);
    const int in_word = nr_shards_ - base < 64 ? nr_shards_ - base : 64;
    skipped += static_cast<uint64_t>(in_word - std::popcount(bits));
    while (bits != 0) {
      flush_shard_checked(r, base + std::countr_zero(bits));
      bits &= bits - 1;
    }
  }
  if (skipped != 0) counters_.shards_skipped_by_mask.fetch_add(skipped, std::memory_order_relaxed);
}

void Rstat::flush_shard_checked(RstatNode& r, int shard) {
  // Speculative empty test: r off this shard's tree means nothing of r's subtree is pending
  // here. Racy by design: a node linked right after the test is left for the next flush.
  if (options_.speculative_check &&
      header(r, shard).next.load(std::memory_order_relaxed) == nullptr) {
    counters_.shards_skipped_by_speculative_check.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  flush_shard(r, shard);
}

void Rstat::flush_shard(RstatNode& r, int shard) {
  // The flush mutex is taken per shard, so updaters' links and other flushes interleave with a
  // long flush instead of waiting for all shards.
  internal::LockGuard flush_lock(flush_mutex_);
  RstatNode* list;
  {
    internal::LockGuard shard_lock(shard_locks_[shard].mu);
    counters_.shard_lock_acquisitions.fetch_add(1, std::memory_order_relaxed);
    list = build_flush_list(r, shard);
    if (list != nullptr && r.parent_ == nullptr && options_.nonempty_mask) clear_nonempty(shard);
  }
  // Updates on this CPU store without a barrier (add_on_current_cpu): fence the CPU so that its
  // committed adds are visible below and its later on-tree tests see the unlink.
  // Shards past the CPUs exist only for update_on() (tests): no critical section writes them.
  if (cs_mode_ && list != nullptr && shard < internal::nr_cpu_ids()) internal::fence_cpu(shard);
  // The nodes are off the tree now; an update from here on links them again, and its delta is
  // either seen by fold() below or left for that next flush.
  uint64_t folded = 0;
  for (RstatNode* n = list; n != nullptr; n = n->flush_next_) {
    fold(*n, shard);
    ++folded;
  }
  if (folded != 0) counters_.nodes_flushed.fetch_add(folded, std::memory_order_relaxed);
}

// Takes r and everything under it off the shard's tree and returns them as a list in which every
// child precedes its parent: nodes are visited parent first and pushed at the front. Returns
// nullptr when r is not on the tree.
RstatNode* Rstat::build_flush_list(RstatNode& r, int shard) {
  ShardHeader& rh = header(r, shard);
  RstatNode* const r_next = rh.next.load(std::memory_order_relaxed);
  if (r_next == nullptr) return nullptr;

  // Unlink r from its parent's list (singly linked: find the predecessor). The parent stays on
  // the tree, so the contribution r pushes into its pending input is folded at its next flush.
  if (r.parent_ != nullptr) {
    ShardHeader& ph = header(*r.parent_, shard);
    if (ph.children == &r) {
      ph.children = r_next;
    } else {
      RstatNode* s = ph.children;
      for (;;) {
        ShardHeader& sh = header(*s, shard);
        RstatNode* s_next = sh.next.load(std::memory_order_relaxed);
        assert(s_next != r.parent_ && "r on the tree but not in its parent's list");
        if (s_next == &r) {
          sh.next.store(r_next, std::memory_order_relaxed);  // non-null to non-null
          break;
        }
        s = s_next;
      }
    }
  }
  rh.next.store(nullptr, std::memory_order_seq_cst);

  RstatNode* head = nullptr;
  flush_stack_.clear();
  flush_stack_.push_back(&r);
  while (!flush_stack_.empty()) {
    RstatNode* n = flush_stack_.back();
    flush_stack_.pop_back();
    n->flush_next_ = head;
    head = n;
    ShardHeader& nh = header(*n, shard);
    for (RstatNode* c = nh.children; c != n;) {
      ShardHeader& ch = header(*c, shard);
      RstatNode* c_next = ch.next.load(std::memory_order_relaxed);
      ch.next.store(nullptr, std::memory_order_seq_cst);  // leaves the tree before fold() reads
      flush_stack_.push_back(c);
      c = c_next;
    }
    nh.children = n;
  }
  return head;
}

// The per-node callback, under the flush mutex: fold n's new deltas on this shard and the input
// its children pushed up, and push both to the parent.
void Rstat::fold(RstatNode& n, int shard) noexcept {
  const std::atomic<int64_t>* raw = counters_of(n, shard);
  int64_t* prev = n.prev_.get() + static_cast<size_t>(shard) * nr_items_;
  std::atomic<int64_t>* total = n.totals_.get();
  std::atomic<int64_t>* local = total + nr_items_;
  for (size_t i = 0; i < nr_items_; ++i) {
    // seq_cst: pairs with add_on_shard and the unlink in build_flush_list.
    const int64_t now = raw[i].load(std::memory_order_seq_cst);
    const int64_t k = now - prev[i];
    const int64_t d = n.pending_[i];
    if (k == 0 && d == 0) continue;
    prev[i] = now;
    n.pending_[i] = 0;
    // Only flushes write totals, under the flush mutex; readers load them without it.
    if (k != 0)
      local[i].store(local[i].load(std::memory_order_relaxed) + k, std::memory_order_relaxed);
    total[i].store(total[i].load(std::memory_order_relaxed) + d + k, std::memory_order_relaxed);
    if (n.parent_ != nullptr) n.parent_->pending_[i] += d + k;
  }
  // Write the shared lines only when there is something to clear.
  std::atomic<int64_t>& tally = header(n, shard).tally;
  if (tally.load(std::memory_order_relaxed) != 0) tally.store(0, std::memory_order_relaxed);
  if (n.updates_total_.load(std::memory_order_relaxed) != 0) {
    n.updates_total_.store(0, std::memory_order_relaxed);
  }
}

bool Rstat::claim_period(uint64_t now_ns) noexcept {
  if (root_.load(std::memory_order_acquire) == nullptr) return false;
  uint64_t last = last_periodic_ns_.load(std::memory_order_relaxed);
  if (now_ns < last || now_ns - last < options_.periodic_ns) return false;
  // One caller per period wins the exchange.
  return last_periodic_ns_.compare_exchange_strong(last, now_ns, std::memory_order_relaxed);
}

bool Rstat::periodic(uint64_t now_ns) {
  if (!claim_period(now_ns)) return false;
  flush(*root_.load(std::memory_order_acquire));
  return true;
}

void Rstat::detach(RstatNode& n) {
  assert(n.parent_ != nullptr && "the root cannot be detached");
  assert(!n.detached_);
  assert(n.nr_children_.load(std::memory_order_relaxed) == 0);
  // The deltas of n are on the trees of the shards that received them (see add_on_shard), and
  // whatever n's children pushed into its pending input arrived while n was on that shard's tree:
  // a flush of n folds all of it into n's parent and leaves n on no tree. Every shard is visited
  // under its lock, skipping neither by the mask nor by the unlocked test: both may miss a link
  // made just before, which an ordinary flush leaves for the next one, but n is about to be freed
  // and must be on no tree at all.
  counters_.flushes.fetch_add(1, std::memory_order_relaxed);
  for (int s = 0; s < nr_shards_; ++s) flush_shard(n, s);
  internal::LockGuard flush_lock(flush_mutex_);
#ifndef NDEBUG
  for (size_t i = 0; i < nr_items_; ++i) assert(n.pending_[i] == 0);
  for (int s = 0; s < nr_shards_; ++s) {
    assert(header(n, s).next.load(std::memory_order_relaxed) == nullptr);
  }
#endif
  n.detached_ = true;
  n.parent_->nr_children_.fetch_sub(1, std::memory_order_relaxed);
}

}  // namespace memcg
