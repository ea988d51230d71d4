// A multi-tenant in-memory key-value cache on memcg.
//
// Each tenant is a group under "tenants" (which has a memory.max of its own) with its own
// memory.max and memory.low. Every byte a tenant's cache allocates (hash table, LRU list, keys,
// values) comes from a memcg::MemoryResource charging the tenant's group. Each cache is a
// Reclaimer: when its group, or "tenants" as a whole, runs out of room, reclaim asks the caches
// of the subtree to evict their least recently used entries, honouring memory.low. A put that
// still does not fit makes its cache evict its own oldest entries and try again.
//
// The workload is synthetic and bounded (fixed seed, fixed number of operations). At the end the
// program prints, per tenant, the memory it uses, its entries and evictions, and its events.
//
// `kv_cache --serve PORT [--seconds N]` also serves the controller over HTTP on 127.0.0.1:PORT
// (memcg::http; PORT 0 picks a free one, printed on the first line) and keeps the workload going
// until interrupted or for N seconds, so it can be scraped with curl or watched with
// `memcgctl top --url http://127.0.0.1:PORT`.
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <list>
#include <memory>
#include <memory_resource>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "memcg/base/errors.hpp"
#include "memcg/core/charge/attach.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/core/charge/obj_stock.hpp"
#include "memcg/alloc/pmr.hpp"
#include "memcg/core/reclaim/reclaim.hpp"
#ifdef MEMCG_EXAMPLE_HTTP
#include "memcg/http/server.hpp"
#endif

namespace {

// One tenant's cache. Every allocation goes through `mr_`.
class TenantCache final : public memcg::Reclaimer {
 public:
  explicit TenantCache(memcg::Group& group)
      : group_(&group),
        // Fail after one reclaim pass instead of retrying: put() then evicts on its own.
        mr_(group, memcg::MemoryResource::Options{memcg::kDefaultKind,
                                                  memcg::kMayBlock | memcg::kNoRetry}),
        lru_(&mr_),
        map_(&mr_),
        registration_(group, *this) {}
  ~TenantCache() override { registration_.reset(); }

  bool get(const std::string& key) {
    std::lock_guard lock(mu_);
    auto it = map_.find(std::pmr::string(key, &mr_));
    if (it == map_.end()) return false;
    lru_.splice(lru_.end(), lru_, it->second.pos);  // most recently used
    return true;
  }

  void put(const std::string& key, size_t value_size) {
    std::lock_guard lock(mu_);
    for (int attempt = 0;; ++attempt) {
      try {
        std::pmr::string k(key, &mr_);
        auto it = map_.find(k);
        if (it != map_.end()) {
          bytes_estimate_ -= it->second.value.capacity();
          it->second.value.assign(value_size, 'v');
          bytes_estimate_ += it->second.value.capacity();
          lru_.splice(lru_.end(), lru_, it->second.pos);
          return;
        }
        lru_.push_back(k);
        const uint64_t bytes = k.capacity() + value_size + kEntryOverhead;
        try {
          map_.emplace(std::move(k),
                       Entry{std::pmr::string(value_size, 'v', &mr_), std::prev(lru_.end())});
          bytes_estimate_ += bytes;
        } catch (...) {
          lru_.pop_back();
          throw;
        }
        return;
      } catch (const std::bad_alloc&) {
        // Over a limit and reclaim found nothing it could take (this cache is busy here).
        if (attempt == 8 || evict_oldest(16) == 0) {
          ++dropped_puts_;
          return;
        }
        self_evictions_ += 16;
      }
    }
  }

  // Reclaimer: evict least recently used entries worth `nr_to_scan` units.
  int64_t reclaimable() const noexcept override {
    return static_cast<int64_t>(bytes_estimate_.load(std::memory_order_relaxed) >>
                                group_->controller().unit_shift());
  }
  memcg::ReclaimResult reclaim(int64_t nr_to_scan, int /*priority*/) override {
    // A charge made by this cache's own put() (the lock is held) cannot evict from it.
    std::unique_lock lock(mu_, std::try_to_lock);
    if (!lock.owns_lock()) return {};
    const uint64_t want = static_cast<uint64_t>(nr_to_scan) << group_->controller().unit_shift();
    uint64_t freed = 0;
    int64_t entries = 0;
    while (freed < want && !lru_.empty()) {
      freed += erase_oldest();
      ++entries;
    }
    reclaim_evictions_ += entries;
    const int64_t units = static_cast<int64_t>(freed >> group_->controller().unit_shift());
    return {nr_to_scan, units < nr_to_scan ? units : nr_to_scan};
  }

  size_t entries() const {
    std::lock_guard lock(mu_);
    return map_.size();
  }
  uint64_t reclaim_evictions() const { return reclaim_evictions_; }
  uint64_t self_evictions() const { return self_evictions_; }
  uint64_t dropped_puts() const { return dropped_puts_; }

 private:
  struct Entry {
    std::pmr::string value;
    std::pmr::list<std::pmr::string>::iterator pos;
  };
  // Approximate footprint of one entry beyond its strings (hash node, list node).
  static constexpr size_t kEntryOverhead = 96;

  size_t evict_oldest(int n) {
    size_t k = 0;
    for (; static_cast<int>(k) < n && !lru_.empty(); ++k) erase_oldest();
    return k;
  }
  uint64_t erase_oldest() {
    auto it = map_.find(lru_.front());
    const uint64_t bytes = it->first.capacity() + it->second.value.capacity() + kEntryOverhead;
    map_.erase(it);
    lru_.pop_front();
    const uint64_t held = bytes_estimate_.load(std::memory_order_relaxed);
    bytes_estimate_.store(held - (bytes < held ? bytes : held), std::memory_order_relaxed);
    return bytes;
  }

  memcg::Group* group_;
  memcg::MemoryResource mr_;
  mutable std::mutex mu_;
  std::pmr::list<std::pmr::string> lru_;  // least recently used first
  struct Hash {
    size_t operator()(const std::pmr::string& s) const noexcept {
      return std::hash<std::string_view>()(s);
    }
  };
  std::pmr::unordered_map<std::pmr::string, Entry, Hash> map_;
  // Approximate bytes held; read without the lock by reclaimable().
  std::atomic<uint64_t> bytes_estimate_{0};
  uint64_t reclaim_evictions_ = 0;
  uint64_t self_evictions_ = 0;
  uint64_t dropped_puts_ = 0;
  memcg::ReclaimerRegistration registration_;
};

struct Tenant {
  const char* name;
  uint64_t max, low;
  double zipf_skew;  // higher: fewer distinct hot keys
  memcg::GroupRef group;
  std::unique_ptr<TenantCache> cache;
  uint64_t hits = 0, misses = 0;
};

volatile std::sig_atomic_t g_interrupted = 0;

void on_signal(int) { g_interrupted = 1; }

// Command line: nothing (the bounded run), or --serve PORT [--seconds N].
struct Args {
  int serve_port = -1;  // -1: no server
  int seconds = 0;      // 0: until interrupted
};

bool parse_number(const char* text, int lo, int hi, int* out) {
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || v < lo || v > hi) return false;
  *out = static_cast<int>(v);
  return true;
}

bool parse_args(int argc, char** argv, Args* a) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--serve") == 0 && i + 1 < argc) {
      if (!parse_number(argv[++i], 0, 65535, &a->serve_port)) return false;
    } else if (std::strcmp(argv[i], "--seconds") == 0 && i + 1 < argc) {
      if (!parse_number(argv[++i], 1, 86400, &a->seconds)) return false;
    } else {
      return false;
    }
  }
  return a->seconds == 0 || a->serve_port >= 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  if (!parse_args(argc, argv, &args)) {
    std::fprintf(stderr, "usage: kv_cache [--serve PORT [--seconds N]]\n");
    return 2;
  }
  constexpr uint64_t kMiB = 1 << 20;
  memcg::Controller ctl;
  memcg::GroupRef tenants;
  if (int err = ctl.create("tenants", &tenants)) {
    std::fprintf(stderr, "kv_cache: cannot create tenants: %s\n", memcg::errno_name(err));
    return 1;
  }
  tenants->set_max(6 * kMiB);

  Tenant ts[] = {
      {"alpha", 3 * kMiB, 2 * kMiB, 1.2, {}, {}},  // protected by memory.low
      {"beta", 3 * kMiB, 0, 1.0, {}, {}},
      {"gamma", 2 * kMiB, 0, 0.8, {}, {}},
  };
  for (Tenant& t : ts) {
    if (int err = ctl.create(*tenants, t.name, &t.group)) {
      std::fprintf(stderr, "kv_cache: cannot create %s: %s\n", t.name, memcg::errno_name(err));
      return 1;
    }
    t.group->set_max(t.max);
    t.group->set_low(t.low);
    t.cache = std::make_unique<TenantCache>(*t.group);
  }

#ifdef MEMCG_EXAMPLE_HTTP
  // The endpoint: loopback only, read-only (the defaults), on its own threads.
  std::unique_ptr<memcg::http::Server> server;
  if (args.serve_port >= 0) {
    memcg::http::ServerOptions so;
    so.port = args.serve_port;
    server = std::make_unique<memcg::http::Server>(ctl, so);
    std::string error;
    if (server->start(&error) != 0) {
      std::fprintf(stderr, "kv_cache: %s\n", error.c_str());
      for (Tenant& t : ts) t.cache.reset();
      return 3;
    }
    std::printf("serving on http://127.0.0.1:%d\n", server->port());
    std::fflush(stdout);
    std::signal(SIGINT, on_signal);
    std::signal(SIGTERM, on_signal);
  }
#else
  if (args.serve_port >= 0) {
    std::fprintf(stderr,
                 "kv_cache: built without memcg::http (it needs libmicrohttpd, and cpp-httplib "
                 "for its tests); --serve unavailable\n");
    for (Tenant& t : ts) t.cache.reset();
    return 2;
  }
#endif

  // Bounded synthetic workload: 90 000 operations, 70 % gets, keys drawn with a skew per tenant,
  // values of 64 .. 2048 bytes; a miss is followed by a put (read-through). When serving, the
  // same workload continues in rounds until interrupted or --seconds pass.
  std::mt19937_64 rng(20240601);
  constexpr int kOps = 90000;
  constexpr int kKeySpace = 20000;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(args.seconds);
  for (int64_t op = 0;; ++op) {
    if (op >= kOps) {
      if (args.serve_port < 0 || g_interrupted) break;
      if (args.seconds > 0 && std::chrono::steady_clock::now() >= deadline) break;
      if (op % 2000 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    Tenant& t = ts[rng() % 3];
    const double u = std::uniform_real_distribution<double>(0, 1)(rng);
    const int key_id = static_cast<int>(kKeySpace * std::pow(u, 1.0 + t.zipf_skew));
    const std::string key = std::string(t.name) + ":" + std::to_string(key_id);
    if (rng() % 10 < 7) {
      if (t.cache->get(key)) {
        ++t.hits;
        continue;
      }
      ++t.misses;
    }
    t.cache->put(key, 64 + rng() % 1985);
  }

#ifdef MEMCG_EXAMPLE_HTTP
  if (server) server->stop();
#endif
  ctl.drain_stocks();
  ctl.flush_stats();
  std::printf("%-6s %9s %9s %9s %8s %9s %9s %8s %7s %5s %5s %5s\n", "tenant", "current", "peak",
              "anon", "entries", "hits", "reclaimed", "self_ev", "dropped", "max", "low", "oom");
  for (const Tenant& t : ts) {
    const memcg::EventCounters& ev = t.group->events();
    std::printf("%-6s %8" PRIu64 "K %8" PRIu64 "K %8" PRId64 "K %8zu %9" PRIu64 " %9" PRIu64
                " %8" PRIu64 " %7" PRIu64 " %5" PRIu64 " %5" PRIu64 " %5" PRIu64 "\n",
                t.name, t.group->current() >> 10, t.group->peak() >> 10,
                t.group->stat(memcg::StatRegistry::kAnon) >> 10, t.cache->entries(), t.hits,
                t.cache->reclaim_evictions(), t.cache->self_evictions(), t.cache->dropped_puts(),
                ev.get(memcg::Event::kMax), ev.get(memcg::Event::kLow), ev.get(memcg::Event::kOom));
  }
  std::printf("tenants: current %" PRIu64 "K of max %" PRIu64 "K, max events %" PRIu64 "\n",
              tenants->current() >> 10, tenants->max() >> 10,
              tenants->events().get(memcg::Event::kMax));
  // What the example demonstrates: every tenant stayed within its limit, the tenants together
  // within theirs, and the shared limit was reached (reclaim made room) without an OOM.
  bool ok = tenants->current() <= tenants->max() && tenants->events().get(memcg::Event::kMax) > 0;
  for (const Tenant& t : ts)
    ok = ok && t.group->peak() <= t.max && t.group->events().get(memcg::Event::kOom) == 0;
  for (Tenant& t : ts) t.cache.reset();
  if (!ok) std::fprintf(stderr, "kv_cache: a limit was exceeded or an OOM happened\n");
  return ok ? 0 : 1;
}
