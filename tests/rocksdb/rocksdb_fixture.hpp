// Shared pieces of the memcg::rocksdb tests: a scratch directory, a tenant's database, a small
// load and random reads.
#pragma once

#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <rocksdb/options.h>

#include <atomic>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "memcg/memcg.hpp"
#include "memcg/rocksdb/tenant.hpp"

namespace memcg::rocksdb::testing {

inline constexpr uint64_t kMiB = 1 << 20;

class ScratchDir {
 public:
  ScratchDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "memcg-rocksdb-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp");
    path_ = tmpl;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string sub(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

inline std::string key(int i) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "key%09d", i);
  return buf;
}

// Incompressible enough that blocks stay near their configured size.
inline std::string value(int i, std::size_t size) {
  std::string v(size, '\0');
  uint64_t x = 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(i + 1);
  for (auto& c : v) {
    x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
    c = static_cast<char>('a' + (x * 0x2545f4914f6cdd1dull >> 59));
  }
  return v;
}

// Options for a small test database on `tenant`: 4 KiB blocks, small memtables.
inline ::rocksdb::Options small_options(const Tenant& tenant, uint64_t write_buffer_size = 256 << 10) {
  ::rocksdb::Options o;
  o.create_if_missing = true;
  o.write_buffer_size = write_buffer_size;
  o.max_background_jobs = 2;
  o.compression = ::rocksdb::kNoCompression;
  ::rocksdb::BlockBasedTableOptions t;
  t.block_size = 4096;
  const ::rocksdb::Status s = tenant.configure(o, t);
  if (!s.ok()) throw std::runtime_error("Tenant::configure: " + s.ToString());
  return o;
}

inline std::unique_ptr<::rocksdb::DB> open(const ::rocksdb::Options& o, const std::string& path) {
  ::rocksdb::DB* db = nullptr;
  ::rocksdb::Status s = ::rocksdb::DB::Open(o, path, &db);
  if (!s.ok()) throw std::runtime_error("DB::Open: " + s.ToString());
  return std::unique_ptr<::rocksdb::DB>(db);
}

// Writes keys [0, n); `flush` then flushes, `compact` also compacts everything into the last
// level, so that no background work runs afterwards.
inline void load(::rocksdb::DB& db, int n, std::size_t value_size, bool flush = true,
                 bool compact = false) {
  ::rocksdb::WriteOptions wo;
  wo.disableWAL = true;
  for (int i = 0; i < n; ++i) {
    ::rocksdb::Status s = db.Put(wo, key(i), value(i, value_size));
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  if (flush) {
    ASSERT_TRUE(db.Flush(::rocksdb::FlushOptions()).ok());
  }
  if (compact) {
    ASSERT_TRUE(db.CompactRange(::rocksdb::CompactRangeOptions(), nullptr, nullptr).ok());
  }
}

struct ReadResult {
  uint64_t reads = 0;
  uint64_t failed = 0;  // not ok, or not found, or a wrong value
};

// `threads` readers, each `reads_per_thread` random Gets over keys [0, n).
inline ReadResult random_reads(::rocksdb::DB& db, int n, std::size_t value_size, int threads,
                               int reads_per_thread, uint64_t seed = 1) {
  std::atomic<uint64_t> reads{0}, failed{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([&, t] {
      std::mt19937_64 rng(seed * 1000 + static_cast<uint64_t>(t));
      std::string v;
      for (int i = 0; i < reads_per_thread; ++i) {
        const int k = static_cast<int>(rng() % static_cast<uint64_t>(n));
        ::rocksdb::Status s = db.Get(::rocksdb::ReadOptions(), key(k), &v);
        if (!s.ok() || v != value(k, value_size)) failed.fetch_add(1);
        reads.fetch_add(1);
      }
    });
  for (auto& th : ts) th.join();
  return {reads.load(), failed.load()};
}

// Every stock of the controller back in the counters, so memory.current is exact.
inline void drain(Controller& ctl) {
  ctl.obj_stock().drain_all(nullptr);
  ctl.stock().drain_all(nullptr);
}

inline GroupRef make_group(Controller& ctl, const char* path) {
  GroupRef g;
  if (ctl.create(path, &g) != 0) throw std::runtime_error(path);
  return g;
}

}  // namespace memcg::rocksdb::testing
