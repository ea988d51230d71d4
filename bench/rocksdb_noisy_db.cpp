// The noisy-neighbour benchmark: the data sets, RocksDB's options, the process's RSS
// (rocksdb_noisy.hpp).
#include <rocksdb/cache.h>
#include <rocksdb/db.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "rocksdb_noisy.hpp"

namespace noisy {

uint64_t rss_bytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  unsigned long long size = 0, resident = 0;
  const int n = std::fscanf(f, "%llu %llu", &size, &resident);
  std::fclose(f);
  return n == 2 ? resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE)) : 0;
}

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "rocksdb_noisy_bench: %s\n", what.c_str());
  std::exit(2);
}

void check(const ::rocksdb::Status& s, const std::string& what) {
  if (!s.ok()) die(what + ": " + s.ToString());
}

::rocksdb::BlockBasedTableOptions table_options() {
  ::rocksdb::BlockBasedTableOptions t;
  t.block_size = 4096;
  t.cache_index_and_filter_blocks = true;
  t.filter_policy.reset(::rocksdb::NewBloomFilterPolicy(10));
  return t;
}

::rocksdb::Options db_options() {
  ::rocksdb::Options o;
  o.create_if_missing = true;
  o.compression = ::rocksdb::kNoCompression;
  o.write_buffer_size = 4 * kMiB;
  return o;
}

void with_cache(::rocksdb::Options& o, std::shared_ptr<::rocksdb::Cache> cache) {
  ::rocksdb::BlockBasedTableOptions t = table_options();
  t.block_cache = std::move(cache);
  o.table_factory.reset(::rocksdb::NewBlockBasedTableFactory(t));
}

std::unique_ptr<::rocksdb::DB> open_db(const ::rocksdb::Options& o, const std::string& path) {
  ::rocksdb::DB* db = nullptr;
  check(::rocksdb::DB::Open(o, path, &db), "open " + path);
  return std::unique_ptr<::rocksdb::DB>(db);
}

std::shared_ptr<::rocksdb::Cache> strict_cache(uint64_t bytes) {
  ::rocksdb::LRUCacheOptions lru;
  lru.capacity = bytes;
  lru.strict_capacity_limit = true;
  return ::rocksdb::NewLRUCache(lru);
}

void build(const std::string& path, int keys) {
  ::rocksdb::Options o = db_options();
  with_cache(o, ::rocksdb::NewLRUCache(8 * kMiB));
  auto db = open_db(o, path);
  for (int i = 0; i < keys;) {
    ::rocksdb::WriteBatch b;
    for (int j = 0; j < 1000 && i < keys; ++j, ++i) b.Put(key(i), value(i));
    check(db->Write(no_wal(), &b), "build " + path);
  }
  check(db->Flush(::rocksdb::FlushOptions()), "flush");
  check(db->CompactRange(::rocksdb::CompactRangeOptions(), nullptr, nullptr), "compact");
}

}  // namespace noisy
