#include "reservation_cache.hpp"

namespace memcg::rocksdb::internal {

ReservationCache::ReservationCache(std::function<void()> changed)
    // One shard, no capacity that could evict a reservation, no strict limit.
    : inner_(::rocksdb::NewLRUCache(size_t{1} << 62, 0, false, 0.0)),
      changed_(std::move(changed)) {}

void ReservationCache::detach() noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  changed_ = nullptr;
}

void ReservationCache::notify() noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  if (changed_) changed_();
}

::rocksdb::Status ReservationCache::Insert(const ::rocksdb::Slice& key, void* value, size_t charge,
                                           DeleterFn deleter, Handle** handle, Priority priority) {
  ::rocksdb::Status s = inner_->Insert(key, value, charge, deleter, handle, priority);
  notify();
  return s;
}

bool ReservationCache::Release(Handle* handle, bool erase_if_last_ref) {
  const bool erased = inner_->Release(handle, erase_if_last_ref);
  if (erased) notify();
  return erased;
}

void ReservationCache::Erase(const ::rocksdb::Slice& key) {
  inner_->Erase(key);
  notify();
}

void ReservationCache::EraseUnRefEntries() {
  inner_->EraseUnRefEntries();
  notify();
}

}  // namespace memcg::rocksdb::internal
