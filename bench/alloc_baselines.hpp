// Baselines for the allocator benchmarks (alloc_bench, hook_bench).
//
//  - BatchTracker: memory accounting in the style of ClickHouse's MemoryTracker. Each thread
//    accumulates its allocation deltas in a thread-local counter and touches the shared total
//    only when the local amount passes ±kBatch (4 MiB); the limit is checked only then. Cheap
//    (a thread-local add and compare per call), but the shared total is off by up to kBatch per
//    thread, and the number of threads is unbounded, so the slack is too: 100 threads can hide
//    400 MiB. memcg's bound is per CPU instead: one unit in the object reserve plus the unit
//    stock's 7 x 64 units per CPU, whatever the number of threads.
//  - MallocAllocator / TrackedAllocator: STL allocators that call malloc/free directly, so that
//    a program linked with the global operator new hook can still measure a container without it
//    (and with the tracker instead).
//  - A map-of-strings workload shared by both benchmarks.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory_resource>
#include <new>
#include <string>

namespace memcg::bench {

class BatchTracker {
 public:
  static constexpr int64_t kBatch = 4 << 20;

  explicit BatchTracker(int64_t limit = INT64_MAX) : limit_(limit) {}

  void alloc(int64_t bytes) {
    int64_t& local = tl_untracked;
    local += bytes;
    if (local > kBatch) [[unlikely]]
      flush_alloc();
  }
  void free(int64_t bytes) noexcept {
    int64_t& local = tl_untracked;
    local -= bytes;
    if (local < -kBatch) [[unlikely]]
      flush_free();
  }
  int64_t total() const noexcept { return total_.load(std::memory_order_relaxed); }

 private:
  [[gnu::noinline]] void flush_alloc() {
    const int64_t v = total_.fetch_add(tl_untracked, std::memory_order_relaxed) + tl_untracked;
    tl_untracked = 0;
    if (v > limit_) throw std::bad_alloc();
  }
  [[gnu::noinline]] void flush_free() noexcept {
    total_.fetch_add(tl_untracked, std::memory_order_relaxed);
    tl_untracked = 0;
  }
  static inline thread_local int64_t tl_untracked = 0;
  alignas(64) std::atomic<int64_t> total_{0};
  int64_t limit_;
};

// A pmr resource that tracks with a BatchTracker and forwards to an upstream.
class TrackedResource : public std::pmr::memory_resource {
 public:
  TrackedResource(BatchTracker& t, std::pmr::memory_resource* up) : t_(t), up_(up) {}

 private:
  void* do_allocate(size_t n, size_t a) override {
    t_.alloc(static_cast<int64_t>(n));
    return up_->allocate(n, a);
  }
  void do_deallocate(void* p, size_t n, size_t a) override {
    up_->deallocate(p, n, a);
    t_.free(static_cast<int64_t>(n));
  }
  bool do_is_equal(const std::pmr::memory_resource& o) const noexcept override {
    return this == &o;
  }
  BatchTracker& t_;
  std::pmr::memory_resource* up_;
};

template <typename T>
struct MallocAllocator {
  using value_type = T;
  MallocAllocator() = default;
  template <typename U>
  MallocAllocator(const MallocAllocator<U>&) noexcept {}
  T* allocate(size_t n) {
    if (void* p = std::malloc(n * sizeof(T))) return static_cast<T*>(p);
    throw std::bad_alloc();
  }
  void deallocate(T* p, size_t) noexcept { std::free(p); }
  template <typename U>
  bool operator==(const MallocAllocator<U>&) const noexcept {
    return true;
  }
};

// The global operator new/delete (the hook where it is linked), as std::allocator uses them, but
// as a distinct template, so that containers instantiate exactly like those of the allocators
// above (std::string's members are precompiled in libstdc++ and would not be comparable).
template <typename T>
struct NewAllocator {
  using value_type = T;
  NewAllocator() = default;
  template <typename U>
  NewAllocator(const NewAllocator<U>&) noexcept {}
  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T))); }
  void deallocate(T* p, size_t n) noexcept { ::operator delete(p, n * sizeof(T)); }
  template <typename U>
  bool operator==(const NewAllocator<U>&) const noexcept {
    return true;
  }
};

// malloc/free with 16 bytes in front of each block and nothing else: the memory-layout part of
// the hook's cost (larger size classes), without its accounting.
template <typename T>
struct Header16Allocator {
  using value_type = T;
  Header16Allocator() = default;
  template <typename U>
  Header16Allocator(const Header16Allocator<U>&) noexcept {}
  T* allocate(size_t n) {
    if (char* p = static_cast<char*>(std::malloc(n * sizeof(T) + 16)))
      return reinterpret_cast<T*>(p + 16);
    throw std::bad_alloc();
  }
  void deallocate(T* p, size_t) noexcept { std::free(reinterpret_cast<char*>(p) - 16); }
  template <typename U>
  bool operator==(const Header16Allocator<U>&) const noexcept {
    return true;
  }
};

inline BatchTracker& global_tracker() {
  static BatchTracker t;
  return t;
}

// malloc/free with the tracker (the way a MemoryTracker hooks the allocator).
template <typename T>
struct TrackedAllocator {
  using value_type = T;
  TrackedAllocator() = default;
  template <typename U>
  TrackedAllocator(const TrackedAllocator<U>&) noexcept {}
  T* allocate(size_t n) {
    global_tracker().alloc(static_cast<int64_t>(n * sizeof(T)));
    if (void* p = std::malloc(n * sizeof(T))) return static_cast<T*>(p);
    throw std::bad_alloc();
  }
  void deallocate(T* p, size_t n) noexcept {
    std::free(p);
    global_tracker().free(static_cast<int64_t>(n * sizeof(T)));
  }
  template <typename U>
  bool operator==(const TrackedAllocator<U>&) const noexcept {
    return true;
  }
};

// Builds and destroys a map of `n` string pairs (keys 24..40 bytes, values 32..96 bytes: all
// beyond the small-string buffer, so three allocations per entry). Returns a checksum.
template <template <typename> class Alloc>
size_t map_of_strings(int n, unsigned seed) {
  using Str = std::basic_string<char, std::char_traits<char>, Alloc<char>>;
  using Map = std::map<Str, Str, std::less<Str>, Alloc<std::pair<const Str, Str>>>;
  Map m;
  unsigned x = seed;
  for (int i = 0; i < n; ++i) {
    x = x * 1103515245u + 12345u;
    Str key(24 + x % 17, 'k');
    key[0] = static_cast<char>('a' + i % 26);
    key[1] = static_cast<char>('a' + (i / 26) % 26);
    key[2] = static_cast<char>('a' + (i / 676) % 26);
    m.emplace(std::move(key), Str(32 + (x >> 8) % 65, 'v'));
  }
  return m.size();
}

}  // namespace memcg::bench
