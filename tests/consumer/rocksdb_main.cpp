// Uses the installed memcg::rocksdb component: a tenant's database, one write read back, its
// memtable counted in the group while open, and the group back to 0 once the database is closed
// and the tenant destroyed.
#include <memcg/memcg.hpp>
#include <memcg/rocksdb/tenant.hpp>
#include <rocksdb/db.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

int main() {
  std::string dir = (std::filesystem::temp_directory_path() / "memcg-consumer-XXXXXX").string();
  if (mkdtemp(dir.data()) == nullptr) return 1;
  int rc = 0;
  {
    memcg::Controller ctl;
    memcg::GroupRef g;
    if (ctl.create("tenant", &g) != 0) return 2;
    {
      memcg::rocksdb::TenantOptions to;
      to.tick = std::chrono::milliseconds(0);  // no governor thread: safe_point() below
      memcg::rocksdb::Tenant tenant(*g, to);
      rocksdb::Options options;
      options.create_if_missing = true;
      tenant.configure(options);
      rocksdb::DB* raw = nullptr;
      if (!rocksdb::DB::Open(options, dir + "/db", &raw).ok()) return 3;
      std::unique_ptr<rocksdb::DB> db(raw);
      tenant.add(db.get());
      if (!db->Put({}, "key", std::string(64 << 10, 'v')).ok()) rc = 4;
      std::string got;
      if (!db->Get({}, "key", &got).ok() || got.size() != (64u << 10)) rc = 5;
      tenant.safe_point();
      const uint64_t open_current = g->current();
      std::printf("rocksdb tenant current=%llu\n", static_cast<unsigned long long>(open_current));
      if (open_current < (64u << 10)) rc = 6;
      tenant.remove(db.get());
      db.reset();
    }
    if (g->current() != 0) rc = 7;
  }
  std::filesystem::remove_all(dir);
  return rc;
}
