// Sizes from the group by default: the cache follows its group unless a size is fixed, the write
// buffer is its stated share of the limit, and configurations that would defeat the group (a
// user's own block cache to be replaced, a fixed capacity below the group's protection) are
// refused with a Status and counted, or counted when the protection is raised later.
#include <rocksdb/cache.h>

#include "rocksdb/rocksdb_fixture.hpp"

namespace memcg::rocksdb::testing {
namespace {

TenantOptions manual() {
  TenantOptions o;
  o.tick = std::chrono::milliseconds(0);
  return o;
}

TEST(RocksdbSizing, CacheFollowsItsGroupByDefault) {
  Controller ctl;
  GroupRef g = make_group(ctl, "t");
  g->set_max(96 * kMiB);
  Tenant tenant(*g, manual());
  EXPECT_EQ(tenant.cache().fixed_capacity(), 0u);
  tenant.safe_point();
  // Not capped at a configured size: the room under memory.max (less the governor's headroom).
  const std::size_t cap = tenant.cache().cache()->GetCapacity();
  EXPECT_GT(cap, 80 * kMiB);
  EXPECT_LE(cap, 96 * kMiB);
  // It follows a limit raised later, too.
  g->set_max(192 * kMiB);
  tenant.safe_point();
  EXPECT_GT(tenant.cache().cache()->GetCapacity(), 160 * kMiB);
  // The write buffer: its stated default share, 25 % of the tightest limit.
  EXPECT_EQ(WriteBufferOptions{}.limit_percent, 25u);
  EXPECT_EQ(tenant.write_buffers().target(), 48 * kMiB);
}

TEST(RocksdbSizing, UnlimitedGroupGetsTheBoundedDefault) {
  Controller ctl;
  GroupRef g = make_group(ctl, "t");
  Tenant tenant(*g, manual());
  tenant.safe_point();
  EXPECT_EQ(tenant.cache().cache()->GetCapacity(), BlockCache::kUnlimitedCapacity);
}

TEST(RocksdbSizing, UserBlockCacheIsRefusedNotReplaced) {
  Controller ctl;
  GroupRef g = make_group(ctl, "t");
  Tenant tenant(*g, manual());
  ::rocksdb::Options o;
  const auto factory = o.table_factory;
  const auto manager = o.write_buffer_manager;
  ::rocksdb::BlockBasedTableOptions t;
  t.block_cache = ::rocksdb::NewLRUCache(1 << 20);
  ::rocksdb::Status s = tenant.configure(o, t);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_NE(s.ToString().find("block_cache"), std::string::npos);
  EXPECT_EQ(o.table_factory, factory);  // nothing changed
  EXPECT_EQ(o.write_buffer_manager, manager);
  EXPECT_EQ(tenant.refused_configures(), 1u);
  t.block_cache = nullptr;
  EXPECT_TRUE(tenant.configure(o, t).ok());
  EXPECT_EQ(o.write_buffer_manager, tenant.write_buffers().manager());
  EXPECT_EQ(tenant.refused_configures(), 1u);
}

TEST(RocksdbSizing, FixedCapacityBelowProtectionIsRefusedOrCounted) {
  Controller ctl;
  GroupRef g = make_group(ctl, "t");
  g->set_max(96 * kMiB);
  g->set_min(16 * kMiB);
  {
    TenantOptions to = manual();
    to.cache.capacity_bytes = 8 * kMiB;
    Tenant tenant(*g, to);
    ::rocksdb::Options o;
    ::rocksdb::Status s = tenant.configure(o);
    EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
    EXPECT_NE(s.ToString().find("protection"), std::string::npos);
    EXPECT_EQ(o.write_buffer_manager, nullptr);
    EXPECT_EQ(tenant.refused_configures(), 1u);
    tenant.safe_point();
    EXPECT_TRUE(tenant.cache().below_protection());
    EXPECT_EQ(tenant.cache().capacity_conflicts(), 1u);
  }
  {
    TenantOptions to = manual();
    to.cache.capacity_bytes = 32 * kMiB;
    Tenant tenant(*g, to);
    ::rocksdb::Options o;
    EXPECT_TRUE(tenant.configure(o).ok());
    tenant.safe_point();
    EXPECT_EQ(tenant.cache().capacity_conflicts(), 0u);
    // The protection raised above the fixed size later: counted once, while it lasts.
    g->set_low(48 * kMiB);
    tenant.safe_point();
    tenant.safe_point();
    EXPECT_TRUE(tenant.cache().below_protection());
    EXPECT_EQ(tenant.cache().capacity_conflicts(), 1u);
    g->set_low(0);
    tenant.safe_point();
    EXPECT_FALSE(tenant.cache().below_protection());
    EXPECT_EQ(tenant.cache().capacity_conflicts(), 1u);
  }
}

}  // namespace
}  // namespace memcg::rocksdb::testing
