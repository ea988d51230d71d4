// The noisy-neighbour benchmark's child: one variant, every case once (rocksdb_noisy.hpp).
#include <rocksdb/db.h>
#include <rocksdb/iterator.h>
#include <rocksdb/statistics.h>
#include <rocksdb/write_batch.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "rocksdb_noisy.hpp"

namespace noisy {
namespace {

// ---- the cases ---------------------------------------------------------------------------------

struct Reads {
  std::vector<uint32_t> ns;  // each Get's latency
  uint64_t failed = 0;
  double seconds = 0;
  double cpu_seconds = 0;  // the reading thread's own CPU time (preemption left out)
};

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// The quiet tenant's point reads for `seconds`, on a thread bound as quiet: paced at
// c.paced_rate (a missed slot is not made up), or hot. A failed read: an error, a missing key or
// a wrong value.
//
// The latencies' buffer is reserved before the thread is bound: in arena mode, memory allocated on
// a bound thread is the tenant's (a hot phase's 4 MiB of latencies, and the same again as freed
// pages after it, were charged to quiet and spent its memory.min). It holds a read per
// microsecond of the phase (a hot Get takes about 4); a phase that fills it ends there.
Reads quiet_reads(Service& s, const Config& c, bool paced, double seconds, uint64_t seed) {
  Reads out;
  const std::size_t capacity = paced ? static_cast<std::size_t>(seconds * c.paced_rate) + 16
                                     : static_cast<std::size_t>(seconds * 1e6) + 16;
  out.ns.reserve(capacity);
  std::shared_ptr<void> bound = s.bind(kQuiet);
  ::rocksdb::DB& db = s.db(kQuiet);
  std::mt19937_64 rng(seed);
  std::string v;
  const auto start = Clock::now();
  const auto end = start + std::chrono::duration_cast<Clock::duration>(
                               std::chrono::duration<double>(seconds));
  const auto interval = std::chrono::nanoseconds(1'000'000'000 / c.paced_rate);
  auto next = start;
  const double cpu0 = thread_cpu_seconds();
  while (out.ns.size() < capacity) {
    if (paced) {
      next += interval;
      const auto now = Clock::now();
      if (next < now) next = now;
      std::this_thread::sleep_until(next);
    }
    const auto t0 = Clock::now();
    if (t0 >= end) break;
    const int k = static_cast<int>(rng() % static_cast<uint64_t>(c.quiet_keys));
    const ::rocksdb::Status st = db.Get(::rocksdb::ReadOptions(), key(k), &v);
    const auto t1 = Clock::now();
    if (!st.ok() || v != value(k)) ++out.failed;
    out.ns.push_back(static_cast<uint32_t>(
        std::min<int64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count(),
                          UINT32_MAX)));
  }
  out.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  out.cpu_seconds = thread_cpu_seconds() - cpu0;
  return out;
}

// The noisy scanner and the writer, from start() to stop().
struct Noise {
  std::atomic<bool> stop_flag{false};
  std::atomic<uint64_t> scanned{0}, scan_errors{0}, puts{0}, put_failed{0};
  std::thread scanner, writer;

  void start(Service& s, const Config& c) {
    scanner = std::thread([this, &s, &c] {
      std::shared_ptr<void> bound = s.bind(kNoisy);
      std::mt19937_64 rng(99);
      while (!stop_flag.load(std::memory_order_relaxed)) {
        std::unique_ptr<::rocksdb::Iterator> it(s.db(kNoisy).NewIterator(::rocksdb::ReadOptions()));
        it->Seek(key(static_cast<int>(rng() % static_cast<uint64_t>(c.noisy_keys))));
        int n = 0;
        for (; n < kScanLength && it->Valid(); ++n) it->Next();
        if (!it->status().ok()) scan_errors.fetch_add(1, std::memory_order_relaxed);
        scanned.fetch_add(static_cast<uint64_t>(n), std::memory_order_relaxed);
      }
    });
    writer = std::thread([this, &s, &c] {
      std::shared_ptr<void> bound = s.bind(kWriter);
      const int per_ms = std::max(1, c.writer_rate / 1000);
      auto next = Clock::now();
      int i = 0;
      while (!stop_flag.load(std::memory_order_relaxed)) {
        next += std::chrono::milliseconds(1);
        const auto now = Clock::now();
        if (next + std::chrono::milliseconds(100) < now) next = now;  // far behind: no catch-up
        std::this_thread::sleep_until(next);
        ::rocksdb::WriteBatch b;
        for (int j = 0; j < per_ms; ++j, ++i) b.Put(key(i), value(i));
        if (s.write(&b).ok())
          puts.fetch_add(static_cast<uint64_t>(per_ms), std::memory_order_relaxed);
        else
          put_failed.fetch_add(static_cast<uint64_t>(per_ms), std::memory_order_relaxed);
      }
    });
  }
  void stop() {
    stop_flag = true;
    if (scanner.joinable()) scanner.join();
    if (writer.joinable()) writer.join();
  }
  ~Noise() { stop(); }
};

double percentile(std::vector<uint32_t>& v, double q) {
  if (v.empty()) return 0;
  const std::size_t i = std::min(v.size() - 1, static_cast<std::size_t>(q * v.size()));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(i), v.end());
  return v[i];
}

// One measured phase: quiet's reads on their thread, RSS and the variant's count sampled every
// 5 ms on this one. fit_under != 0: also the time until the count is at or under it.
void phase(Service& s, const Config& c, const std::string& name, bool paced, double seconds,
           uint64_t rss0, Results& out, uint64_t fit_under = 0) {
  const uint64_t hit0 = s.quiet_stats().getTickerCount(::rocksdb::BLOCK_CACHE_HIT);
  const uint64_t miss0 = s.quiet_stats().getTickerCount(::rocksdb::BLOCK_CACHE_MISS);
  std::atomic<bool> done{false};
  Reads reads;
  const auto start = Clock::now();
  std::thread t([&] {
    reads = quiet_reads(s, c, paced, seconds, std::hash<std::string>()(name) + c.round);
    done.store(true);
  });
  uint64_t rss_max = 0, counted_max = 0;
  double gap_sum = 0;
  int samples = 0;
  double fit_ms = -1;
  while (!done.load()) {
    const uint64_t now_rss = rss_bytes();
    const uint64_t rss = now_rss - std::min(now_rss, rss0);
    const uint64_t counted = s.counted();
    rss_max = std::max(rss_max, rss);
    counted_max = std::max(counted_max, counted);
    gap_sum += static_cast<double>(rss) - static_cast<double>(counted);
    ++samples;
    if (fit_under != 0 && fit_ms < 0 && counted <= fit_under)
      fit_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  t.join();
  const uint64_t hits = s.quiet_stats().getTickerCount(::rocksdb::BLOCK_CACHE_HIT) - hit0;
  const uint64_t misses = s.quiet_stats().getTickerCount(::rocksdb::BLOCK_CACHE_MISS) - miss0;
  const std::string p = name + "_";
  out[p + "reads"] = static_cast<double>(reads.ns.size());
  out[p + "reads_s"] = static_cast<double>(reads.ns.size()) / reads.seconds;
  out[p + "reads_cpu_s"] =
      reads.cpu_seconds > 0 ? static_cast<double>(reads.ns.size()) / reads.cpu_seconds : 0;
  out[p + "failed"] = static_cast<double>(reads.failed);
  out[p + "p50_us"] = percentile(reads.ns, 0.50) / 1000;
  out[p + "p99_us"] = percentile(reads.ns, 0.99) / 1000;
  out[p + "p999_us"] = percentile(reads.ns, 0.999) / 1000;
  out[p + "hit"] = hits + misses ? static_cast<double>(hits) / static_cast<double>(hits + misses) : 0;
  out[p + "rss_mib"] = mib(static_cast<double>(rss_max));
  out[p + "counted_mib"] = mib(static_cast<double>(counted_max));
  out[p + "gap_mib"] = samples ? mib(gap_sum / samples) : 0;
  const uint64_t end_rss = rss_bytes();
  out[p + "rss_end_mib"] = mib(static_cast<double>(end_rss - std::min(end_rss, rss0)));
  out[p + "counted_end_mib"] = mib(static_cast<double>(s.counted()));
  if (fit_under != 0) out[p + "fit_ms"] = fit_ms;
}
}  // namespace

int run_child(Config c) {
  Results out;
  std::map<std::string, std::string> text;
  std::unique_ptr<Service> s = make_service(c);
  const uint64_t rss0 = rss_bytes();
  s->open(c);
  {  // warm the quiet tenant's cache: every key once
    std::thread t([&] {
      std::shared_ptr<void> bound = s->bind(kQuiet);
      std::string v;
      for (int i = 0; i < c.quiet_keys; ++i) s->db(kQuiet).Get(::rocksdb::ReadOptions(), key(i), &v);
    });
    t.join();
  }
  if (!c.hot_only) phase(*s, c, "alone_paced", true, c.phase_s, rss0, out);
  phase(*s, c, "alone_hot", false, c.phase_s, rss0, out);
  if (c.hot_only) {
    out["teardown_left_bytes"] = static_cast<double>(s->teardown());
    for (const auto& [k, v] : out) std::printf("R %s %.6g\n", k.c_str(), v);
    return 0;
  }
  {
    Noise noise;
    noise.start(*s, c);
    std::this_thread::sleep_for(std::chrono::duration<double>(c.settle_s));
    const uint64_t scanned0 = noise.scanned, puts0 = noise.puts;
    const auto t0 = Clock::now();
    phase(*s, c, "noisy_paced", true, c.phase_s, rss0, out);
    phase(*s, c, "noisy_hot", false, c.phase_s, rss0, out);
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    out["noise_scan_keys_s"] = static_cast<double>(noise.scanned - scanned0) / secs;
    out["noise_puts_s"] = static_cast<double>(noise.puts - puts0) / secs;
    const uint64_t errors0 = noise.scan_errors + noise.put_failed;
    s->counters(out, "noisy_end_");
    out["noise_errors"] = static_cast<double>(errors0);
    // Budget halved at run time, the noise going on.
    s->halve();
    phase(*s, c, "halved", true, c.phase_s, rss0, out, c.budget / 2);
    out["halved_noise_failed"] =
        static_cast<double>(noise.scan_errors + noise.put_failed - errors0);
    noise.stop();
    s->restore();  // the next cases on the whole budget
  }
  {  // the noisy tenant closed
    const uint64_t before = s->counted();
    const uint64_t rss_before = rss_bytes();
    const auto t0 = Clock::now();
    s->close_noisy();
    out["close_ms"] = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    out["close_freed_mib"] = mib(static_cast<double>(before) - static_cast<double>(s->counted()));
    out["close_noisy_left_mib"] = s->noisy_left();
    out["close_rss_drop_mib"] = mib(static_cast<double>(rss_before) - static_cast<double>(rss_bytes()));
    std::this_thread::sleep_for(std::chrono::seconds(1));
    out["close_rss_drop_1s_mib"] =
        mib(static_cast<double>(rss_before) - static_cast<double>(rss_bytes()));
  }
  {  // the burst: one batch of c.burst bytes in 64 KiB values
    ::rocksdb::WriteBatch batch;
    const std::string v(64 << 10, 'b');
    for (uint64_t i = 0; i < c.burst / (64 << 10); ++i) batch.Put("burst" + key(static_cast<int>(i)), v);
    const BurstResult b = s->burst(batch);
    out["burst_refused"] = b.refused;
    out["burst_direct_ok"] = b.direct_status == "OK" ? 1 : 0;
    out["burst_peak_before_mib"] = b.peak_before_mib;
    out["burst_peak_mib"] = b.peak_mib;
    out["burst_forced_mib"] = b.forced_mib;
    out["burst_memtable_mib"] = b.memtable_mib;
    out["burst_rss_rise_mib"] = b.rss_rise_mib;
    text["burst_admitted"] = b.refused < 0 ? "(no admission)" : b.admitted_status;
    text["burst_direct"] = b.direct_status;
  }
  out["teardown_left_bytes"] = static_cast<double>(s->teardown());
  s.reset();
  for (const auto& [k, v] : out) std::printf("R %s %.6g\n", k.c_str(), v);
  for (const auto& [k, v] : text) std::printf("S %s %s\n", k.c_str(), v.c_str());
  std::fflush(stdout);
  return 0;
}

}  // namespace noisy
