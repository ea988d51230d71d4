// The global operator-new hook (memcg::hook) with a standalone BlockCache (defer_reclaim off, the
// default) at its group's limit. RocksDB's LRUHandleTable::Resize allocates the new table with
// operator new while it holds the shard's mutex; the hook charges it to the attached thread's
// group, and with the group full the charge's reclaim reaches the cache, whose shrink
// (SetCapacity) takes every shard's mutex, that one included. The cache defers a shrink asked
// on a thread inside one of its calls to the end of that call (block_cache.hpp), and forces
// (NoFailScope) what RocksDB allocates there: no deadlock, no exception thrown inside RocksDB,
// the overshoot counted.
#include <rocksdb/cache.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "memcg/base/nofail.hpp"
#include "memcg/core/charge/attach.hpp"
#include "memcg/core/charge/charge.hpp"
#include "memcg/hook/hook.hpp"
#include "rocksdb/rocksdb_fixture.hpp"
#include "watchdog.hpp"

namespace memcg::rocksdb::testing {
namespace {

BlockAllocator* g_allocator = nullptr;

void free_block(const ::rocksdb::Slice&, void* value) { g_allocator->Deallocate(value); }

TEST(RocksdbHookCache, HandleTableResizeAtTheLimitDoesNotDeadlock) {
  memcg::testing::Watchdog dog("hook + BlockCache at the limit (deadlock)", std::chrono::seconds(20));
  Controller ctl;
  GroupRef g = make_group(ctl, "t");
  g->set_max(4 * kMiB);
  BlockCacheOptions o;
  o.num_shard_bits = 0;  // one shard: the Resize holds the mutex SetCapacity needs
  BlockCache cache(*g, o);
  g_allocator = &cache.allocator();
  auto& rc = *cache.cache();
  std::vector<::rocksdb::Cache::Handle*> pinned;
  // Blocks in the cache, charged to the group: something for the cache's reclaim to shrink.
  for (int i = 0; i < 64; ++i) {
    void* block = cache.allocator().Allocate(4096);
    ::rocksdb::Cache::Handle* h = nullptr;
    ASSERT_TRUE(rc.Insert("block" + std::to_string(i), block, 4096, free_block, &h).ok());
    pinned.push_back(h);
  }
  // The rest of the group held by a charge nothing can reclaim.
  drain(ctl);
  const int64_t rest = static_cast<int64_t>((g->max() - g->current()) >> ctl.unit_shift());
  ASSERT_NE(try_charge(*g, rest, kNoFail | kNoSpin), ChargeStatus::kNoMem);
  const uint64_t forced_before = g->events().get(Event::kMax);
  std::vector<std::string> keys;
  for (int i = 0; i < 20'000; ++i) keys.push_back("entry" + std::to_string(i));
  pinned.reserve(pinned.size() + keys.size());
  {
    ScopedAttach attached(*g);
    // This thread's own allocations (RocksDB's handles, outside the mutex) are forced past the
    // limit after their reclaim, rather than thrown as std::bad_alloc out of RocksDB.
    NoFailScope no_fail;
    // Pinned entries stay in the handle table, which doubles (Resize, under the mutex) as they
    // pass its length: each time a charge with no room, whose reclaim reaches the cache.
    for (const std::string& k : keys) {
      ::rocksdb::Cache::Handle* h = nullptr;
      ASSERT_TRUE(rc.Insert(k, nullptr, 1, [](const ::rocksdb::Slice&, void*) {}, &h).ok());
      pinned.push_back(h);
    }
  }
  std::printf("group %llu KiB (max %llu KiB), max events %llu -> %llu, deferred %llu\n",
              (unsigned long long)g->current() >> 10, (unsigned long long)g->max() >> 10,
              (unsigned long long)forced_before,
              (unsigned long long)g->events().get(Event::kMax),
              (unsigned long long)cache.deferred());
  // The charges met the limit (reclaim ran) and the shrink they asked was deferred, not taken
  // under the held mutex.
  EXPECT_GT(g->events().get(Event::kMax), forced_before);
  EXPECT_GT(cache.deferred(), 0u);
  for (auto* h : pinned) rc.Release(h);
  uncharge(*g, rest);
}

}  // namespace
}  // namespace memcg::rocksdb::testing
