// GuardedCache: the BlockCache's RocksDB cache, wrapped so that the cache knows when the calling
// thread is inside one of RocksDB's cache calls, and so may hold a shard's mutex.
//
// RocksDB allocates under a shard's mutex (LRUHandleTable::Resize grows the handle table with
// operator new from Insert). With the global operator-new hook (memcg::hook) that allocation is
// charged to the thread's group; at the limit its reclaim reaches this cache, whose shrink
// (SetCapacity) takes every shard's mutex: the held one included, a self-deadlock. Inside a call
// of this wrapper the cache therefore defers a shrink to the end of the outermost call (the
// owner's after_call(), with no RocksDB lock held), and the call runs in a NoFailScope, so that
// what RocksDB allocates there is forced past the limit and counted rather than thrown as
// std::bad_alloc out of RocksDB, which does not expect it.
//
// Cost per call: two thread-local counters and one relaxed load.
#ifndef MEMCG_ROCKSDB_GUARDED_CACHE_HPP_
#define MEMCG_ROCKSDB_GUARDED_CACHE_HPP_

#include <rocksdb/cache.h>

#include <memory>
#include <string>
#include <vector>

#include "memcg/base/nofail.hpp"

namespace memcg::rocksdb {
class BlockCache;
}

namespace memcg::rocksdb::internal {

// Depth of this thread's GuardedCache calls.
inline thread_local int tl_cache_call_depth = 0;
inline bool in_cache_call() noexcept { return tl_cache_call_depth > 0; }

// Calls back `after(owner)` at the end of the outermost call when `pending` says so.
class GuardedCache final : public ::rocksdb::Cache {
 public:
  using After = void (*)(BlockCache* owner) noexcept;
  using Pending = bool (*)(const BlockCache* owner) noexcept;
  GuardedCache(std::shared_ptr<::rocksdb::Cache> inner,
               std::shared_ptr<::rocksdb::MemoryAllocator> allocator, BlockCache* owner,
               Pending pending, After after)
      : ::rocksdb::Cache(std::move(allocator)),
        inner_(std::move(inner)),
        owner_(owner),
        pending_(pending),
        after_(after) {}

  ::rocksdb::Cache& inner() noexcept { return *inner_; }

  const char* Name() const override { return inner_->Name(); }
  ::rocksdb::Status Insert(const ::rocksdb::Slice& key, void* value, size_t charge,
                           DeleterFn deleter, Handle** handle = nullptr,
                           Priority priority = Priority::LOW) override {
    Scope s(*this);
    return inner_->Insert(key, value, charge, deleter, handle, priority);
  }
  ::rocksdb::Status Insert(const ::rocksdb::Slice& key, void* value, const CacheItemHelper* helper,
                           size_t charge, Handle** handle = nullptr,
                           Priority priority = Priority::LOW) override {
    Scope s(*this);
    return inner_->Insert(key, value, helper, charge, handle, priority);
  }
  Handle* Lookup(const ::rocksdb::Slice& key, ::rocksdb::Statistics* stats = nullptr) override {
    Scope s(*this);
    return inner_->Lookup(key, stats);
  }
  Handle* Lookup(const ::rocksdb::Slice& key, const CacheItemHelper* helper,
                 const CreateCallback& create_cb, Priority priority, bool wait,
                 ::rocksdb::Statistics* stats = nullptr) override {
    Scope s(*this);
    return inner_->Lookup(key, helper, create_cb, priority, wait, stats);
  }
  bool Ref(Handle* handle) override {
    Scope s(*this);
    return inner_->Ref(handle);
  }
  bool Release(Handle* handle, bool erase_if_last_ref = false) override {
    Scope s(*this);
    return inner_->Release(handle, erase_if_last_ref);
  }
  bool Release(Handle* handle, bool useful, bool erase_if_last_ref) override {
    Scope s(*this);
    return inner_->Release(handle, useful, erase_if_last_ref);
  }
  void* Value(Handle* handle) override { return inner_->Value(handle); }
  void Erase(const ::rocksdb::Slice& key) override {
    Scope s(*this);
    inner_->Erase(key);
  }
  uint64_t NewId() override { return inner_->NewId(); }
  void SetCapacity(size_t capacity) override {
    Scope s(*this);
    inner_->SetCapacity(capacity);
  }
  void SetStrictCapacityLimit(bool strict) override {
    Scope s(*this);
    inner_->SetStrictCapacityLimit(strict);
  }
  bool HasStrictCapacityLimit() const override { return inner_->HasStrictCapacityLimit(); }
  size_t GetCapacity() const override { return inner_->GetCapacity(); }
  size_t GetUsage() const override { return inner_->GetUsage(); }
  size_t GetOccupancyCount() const override { return inner_->GetOccupancyCount(); }
  size_t GetTableAddressCount() const override { return inner_->GetTableAddressCount(); }
  size_t GetUsage(Handle* handle) const override { return inner_->GetUsage(handle); }
  size_t GetPinnedUsage() const override { return inner_->GetPinnedUsage(); }
  size_t GetCharge(Handle* handle) const override { return inner_->GetCharge(handle); }
  DeleterFn GetDeleter(Handle* handle) const override { return inner_->GetDeleter(handle); }
  void DisownData() override { inner_->DisownData(); }
  void ApplyToAllEntries(
      const std::function<void(const ::rocksdb::Slice&, void*, size_t, DeleterFn)>& callback,
      const ApplyToAllEntriesOptions& opts) override {
    Scope s(*this);
    inner_->ApplyToAllEntries(callback, opts);
  }
  void EraseUnRefEntries() override {
    Scope s(*this);
    inner_->EraseUnRefEntries();
  }
  std::string GetPrintableOptions() const override { return inner_->GetPrintableOptions(); }
  bool IsReady(Handle* handle) override { return inner_->IsReady(handle); }
  void Wait(Handle* handle) override {
    Scope s(*this);
    inner_->Wait(handle);
  }
  void WaitAll(std::vector<Handle*>& handles) override {
    Scope s(*this);
    inner_->WaitAll(handles);
  }

 private:
  struct Scope {
    explicit Scope(GuardedCache& c) noexcept : cache(c) { ++tl_cache_call_depth; }
    ~Scope() {
      // The outermost call has returned: no shard mutex of ours is held on this thread.
      if (--tl_cache_call_depth == 0 && cache.pending_(cache.owner_)) cache.after_(cache.owner_);
    }
    GuardedCache& cache;
    NoFailScope no_fail;
  };

  std::shared_ptr<::rocksdb::Cache> inner_;
  BlockCache* const owner_;
  const Pending pending_;
  const After after_;
};

}  // namespace memcg::rocksdb::internal

#endif  // MEMCG_ROCKSDB_GUARDED_CACHE_HPP_
