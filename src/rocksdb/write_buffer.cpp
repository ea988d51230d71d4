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
  manager_ = std::make_shared<::rocksdb::WriteBufferManager>(target(), nullptr,
                                                              options_.allow_stall);
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
  std::lock_guard<std::mutex> serial(update_mu_);
  uint64_t size = target();
  const uint64_t used = manager_->memory_usage();
  if (manager_->IsStallActive()) {
    const uint64_t now = group_->controller().clock().now_ns();
    if (stall_since_ns_ == 0) {
      stall_since_ns_ = now;
    } else if (now - stall_since_ns_ >= options_.stall_timeout_ns) {
      size = std::max(size, used + options_.min_bytes);  // SetBufferSize ends the stall
      stall_escapes_.fetch_add(1, std::memory_order_relaxed);
      stall_since_ns_ = 0;
    }
  } else {
    stall_since_ns_ = 0;
  }
  if (size != manager_->buffer_size()) manager_->SetBufferSize(size);
  // The mirror forces growths (kNoFail), so set() fails only for a total past
  // ObjStock::kMaxBytes (2^60: the last report stays charged, the best there is) or inside
  // reclaim, where update() never runs (reclaim only wakes the governor thread).
  if (options_.mirror) static_cast<void>(mirror_.set(used));
  const bool asked = flush_wanted_.exchange(false, std::memory_order_acq_rel);
  const uint64_t active = manager_->mutable_memtable_memory_usage();
  // Flush only what a flush can free: the active memtables (immutable ones are being flushed).
  // A tiny active memtable is not worth a flush of its own, and while half a buffer of
  // immutable memtables still waits for its flush, another switch would only add one more.
  const bool over = used > size;  // as of the last report
  const uint64_t immutable = used > active ? used - active : 0;
  if (!(over || asked) || active < options_.min_bytes / 4 || immutable >= size / 2) return;
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
