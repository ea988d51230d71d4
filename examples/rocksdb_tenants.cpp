// Two tenants' RocksDB databases under one parent group (memcg::rocksdb): "quiet" reads its
// working set and is protected by memory.min; "noisy" reads a data set larger than the parent's
// memory.max while a writer fills its memtables, and its request handlers take memory until the
// parent refuses (ChargeHandle), which makes the parent reclaim both caches. Each tenant's block
// cache is charged to its group and sized by it, its memtables are mirrored into it and flushed
// when they must shrink.
// Shows: the parent's limit held (peak within memory.max plus the overshoot the component counts),
// the quiet tenant's cache kept at its protection, no failed read and no OOM kill, then the
// documented shutdown order leaving every group at 0, in byte mode and (where memcg::rocksdb_arena
// is built) in arena mode, with nothing called but the documented steps. Exits non-zero when that
// did not happen.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <rocksdb/db.h>
#include <rocksdb/options.h>

#include <memcg/memcg.hpp>
#include <memcg/rocksdb/tenant.hpp>
#ifdef MEMCG_EXAMPLE_ARENA_MODE
#include <memcg/rocksdb/arena.hpp>
#endif

namespace {

constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kParentMax = 24 * kMiB;
constexpr uint64_t kQuietMin = 6 * kMiB;
constexpr int kQuietKeys = 40'000;   // ~9 MiB of blocks: the quiet tenant's working set
constexpr int kNoisyKeys = 120'000;  // ~26 MiB: more than the parent may hold
constexpr std::size_t kValue = 200;

std::string key(int i) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "key%09d", i);
  return buf;
}

std::string value(int i) {
  std::string v(kValue, 'a');
  uint64_t x = 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(i + 1);
  for (auto& c : v) x = x * 6364136223846793005ull + 1, c = static_cast<char>('a' + (x >> 59));
  return v;
}

// The README's sample, as written there but for the database's directory.
void readme_sample(memcg::GroupRef& tenant, const std::string& path) {
  memcg::rocksdb::Tenant db_tenant(*tenant);  // block cache and write buffers sized by the group
  rocksdb::Options options;
  options.create_if_missing = true;
  db_tenant.configure(options);  // cache charged to *tenant, memtables mirrored in
  rocksdb::DB* db = nullptr;
  if (!rocksdb::DB::Open(options, path, &db).ok()) return;  // as with any RocksDB
  db_tenant.add(db);  // the databases its write-buffer governor flushes
  db->Put(rocksdb::WriteOptions(), "key", "value");
  // Shutdown: 1. remove and close every database, 2. destroy the Tenant, 3. remove the group
  db_tenant.remove(db);
  delete db;
}

#ifdef MEMCG_EXAMPLE_ARENA_MODE
// Arena mode's documented shutdown (memcg/rocksdb/arena.hpp): the tenant's RocksDB, background
// jobs and bound threads in the group's arena; closing the database on this thread, destroying
// the Tenant and then the arena leaves the group at 0 by itself.
void arena_sample(memcg::GroupRef& tenant, const std::string& path) {
  std::unique_ptr<memcg::jemalloc::Arena> arena;
  if (memcg::jemalloc::Arena::create(*tenant, &arena, memcg::rocksdb::kArenaOptions) != 0) return;
  {
    memcg::rocksdb::Tenant db_tenant(*tenant, memcg::rocksdb::arena_options(*arena));
    rocksdb::Options options;
    options.create_if_missing = true;
    db_tenant.configure(options);
    rocksdb::DB* db = nullptr;
    if (!rocksdb::DB::Open(options, path, &db).ok()) return;  // from a thread of no arena
    db_tenant.add(db);
    {
      memcg::rocksdb::ScopedTenantThread bound(*arena, *db);  // memtables, reads: the arena's
      rocksdb::WriteOptions wo;
      wo.disableWAL = true;
      for (int i = 0; i < 20'000; ++i) db->Put(wo, key(i), value(i));
      db->Flush(rocksdb::FlushOptions());
      for (int i = 0; i < 2'000; ++i) db->Put(wo, key(i), value(i));  // closes with memtables
      std::string v;
      for (int i = 0; i < 20'000; i += 3) db->Get(rocksdb::ReadOptions(), key(i), &v);
    }
    std::printf("  arena mode, open: group %.1f MiB\n",
                static_cast<double>(tenant->current()) / (1 << 20));
    // Shutdown: 1. remove and close every database (unbound, on this thread) ...
    db_tenant.remove(db);
    delete db;
  }  // ... 2. the Tenant (its Env's threads joined, its cache freed, this thread's cache
     //    flushed), 3. the arena, 4. the group.
  arena.reset();
}
#endif

std::unique_ptr<rocksdb::DB> open(memcg::rocksdb::Tenant& t, const std::string& path) {
  rocksdb::Options o;
  o.create_if_missing = true;
  o.write_buffer_size = 4 * kMiB;
  o.compression = rocksdb::kNoCompression;
  rocksdb::BlockBasedTableOptions table;
  table.block_size = 4096;
  rocksdb::Status c = t.configure(o, table);  // refuses a cache of our own, or one too small
  if (!c.ok()) {
    std::fprintf(stderr, "Tenant::configure: %s\n", c.ToString().c_str());
    std::exit(1);
  }
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(o, path, &raw);
  if (!s.ok()) {
    std::fprintf(stderr, "DB::Open %s: %s\n", path.c_str(), s.ToString().c_str());
    std::exit(1);
  }
  t.add(raw);
  return std::unique_ptr<rocksdb::DB>(raw);
}

void load(rocksdb::DB& db, int n) {
  rocksdb::WriteOptions wo;
  wo.disableWAL = true;
  for (int i = 0; i < n; ++i) db.Put(wo, key(i), value(i));
  db.Flush(rocksdb::FlushOptions());
  db.CompactRange(rocksdb::CompactRangeOptions(), nullptr, nullptr);
}

// Random Gets until `stop`; returns the failed ones (an error, a missing key or a wrong value).
uint64_t read_until(rocksdb::DB& db, int n, const std::atomic<bool>& stop, uint64_t seed,
                    std::atomic<uint64_t>& reads) {
  std::mt19937_64 rng(seed);
  std::string v;
  uint64_t failed = 0;
  while (!stop.load(std::memory_order_relaxed)) {
    const int k = static_cast<int>(rng() % static_cast<uint64_t>(n));
    if (!db.Get(rocksdb::ReadOptions(), key(k), &v).ok() || v != value(k)) ++failed;
    reads.fetch_add(1, std::memory_order_relaxed);
  }
  return failed;
}

double mib(uint64_t b) {
  return static_cast<double>(b) / kMiB;
}

}  // namespace

int main() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "memcg-rocksdb-XXXXXX").string();
  if (mkdtemp(tmpl.data()) == nullptr) return 1;
  const std::filesystem::path dir = tmpl;
  bool ok = true;
  auto check = [&](bool cond, const char* what) {
    std::printf("  %-58s %s\n", what, cond ? "ok" : "FAILED");
    ok = ok && cond;
  };

  memcg::Controller ctl;
  memcg::GroupRef parent, quiet, noisy, sample;
  if (ctl.create("dbs", &parent) != 0 || ctl.create("dbs/quiet", &quiet) != 0 ||
      ctl.create("dbs/noisy", &noisy) != 0 || ctl.create("sample", &sample) != 0)
    return 1;
  readme_sample(sample, (dir / "sample").string());
  ctl.drain_stocks();
  check(sample->current() == 0, "README sample: its group back to 0");
#ifdef MEMCG_EXAMPLE_ARENA_MODE
  {
    memcg::GroupRef arena_group;
    if (ctl.create("arena", &arena_group) != 0) return 1;
    arena_sample(arena_group, (dir / "arena").string());
    ctl.drain_stocks();
    check(arena_group->current() == 0, "arena mode: documented shutdown, its group back to 0");
    arena_group.reset();
    check(ctl.remove("arena") == 0, "arena mode: its group removed");
  }
#endif

  parent->set_max(kParentMax);
  quiet->set_min(kQuietMin);
  uint64_t quiet_cache = 0, forced = 0, failed = 0, reads_noisy = 0, reads_quiet = 0;
  uint64_t flushes = 0, quiet_events_low = 0;
  {
    memcg::rocksdb::TenantOptions to;
    to.cache.capacity_bytes = 256 * kMiB;  // configured far above the limit: the group sizes it
    memcg::rocksdb::Tenant tq(*quiet, to), tn(*noisy, to);
    auto dq = open(tq, (dir / "quiet").string());
    auto dn = open(tn, (dir / "noisy").string());
    load(*dq, kQuietKeys);
    load(*dn, kNoisyKeys);

    std::atomic<bool> stop{false};
    std::atomic<uint64_t> rq{0}, rn{0}, failures{0};
    // The quiet tenant warms its cache, then keeps reading its working set.
    std::thread quiet_reader([&] { failures += read_until(*dq, kQuietKeys, stop, 1, rq); });
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    // The noisy tenant: two readers over a data set larger than the parent's limit, and a writer.
    std::vector<std::thread> noisy_threads;
    for (uint64_t s = 2; s < 4; ++s)
      noisy_threads.emplace_back([&, s] { failures += read_until(*dn, kNoisyKeys, stop, s, rn); });
    noisy_threads.emplace_back([&] {
      rocksdb::WriteOptions wo;
      wo.disableWAL = true;
      for (int i = 0; !stop.load(std::memory_order_relaxed); ++i)
        dn->Put(wo, "new" + key(i), value(i));
    });
    // The noisy tenant's request buffers: 256 KiB each until the parent's limit refuses one
    // (reclaim ran first: both caches were shrunk, the quiet one down to its protection).
    std::vector<memcg::ChargeHandle> requests;
    const uint64_t quiet_warm = tq.cache().allocator().live_bytes();
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    for (int i = 0; i < 256; ++i) {
      memcg::ChargeHandle h(*noisy, 256 << 10, memcg::kMayBlock | memcg::kRetryMayFail);
      if (!h.ok()) break;
      requests.push_back(std::move(h));
    }
    std::this_thread::sleep_for(std::chrono::seconds(2));
    stop = true;
    quiet_reader.join();
    for (auto& t : noisy_threads) t.join();

    tq.safe_point();
    tn.safe_point();
    quiet_cache = tq.cache().allocator().live_bytes();
    quiet_events_low = quiet->events().get(memcg::Event::kLow);
    forced = tq.cache().allocator().forced_live_peak() + tn.cache().allocator().forced_live_peak() +
             tq.write_buffers().mirror().forced_bytes() +
             tn.write_buffers().mirror().forced_bytes();
    failed = failures.load();
    reads_quiet = rq.load();
    reads_noisy = rn.load();
    flushes = tn.write_buffers().flushes();
    std::printf("parent: memory.max %.1f MiB, peak %.1f MiB (counted overshoot %.1f MiB)\n",
                mib(kParentMax), mib(parent->peak()), mib(forced));
    std::printf(
        "quiet:  memory.min %.1f MiB, usage %.1f MiB, cache %.1f MiB (%.1f MiB before the "
        "noisy tenant's requests), %llu reads, %llu `low` events\n",
        mib(kQuietMin), mib(quiet->current()), mib(quiet_cache), mib(quiet_warm),
        static_cast<unsigned long long>(reads_quiet),
        static_cast<unsigned long long>(quiet_events_low));
    std::printf("noisy:  %zu request buffers of 256 KiB taken before the limit refused one\n",
                requests.size());
    requests.clear();
    std::printf(
        "noisy:  usage %.1f MiB, cache %.1f MiB (capacity configured %.0f MiB), "
        "memtables %.1f MiB, %llu reads, %llu flushes asked\n",
        mib(noisy->current()), mib(tn.cache().allocator().live_bytes()),
        mib(to.cache.capacity_bytes), mib(tn.write_buffers().mirror().reported()),
        static_cast<unsigned long long>(reads_noisy), static_cast<unsigned long long>(flushes));

    // Shutdown, in the documented order: 1. remove and close every database ...
    tq.remove(dq.get());
    tn.remove(dn.get());
    dq.reset();
    dn.reset();
  }  // ... 2. the tenants (governor threads stopped, mirrors uncharged, cached blocks freed) ...
  ctl.drain_stocks();
  const uint64_t left = quiet->current() + noisy->current() + parent->current();

  // Slack on top of the counted overshoot: per reading thread one index block and one data
  // block charged before the count shows them, and a unit per CPU of object-layer rounding.
  const uint64_t slack = 3 * 512 * 1024 + std::thread::hardware_concurrency() * 4096;
  check(parent->peak() <= kParentMax + forced + slack,
        "parent peak <= memory.max + counted overshoot");
  check(failed == 0, "no failed read");
  check(reads_noisy > 0 && reads_quiet > 0, "both tenants read");
  check(parent->events().get(memcg::Event::kOomKill) == 0, "no OOM kill");
  // The quiet tenant's cache is nearly all its usage; reclaim may take a protected group one
  // bite (32 units) per reclaiming thread below its protection. (memory.low would be best
  // effort: pressed until refused, the parent reclaims below low once nothing else is left.)
  check(quiet_cache + kMiB >= kQuietMin, "quiet tenant's cache kept at its memory.min");
  check(left == 0, "after shutdown: every group back to 0");
  // ... 3. the groups.
  quiet.reset();
  noisy.reset();
  check(ctl.remove("dbs/quiet") == 0 && ctl.remove("dbs/noisy") == 0, "groups removed");
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return ok ? 0 : 1;
}
