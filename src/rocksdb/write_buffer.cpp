#include "memcg/rocksdb/write_buffer.hpp"

#include <algorithm>
#include <stdexcept>

#include "memcg/core/controller.hpp"

namespace memcg::rocksdb {

WriteBufferGovernor::WriteBufferGovernor(Group& group, WriteBufferOptions options,
                                         std::function<void()> wake)
    : group_(&group),
      options_(options),
      wake_(std::move(wake)),
      mirror_(group, StatRegistry::kAnon) {
  if (options_.min_bytes == 0 || options_.min_bytes > options_.max_bytes)
    throw std::invalid_argument("memcg::rocksdb::WriteBufferGovernor: bad min_bytes/max_bytes");
  if (options_.limit_percent < 1 || options_.limit_percent > 100)
    throw std::invalid_argument("memcg::rocksdb::WriteBufferGovernor: limit_percent not in 1..100");
  // No stall: a write that would wait for a flush could wait on a flush this governor has not
  // asked for yet; RocksDB switches memtables by its own rule and the mirror counts the rest.
  manager_ = std::make_shared<::rocksdb::WriteBufferManager>(target(), nullptr, false);
  registration_ = ReclaimerRegistration(group, *this);
}

WriteBufferGovernor::~WriteBufferGovernor() { registration_.reset(); }

uint64_t WriteBufferGovernor::target() const noexcept {
  uint64_t limit = kUnlimited;
  for (const Group* g = group_.get(); g != nullptr && !g->is_root(); g = g->parent())
    limit = std::min({limit, g->high(), g->max()});
  uint64_t t = options_.max_bytes;
  if (limit != kUnlimited) {
    const uint64_t pct = options_.limit_percent;  // limit x pct / 100 without overflow
    t = std::min(t, limit / 100 * pct + limit % 100 * pct / 100);
  }
  return std::clamp(t, options_.min_bytes, options_.max_bytes);
}

void WriteBufferGovernor::add(::rocksdb::DB* db,
                              std::vector<::rocksdb::ColumnFamilyHandle*> families) {
  if (db == nullptr) throw std::invalid_argument("memcg::rocksdb::WriteBufferGovernor::add: null");
  std::lock_guard<std::mutex> lock(dbs_mu_);
  for (const Db& d : dbs_)
    if (d.db == db) throw std::invalid_argument("memcg::rocksdb::WriteBufferGovernor::add: twice");
  dbs_.push_back({db, std::move(families)});
}

void WriteBufferGovernor::remove(::rocksdb::DB* db) {
  std::lock_guard<std::mutex> lock(dbs_mu_);
  std::erase_if(dbs_, [db](const Db& d) { return d.db == db; });
}

void WriteBufferGovernor::update() noexcept {
  const uint64_t size = target();
  if (size != manager_->buffer_size()) manager_->SetBufferSize(size);
  const uint64_t used = manager_->memory_usage();
  mirror_.set(used);
  const bool asked = flush_wanted_.exchange(false, std::memory_order_acq_rel);
  const uint64_t active = manager_->mutable_memtable_memory_usage();
  // Flush only what a flush can free: the active memtables (immutable ones are being flushed).
  // A tiny active memtable is not worth a flush of its own.
  const bool over = used > size;
  if (!(over || asked) || active < options_.min_bytes / 4) return;
  std::lock_guard<std::mutex> lock(dbs_mu_);
  ::rocksdb::FlushOptions fo;
  fo.wait = false;
  fo.allow_write_stall = true;
  for (const Db& d : dbs_) {
    ::rocksdb::Status s = d.families.empty() ? d.db->Flush(fo) : d.db->Flush(fo, d.families);
    if (s.ok()) flushes_.fetch_add(1, std::memory_order_relaxed);
  }
}

int64_t WriteBufferGovernor::reclaimable() const noexcept {
  return static_cast<int64_t>(manager_->mutable_memtable_memory_usage() >>
                              group_->controller().unit_shift());
}

ReclaimResult WriteBufferGovernor::reclaim(int64_t /*nr_to_scan*/, int /*priority*/) {
  flush_requests_.fetch_add(1, std::memory_order_relaxed);
  flush_wanted_.store(true, std::memory_order_release);
  if (wake_) wake_();
  return {};  // freed later, by the flush
}

}  // namespace memcg::rocksdb
