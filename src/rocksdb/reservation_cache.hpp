// ReservationCache: the ::rocksdb::Cache a tenant's WriteBufferManager charges its memtables to,
// so that their growth reaches the group on the writing thread.
//
// A WriteBufferManager built with a cache reserves its memory there as it grows: each time a
// memtable takes an arena block, the writing thread (ReserveMem, under the manager's own mutex)
// inserts placeholder entries of 256 KiB until the reservation covers memory_usage(). This cache
// keeps those entries in a private LRU cache (never evicted: its capacity is unbounded) and
// calls `changed` after each insert and each release that freed one, so that the memtable
// charge follows the manager on the thread that made it grow, not at the governor's next tick.
// Nothing reads the entries; no other RocksDB structure uses this cache.
//
// `changed` is detached (detach()) before its owner goes away: the manager may outlive the
// owner (options holding it), and its last releases then reach nobody.
#ifndef MEMCG_ROCKSDB_RESERVATION_CACHE_HPP_
#define MEMCG_ROCKSDB_RESERVATION_CACHE_HPP_

#include <rocksdb/cache.h>

#include <functional>
#include <memory>
#include <mutex>
#include <string>

namespace memcg::rocksdb::internal {

class ReservationCache final : public ::rocksdb::Cache {
 public:
  explicit ReservationCache(std::function<void()> changed);
  // From then on `changed` is never called; waits for a call in progress.
  void detach() noexcept;

  const char* Name() const override { return "memcg::rocksdb::ReservationCache"; }
  using ::rocksdb::Cache::Insert;
  using ::rocksdb::Cache::Lookup;
  using ::rocksdb::Cache::Release;
  ::rocksdb::Status Insert(const ::rocksdb::Slice& key, void* value, size_t charge,
                           DeleterFn deleter, Handle** handle = nullptr,
                           Priority priority = Priority::LOW) override;
  Handle* Lookup(const ::rocksdb::Slice& key, ::rocksdb::Statistics* stats = nullptr) override {
    return inner_->Lookup(key, stats);
  }
  bool Ref(Handle* handle) override { return inner_->Ref(handle); }
  bool Release(Handle* handle, bool erase_if_last_ref = false) override;
  void* Value(Handle* handle) override { return inner_->Value(handle); }
  void Erase(const ::rocksdb::Slice& key) override;
  uint64_t NewId() override { return inner_->NewId(); }
  void SetCapacity(size_t) override {}  // unbounded: a reservation is never evicted
  void SetStrictCapacityLimit(bool) override {}
  bool HasStrictCapacityLimit() const override { return false; }
  size_t GetCapacity() const override { return inner_->GetCapacity(); }
  size_t GetUsage() const override { return inner_->GetUsage(); }
  size_t GetUsage(Handle* handle) const override { return inner_->GetUsage(handle); }
  size_t GetPinnedUsage() const override { return inner_->GetPinnedUsage(); }
  size_t GetCharge(Handle* handle) const override { return inner_->GetCharge(handle); }
  DeleterFn GetDeleter(Handle* handle) const override { return inner_->GetDeleter(handle); }
  void ApplyToAllEntries(
      const std::function<void(const ::rocksdb::Slice&, void*, size_t, DeleterFn)>& callback,
      const ApplyToAllEntriesOptions& opts) override {
    inner_->ApplyToAllEntries(callback, opts);
  }
  void EraseUnRefEntries() override;

 private:
  void notify() noexcept;

  std::shared_ptr<::rocksdb::Cache> inner_;
  std::mutex mu_;  // guards changed_; held while it runs (RocksDB serialises the callers)
  std::function<void()> changed_;
};

}  // namespace memcg::rocksdb::internal

#endif  // MEMCG_ROCKSDB_RESERVATION_CACHE_HPP_
