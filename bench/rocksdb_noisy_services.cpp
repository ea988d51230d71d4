// The noisy-neighbour benchmark's service in its variants (rocksdb_noisy.hpp): byte and arena
// mode (memcg::rocksdb), R1 and R2 (RocksDB's own limits).
#include <rocksdb/cache.h>
#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>
#include <rocksdb/write_buffer_manager.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "memcg/memcg.hpp"
#include "memcg/rocksdb/tenant.hpp"
#ifdef MEMCG_NOISY_ARENA
#include "memcg/rocksdb/arena.hpp"
#endif
#include "rocksdb_noisy.hpp"

namespace noisy {
namespace {

// byte and arena mode: a parent group at the budget, a group and a Tenant per tenant.
class MemcgService final : public Service {
 public:
  MemcgService(const Config& c, bool arena) : arena_mode_(arena) {
    const char* names[3] = {"svc/quiet", "svc/noisy", "svc/writer"};
    if (ctl_.create("svc", &svc_) != 0) die("create svc");
    for (int r = 0; r < 3; ++r)
      if (ctl_.create(names[r], &groups_[r]) != 0) die(std::string("create ") + names[r]);
    svc_->set_max(c.budget);
    groups_[kQuiet]->set_min(c.quiet_min);
    groups_[kWriter]->set_max(c.writer_max);
    for (int r = 0; r < 3; ++r) {
      memcg::rocksdb::TenantOptions to;
#ifdef MEMCG_NOISY_ARENA
      if (arena_mode_) {
        memcg::jemalloc::ArenaOptions ao = memcg::rocksdb::kArenaOptions;
        if (c.arena_decay_ms >= -1) ao.dirty_decay_ms = c.arena_decay_ms;
        if (memcg::jemalloc::Arena::create(*groups_[r], &arenas_[r], ao) != 0)
          die("Arena::create");
        to = memcg::rocksdb::arena_options(*arenas_[r], to);
      }
#endif
      tenants_[r] = std::make_unique<memcg::rocksdb::Tenant>(*groups_[r], to);
    }
  }
  ~MemcgService() override { teardown(); }

  void open(const Config& c) override {
    ::rocksdb::Options o[3];
    for (int r = 0; r < 3; ++r) {
      o[r] = db_options();
      check(tenants_[r]->configure(o[r], table_options()), "Tenant::configure");
    }
    open_all(c, o[kQuiet], o[kNoisy], o[kWriter]);
    for (int r = 0; r < 3; ++r) tenants_[r]->add(dbs_[r].get());
  }

  std::shared_ptr<void> bind(Role r) override {
#ifdef MEMCG_NOISY_ARENA
    if (arena_mode_) {
      auto b = std::make_shared<memcg::rocksdb::ScopedTenantThread>(*arenas_[r], *dbs_[r]);
      if (!b->ok()) die("ScopedTenantThread");
      return b;
    }
#endif
    static_cast<void>(r);
    return nullptr;
  }
  uint64_t counted() override { return svc_->current(); }
  void halve() override { svc_->set_max(svc_->max() / 2); }
  void restore() override { svc_->set_max(svc_->max() * 2); }
  // Each tenant's cache: capacity (RocksDB's terms), and the governor's moves of it.
  void counters(Results& out, const std::string& prefix) override {
    const char* names[3] = {"quiet", "noisy", "writer"};
    for (int r = 0; r < 3; ++r) {
      if (!tenants_[r]) continue;
      const std::string p = prefix + names[r] + "_";
      memcg::rocksdb::BlockCache& bc = tenants_[r]->cache();
      const memcg::CacheGovernor::Stats gs = bc.governor().stats();
      out[p + "capacity_mib"] = mib(static_cast<double>(bc.cache()->GetCapacity()));
      out[p + "reclaims"] = static_cast<double>(gs.reclaims);
      out[p + "lowered"] = static_cast<double>(gs.lowered);
      out[p + "raised"] = static_cast<double>(gs.raised);
      out[p + "deferred"] = static_cast<double>(bc.deferred());
      // The governor's own figures, in the group's bytes (the capacity above is RocksDB's).
      out[p + "gov_capacity_mib"] = mib(static_cast<double>(bc.governor().capacity()));
      out[p + "gov_target_mib"] = mib(static_cast<double>(bc.governor().target()));
      out[p + "group_mib"] = mib(static_cast<double>(groups_[r]->current()));
      out[p + "cache_usage_mib"] = mib(static_cast<double>(bc.cache()->GetUsage()));
      out[p + "blocks_mib"] = mib(static_cast<double>(bc.allocator().live_bytes()));
      out[p + "blocks"] = static_cast<double>(bc.allocator().live_blocks());
#ifdef MEMCG_NOISY_ARENA
      if (arena_mode_) {
        const memcg::jemalloc::ArenaStats as = arenas_[r]->stats();
        out[p + "arena_active_mib"] = mib(static_cast<double>(as.active));
        out[p + "arena_dirty_mib"] = mib(static_cast<double>(as.dirty));
        out[p + "arena_metadata_mib"] = mib(static_cast<double>(as.metadata));
      }
#endif
    }
  }
  ::rocksdb::Status write(::rocksdb::WriteBatch* b) override {
    return tenants_[kWriter]->write(dbs_[kWriter].get(), no_wal(), b);
  }
  void close_noisy() override { close(kNoisy); }
  double noisy_left() override { return mib(static_cast<double>(groups_[kNoisy]->current())); }

  BurstResult burst(::rocksdb::WriteBatch& batch) override {
    BurstResult r;
    memcg::Group& w = *groups_[kWriter];
    memcg::rocksdb::Tenant& t = *tenants_[kWriter];
    const ::rocksdb::Status a = t.write(dbs_[kWriter].get(), no_wal(), &batch);
    r.refused = a.IsMemoryLimit() ? 1 : a.ok() ? 0 : 2;
    r.admitted_status = a.ToString();
    r.peak_before_mib = mib(static_cast<double>(w.peak()));
    const uint64_t forced0 = forced();
    uint64_t seen = 0;
    write_sampled(batch, r, [&] { return w.current(); }, seen);
    r.peak_mib = mib(static_cast<double>(std::max(seen, w.peak())));
    r.forced_mib = mib(static_cast<double>(forced() - forced0));
    r.memtable_mib = mib(static_cast<double>(t.write_buffers().manager()->memory_usage()));
    return r;
  }

  int64_t teardown() override {
    if (torn_down_) return left_;
    for (Role r : {kQuiet, kNoisy, kWriter}) close(r);
    ctl_.drain_stocks();
    // Arena mode: a released arena whose pages other threads' caches still held is collected
    // within 100 ms; wait up to 2 s for it.
    for (int i = 0; i < 200 && svc_->current() != 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      ctl_.drain_stocks();
    }
    left_ = static_cast<int64_t>(svc_->current());
    remove_writer_dir();
    torn_down_ = true;
    return left_;
  }

 private:
  uint64_t forced() const {
#ifdef MEMCG_NOISY_ARENA
    if (arena_mode_) return arenas_[kWriter]->stats().forced;
#endif
    return tenants_[kWriter]->write_buffers().mirror().forced_bytes();
  }
  // The documented order: remove and close the database, destroy the Tenant (on this thread,
  // which closed the database), then the arena.
  void close(Role r) {
    if (tenants_[r] && dbs_[r]) tenants_[r]->remove(dbs_[r].get());
    dbs_[r].reset();
    tenants_[r].reset();
#ifdef MEMCG_NOISY_ARENA
    arenas_[r].reset();
#endif
    ctl_.drain_stocks();
  }

  const bool arena_mode_;
  memcg::Controller ctl_;
  memcg::GroupRef svc_, groups_[3];
#ifdef MEMCG_NOISY_ARENA
  std::unique_ptr<memcg::jemalloc::Arena> arenas_[3];
#endif
  std::unique_ptr<memcg::rocksdb::Tenant> tenants_[3];
  bool torn_down_ = false;
  int64_t left_ = 0;
};

// R1: one strict LRU cache of the budget, shared; a WriteBufferManager per tenant charging it.
class SharedCacheService final : public Service {
 public:
  explicit SharedCacheService(const Config& c) : cache_(strict_cache(c.budget)) {
    for (int r = 0; r < 3; ++r)
      wbm_[r] = std::make_shared<::rocksdb::WriteBufferManager>(
          r == kWriter ? c.writer_max / 4 : c.budget / 8, cache_, true);
  }
  ~SharedCacheService() override { teardown(); }
  void open(const Config& c) override {
    ::rocksdb::Options o[3];
    for (int r = 0; r < 3; ++r) {
      o[r] = db_options();
      with_cache(o[r], cache_);
      o[r].write_buffer_manager = wbm_[r];
    }
    open_all(c, o[kQuiet], o[kNoisy], o[kWriter]);
  }
  uint64_t counted() override { return cache_->GetUsage(); }
  void halve() override {
    cache_->SetCapacity(cache_->GetCapacity() / 2);
    wbm_[kWriter]->SetBufferSize(wbm_[kWriter]->buffer_size() / 2);
  }
  void restore() override {
    cache_->SetCapacity(cache_->GetCapacity() * 2);
    wbm_[kWriter]->SetBufferSize(wbm_[kWriter]->buffer_size() * 2);
  }
  void close_noisy() override {
    dbs_[kNoisy].reset();
    wbm_[kNoisy].reset();
  }
  double noisy_left() override { return -1; }
  BurstResult burst(::rocksdb::WriteBatch& batch) override {
    BurstResult r;
    r.peak_before_mib = mib(static_cast<double>(cache_->GetUsage()));
    uint64_t seen = 0;
    write_sampled(batch, r, [&] { return static_cast<uint64_t>(cache_->GetUsage()); }, seen);
    r.peak_mib = mib(static_cast<double>(seen));
    const double over = static_cast<double>(seen) - static_cast<double>(cache_->GetCapacity());
    r.forced_mib = over > 0 ? mib(over) : 0;
    r.memtable_mib = mib(static_cast<double>(wbm_[kWriter]->memory_usage()));
    return r;
  }
  int64_t teardown() override {
    for (auto& d : dbs_) d.reset();
    remove_writer_dir();
    return -1;
  }

 private:
  std::shared_ptr<::rocksdb::Cache> cache_;
  std::shared_ptr<::rocksdb::WriteBufferManager> wbm_[3];
};

// R2: fixed strict caches per tenant, the writer's memtables held by a WriteBufferManager.
class FixedCacheService final : public Service {
 public:
  explicit FixedCacheService(const Config& c) {
    const uint64_t writer_cache = c.writer_max / 4, writer_buffer = c.writer_max / 4;
    caches_[kQuiet] = strict_cache(c.quiet_min);
    caches_[kWriter] = strict_cache(writer_cache);
    caches_[kNoisy] = strict_cache(c.budget - c.quiet_min - writer_cache - writer_buffer);
    wbm_ = std::make_shared<::rocksdb::WriteBufferManager>(writer_buffer, nullptr, true);
  }
  ~FixedCacheService() override { teardown(); }
  void open(const Config& c) override {
    ::rocksdb::Options o[3];
    for (int r = 0; r < 3; ++r) {
      o[r] = db_options();
      with_cache(o[r], caches_[r]);
    }
    o[kWriter].write_buffer_manager = wbm_;
    open_all(c, o[kQuiet], o[kNoisy], o[kWriter]);
  }
  uint64_t counted() override {
    uint64_t n = wbm_->memory_usage();
    for (auto& c : caches_)
      if (c) n += c->GetUsage();
    return n;
  }
  void halve() override {
    for (auto& c : caches_)
      if (c) c->SetCapacity(c->GetCapacity() / 2);
    wbm_->SetBufferSize(wbm_->buffer_size() / 2);
  }
  void restore() override {
    for (auto& c : caches_)
      if (c) c->SetCapacity(c->GetCapacity() * 2);
    wbm_->SetBufferSize(wbm_->buffer_size() * 2);
  }
  void close_noisy() override {
    dbs_[kNoisy].reset();
    caches_[kNoisy].reset();
  }
  double noisy_left() override { return caches_[kNoisy] ? -1 : 0; }
  BurstResult burst(::rocksdb::WriteBatch& batch) override {
    BurstResult r;
    r.peak_before_mib = mib(static_cast<double>(wbm_->memory_usage()));
    uint64_t seen = 0;
    write_sampled(batch, r, [&] { return static_cast<uint64_t>(wbm_->memory_usage()); }, seen);
    r.peak_mib = mib(static_cast<double>(seen));
    r.memtable_mib = mib(static_cast<double>(wbm_->memory_usage()));
    return r;
  }
  int64_t teardown() override {
    for (auto& d : dbs_) d.reset();
    remove_writer_dir();
    return -1;
  }

 private:
  std::shared_ptr<::rocksdb::Cache> caches_[3];
  std::shared_ptr<::rocksdb::WriteBufferManager> wbm_;
};

}  // namespace

std::unique_ptr<Service> make_service(const Config& c) {
  if (c.child == "byte") return std::make_unique<MemcgService>(c, false);
#ifdef MEMCG_NOISY_ARENA
  if (c.child == "arena") return std::make_unique<MemcgService>(c, true);
#endif
  if (c.child == "r1") return std::make_unique<SharedCacheService>(c);
  if (c.child == "r2") return std::make_unique<FixedCacheService>(c);
  die("unknown variant " + c.child);
}

}  // namespace noisy
