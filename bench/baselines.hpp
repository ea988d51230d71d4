// Baseline hierarchical counters that the page-counter benchmarks compare PageCounter against.
// Both offer the same three calls as PageCounter's hot path (try_charge, charge-free uncharge,
// usage) and keep the same bookkeeping on a charge (usage, limit check, watermark), so that the
// difference measured is the synchronisation and the layout, not the amount of work.
//
//  - MutexTree: one std::mutex per tree; a charge takes it and walks every level under it. The
//    obvious correct design: no speculative adds, no transient overshoot, but every charge of
//    every group serialises on one lock.
//  - PackedAtomicCounter: one atomic add per level, the same speculative algorithm as
//    PageCounter, but every field of a level in one unaligned struct and the levels allocated
//    next to each other, so writers of usage share cache lines with readers of the limits and
//    with the neighbouring levels.
//
// Neither tracks protected usage; the main comparison runs without min/low configured, where
// PageCounter skips that work too.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace memcg::bench {

class MutexTree {
 public:
  struct Node {
    MutexTree* tree;
    Node* parent;
    int64_t usage = 0;
    int64_t max;
    int64_t watermark = 0;

    // Charges every level, or none if one would pass its max (returned).
    Node* try_charge(int64_t n) {
      std::lock_guard lock(tree->mutex_);
      for (Node* c = this; c != nullptr; c = c->parent)
        if (c->usage + n > c->max) return c;
      for (Node* c = this; c != nullptr; c = c->parent) {
        c->usage += n;
        if (c->usage > c->watermark) c->watermark = c->usage;
      }
      return nullptr;
    }
    void uncharge(int64_t n) {
      std::lock_guard lock(tree->mutex_);
      for (Node* c = this; c != nullptr; c = c->parent) c->usage -= n;
    }
    int64_t read_usage() {
      std::lock_guard lock(tree->mutex_);
      return usage;
    }
  };

  // A chain of `depth` levels; leaf() is the deepest.
  MutexTree(int depth, int64_t max) {
    Node* parent = nullptr;
    for (int i = 0; i < depth; ++i) {
      nodes_.push_back(std::make_unique<Node>(Node{this, parent, 0, max, 0}));
      parent = nodes_.back().get();
    }
  }
  Node* leaf() { return nodes_.back().get(); }

 private:
  std::mutex mutex_;
  std::vector<std::unique_ptr<Node>> nodes_;
};

// Every field of a level side by side, with no alignment: 64 bytes a level, so a level and its
// parent often share a line and usage always shares one with max and parent.
struct PackedAtomicCounter {
  std::atomic<int64_t> usage{0};
  std::atomic<int64_t> max;
  std::atomic<int64_t> high;
  std::atomic<int64_t> min{0};
  std::atomic<int64_t> low{0};
  std::atomic<int64_t> watermark{0};
  std::atomic<uint64_t> failcnt{0};
  PackedAtomicCounter* parent;

  PackedAtomicCounter(PackedAtomicCounter* p, int64_t limit) : max(limit), high(limit), parent(p) {}

  PackedAtomicCounter* try_charge(int64_t n) {
    for (PackedAtomicCounter* c = this; c != nullptr; c = c->parent) {
      const int64_t u = c->usage.fetch_add(n, std::memory_order_seq_cst) + n;
      if (u > c->max.load(std::memory_order_seq_cst)) {
        c->usage.fetch_sub(n, std::memory_order_relaxed);
        c->failcnt.fetch_add(1, std::memory_order_relaxed);
        for (PackedAtomicCounter* d = this; d != c; d = d->parent)
          d->usage.fetch_sub(n, std::memory_order_relaxed);
        return c;
      }
      if (u > c->watermark.load(std::memory_order_relaxed))
        c->watermark.store(u, std::memory_order_relaxed);
    }
    return nullptr;
  }
  void uncharge(int64_t n) {
    for (PackedAtomicCounter* c = this; c != nullptr; c = c->parent)
      c->usage.fetch_sub(n, std::memory_order_relaxed);
  }
};

// `depth` packed levels in one contiguous array; the last element is the leaf.
class PackedChain {
 public:
  PackedChain(int depth, int64_t max) : storage_(new Storage[depth]), depth_(depth) {
    for (int i = 0; i < depth; ++i)
      new (&storage_[i]) PackedAtomicCounter(i == 0 ? nullptr : at(i - 1), max);
  }
  ~PackedChain() {
    for (int i = 0; i < depth_; ++i) at(i)->~PackedAtomicCounter();
  }
  PackedChain(const PackedChain&) = delete;
  PackedChain& operator=(const PackedChain&) = delete;
  PackedAtomicCounter* leaf() { return at(depth_ - 1); }

 private:
  struct Storage {
    alignas(PackedAtomicCounter) unsigned char bytes[sizeof(PackedAtomicCounter)];
  };
  PackedAtomicCounter* at(int i) { return reinterpret_cast<PackedAtomicCounter*>(&storage_[i]); }
  std::unique_ptr<Storage[]> storage_;
  int depth_;
};

}  // namespace memcg::bench
