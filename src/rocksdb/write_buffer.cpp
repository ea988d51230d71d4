#include "memcg/rocksdb/write_buffer.hpp"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>

#include "memcg/core/charge/charge.hpp"
#include "memcg/core/tree/controller.hpp"
#include "reservation_cache.hpp"

namespace memcg::rocksdb {

namespace {
// The tightest memory.max from the group up to (not including) the root.
uint64_t tightest_max(const Group& group) noexcept {
  uint64_t limit = kUnlimited;
  for (const Group* g = &group; g != nullptr && !g->is_root(); g = g->parent())
    limit = std::min(limit, g->max());
  return limit;
}
}  // namespace

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
  if (options_.mirror) {
    // Called by the writing thread at each reservation step (under the manager's mutex, which
    // serialises the steps) and by whoever frees memtables.
    reservations_ = std::make_shared<internal::ReservationCache>([this] {
      if (manager_ == nullptr) return;  // not yet assigned: nothing reserved yet
      write_charges_.fetch_add(1, std::memory_order_relaxed);
      static_cast<void>(mirror_.set(manager_->memory_usage()));
    });
  }
  manager_ = std::make_shared<::rocksdb::WriteBufferManager>(target(), reservations_,
                                                              options_.allow_stall);
  flusher_ = std::thread([this] { run_flusher(); });
  registration_ = ReclaimerRegistration(group, *this);
}

WriteBufferGovernor::~WriteBufferGovernor() {
  registration_.reset();
  {
    std::lock_guard<std::mutex> lock(flush_mu_);
    flush_stop_ = true;
  }
  flush_cv_.notify_all();
  flusher_.join();
  // The manager may outlive this governor (options holding it): its last releases reach nobody.
  if (reservations_ != nullptr) reservations_->detach();
}

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
  // reclaim, where update() never runs (reclaim only wakes the governor thread). Growths were
  // charged by the writing threads already; this reports what flushes freed.
  if (options_.mirror) static_cast<void>(mirror_.set(used));
  const bool asked = flush_wanted_.exchange(false, std::memory_order_acq_rel);
  const uint64_t active = manager_->mutable_memtable_memory_usage();
  // Flush only what a flush can free: the active memtables (immutable ones are being flushed).
  // A tiny active memtable is not worth a flush of its own, and while half a buffer of
  // immutable memtables still waits for its flush, another switch would only add one more.
  const bool over = used > size;  // as of the last report
  const uint64_t immutable = used > active ? used - active : 0;
  if (!(over || asked) || active < options_.min_bytes / 4 || immutable >= size / 2) return;
  {
    std::lock_guard<std::mutex> lock(flush_mu_);
    flush_pending_ = true;
  }
  flush_cv_.notify_one();
}

void WriteBufferGovernor::run_flusher() {
  std::unique_lock<std::mutex> lock(flush_mu_);
  for (;;) {
    flush_cv_.wait(lock, [this] { return flush_stop_ || flush_pending_; });
    if (flush_stop_) return;
    flush_pending_ = false;
    lock.unlock();
    flush_all();  // may wait for a write in progress: only this thread waits
    lock.lock();
  }
}

void WriteBufferGovernor::flush_all() noexcept {
  std::lock_guard<std::mutex> lock(dbs_mu_);
  ::rocksdb::FlushOptions fo;
  fo.wait = false;
  fo.allow_write_stall = true;
  for (const Db& d : dbs_) {
    ::rocksdb::Status s = d.families.empty() ? d.db->Flush(fo) : d.db->Flush(fo, d.families);
    if (s.ok()) flushes_.fetch_add(1, std::memory_order_relaxed);
  }
}

::rocksdb::Status WriteBufferGovernor::admit(uint64_t bytes) noexcept {
  const uint64_t limit = tightest_max(*group_);
  if (limit != kUnlimited && bytes > limit) {
    oversized_writes_.fetch_add(1, std::memory_order_relaxed);
    return ::rocksdb::Status::MemoryLimit(
        "memcg::rocksdb: a write of " + std::to_string(bytes) +
        " bytes is larger than the group's memory.max (" + std::to_string(limit) + " bytes)");
  }
  const unsigned shift = group_->controller().unit_shift();
  const int64_t units = static_cast<int64_t>((bytes + (uint64_t{1} << shift) - 1) >> shift);
  if (units == 0) return ::rocksdb::Status::OK();
  // A real wait, whatever clock the controller runs on.
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::nanoseconds(options_.admit_timeout_ns);
  for (;;) {
    // Reclaim (the cache shrinks) but no OOM kill and no forcing: the charge proves the room,
    // and is given back at once; the write charges itself as its memtable grows.
    const ChargeStatus st =
        try_charge(*group_, units, kMayBlock | kRetryMayFail | kNoSpin, StatRegistry::kAnon);
    if (st != ChargeStatus::kNoMem) {
      uncharge(*group_, units, StatRegistry::kAnon);
      return ::rocksdb::Status::OK();
    }
    // Memtables are what a flush frees: ask for one now, not at the next tick.
    flush_wanted_.store(true, std::memory_order_release);
    if (wake_) wake_();
    if (options_.admission == WriteAdmission::kFail) {
      refused_writes_.fetch_add(1, std::memory_order_relaxed);
      return ::rocksdb::Status::MemoryLimit("memcg::rocksdb: no room in the group for a write of " +
                                            std::to_string(bytes) + " bytes; nothing written");
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      refused_writes_.fetch_add(1, std::memory_order_relaxed);
      return ::rocksdb::Status::TimedOut("memcg::rocksdb: no room in the group for a write of " +
                                         std::to_string(bytes) + " bytes within the stall deadline");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
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
