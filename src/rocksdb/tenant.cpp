#include "memcg/rocksdb/tenant.hpp"

#include <algorithm>
#include <string>


namespace memcg::rocksdb {

namespace {
BlockCacheOptions with_wake(BlockCacheOptions o, std::function<void()> wake) {
  if (o.defer_reclaim && !o.wake) o.wake = std::move(wake);
  return o;
}
}  // namespace

Tenant::Tenant(Group& group, TenantOptions options)
    : at_end_{options.teardown},
      group_(&group),
      options_(options),
      cache_(group, with_wake(options.cache, [this] { wake(); })),
      write_buffers_(group, options.write_buffer, [this] { wake(); }) {
  if (options_.tick.count() > 0) thread_ = std::thread([this] { run(); });
}

Tenant::~Tenant() {
  stop_.store(true, std::memory_order_release);
  {
    std::lock_guard<std::mutex> lock(mu_);
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

::rocksdb::Status Tenant::configure(::rocksdb::Options& options,
                                    ::rocksdb::BlockBasedTableOptions table) const {
  if (table.block_cache != nullptr) {
    refused_configures_.fetch_add(1, std::memory_order_relaxed);
    return ::rocksdb::Status::InvalidArgument(
        "memcg::rocksdb::Tenant::configure: table.block_cache is set and would be replaced by "
        "the tenant's cache; leave it null (BlockCacheOptions sizes the tenant's)");
  }
  if (cache_.below_protection()) {
    refused_configures_.fetch_add(1, std::memory_order_relaxed);
    return ::rocksdb::Status::InvalidArgument(
        "memcg::rocksdb::Tenant::configure: the cache's fixed capacity (" +
        std::to_string(cache_.fixed_capacity()) + " bytes) is below the group's protection (" +
        std::to_string(std::max(group_->min(), group_->low())) +
        " bytes): leave BlockCacheOptions::capacity_bytes at 0 to follow the group");
  }
  table.block_cache = cache_.cache();
  table.cache_index_and_filter_blocks = true;
  options.table_factory.reset(::rocksdb::NewBlockBasedTableFactory(table));
  options.write_buffer_manager = write_buffers_.manager();
  if (options_.env != nullptr) options.env = options_.env.get();
  // A memtable grows by arena blocks of write_buffer_size / 8 by default: with a write buffer
  // larger than the group allows, each step could pass the limit by itself. Blocks of 1/8 of
  // the governed buffer size keep the steps within the overshoot docs/rocksdb.md states.
  const uint64_t step = std::max<uint64_t>(write_buffers_.target() / 8, 4096);
  const uint64_t current = options.arena_block_size != 0 ? options.arena_block_size
                                                         : options.write_buffer_size / 8;
  options.arena_block_size = static_cast<std::size_t>(std::min(current, step));
  return ::rocksdb::Status::OK();
}

void Tenant::add(::rocksdb::DB* db, std::vector<::rocksdb::ColumnFamilyHandle*> families) {
  write_buffers_.add(db, std::move(families));
}

void Tenant::remove(::rocksdb::DB* db) { write_buffers_.remove(db); }

::rocksdb::Status Tenant::write(::rocksdb::DB* db, const ::rocksdb::WriteOptions& options,
                                ::rocksdb::WriteBatch* batch) {
  if (db == nullptr || batch == nullptr)
    return ::rocksdb::Status::InvalidArgument("memcg::rocksdb::Tenant::write: null db or batch");
  const uint64_t cost = batch->GetDataSize() + uint64_t{batch->Count()} * kEntryOverhead;
  ::rocksdb::Status s = write_buffers_.admit(cost);
  if (!s.ok()) return s;
  return db->Write(options, batch);
}

void Tenant::safe_point() noexcept {
  // Memtables first: their mirror is the "other memory" the cache makes room for.
  write_buffers_.update();
  cache_.update();
  ticks_.fetch_add(1, std::memory_order_relaxed);
}

void Tenant::wake() noexcept {
  // From inside a charge: no lock, no allocation. A wake that races with the thread going to
  // sleep is seen at the end of that tick at the latest.
  woken_.store(true, std::memory_order_release);
  cv_.notify_one();
}

void Tenant::run() {
  while (!stop_.load(std::memory_order_acquire)) {
    safe_point();
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, options_.tick, [this] {
      return stop_.load(std::memory_order_acquire) || woken_.load(std::memory_order_acquire);
    });
    woken_.store(false, std::memory_order_relaxed);
  }
}

}  // namespace memcg::rocksdb
