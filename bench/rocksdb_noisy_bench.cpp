// The noisy-neighbour benchmark of memcg::rocksdb (docs/BENCHMARKS-rocksdb.md, "Noisy neighbour").
//
// One service of three tenants under one budget (96 MiB by default):
//   quiet   point reads over its own data set (about 11 MiB of blocks), memory.min 16 MiB;
//           paced (a fixed rate, every Get timed) or hot (one thread, as fast as it can)
//   noisy   range scans (iterators of 256 keys from random keys) over a data set of about
//           135 MiB, much larger than the budget
//   writer  puts at 40 000/s (a batch of 40 every millisecond), limited to 48 MiB
// in four variants, each run in a child process of its own (a fresh heap and a clean RSS), and
// alternated: byte arena R1 R2, byte arena R1 R2, ...
//   byte    memcg::rocksdb::Tenant per tenant group, the groups under a parent at the budget
//   arena   the same in arena mode (memcg::rocksdb_arena: a jemalloc arena per tenant, every
//           thread that calls a tenant's RocksDB bound to it); where it is built
//   R1      RocksDB's own: one LRUCache of the budget with strict_capacity_limit, shared by the
//           three databases, and a WriteBufferManager per tenant charging it
//   R2      RocksDB's own: fixed strict LRU caches per tenant (quiet 16 MiB, writer 12 MiB and a
//           12 MiB WriteBufferManager, noisy the rest)
// Each child runs the cases in order: quiet alone (paced, hot); quiet beside the noisy scanner and
// the writer (paced, hot); the budget halved at run time (paced, the noise going on); the noisy
// tenant closed and a 64 MiB WriteBatch from the writer (both on the whole budget again);
// teardown. The parent prints the median over rounds of each figure per variant, and the
// per-round ratios of the hot reads. Latencies are each Get's own (a paced reader's wake-up is
// not in them). RSS is the child's growth from just before its databases open. jemalloc is the
// whole program's malloc where arena mode is built (linking memcg::jemalloc makes it so), for
// every variant alike.
//
//   rocksdb_noisy_bench [--rounds=3] [--phase=3] [--quiet-keys=50000] [--noisy-keys=600000]
//                       [--budget-mib=96] [--variants=byte,arena,r1,r2] [--smoke]
// A profile of one variant's hot reads (docs/BENCHMARKS-rocksdb.md): --build=DIR writes the data
// sets, then --child=byte|arena|r1|r2 --dir=DIR --hot-only runs that variant's hot reads alone.
// --smoke: small data, short phases, one round; exits non-zero unless every variant completed,
// the quiet tenant's reads all succeeded in byte and arena mode, their groups went back to 0,
// and the 64 MiB batch was refused by Tenant::write() and counted when written with DB::Write.
//
// This file is the parent and the command line; rocksdb_noisy.hpp lists the other parts.
#include <rocksdb/cache.h>
#include <rocksdb/db.h>
#include <stdlib.h>  // mkdtemp
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "rocksdb_noisy.hpp"

namespace noisy {
namespace {

// ---- the parent --------------------------------------------------------------------------------

struct Run {
  int status = -1;
  Results r;
  std::map<std::string, std::string> s;
};

Run spawn(const std::string& exe, const Config& c, const std::string& variant, int round) {
  std::vector<std::string> args = {exe,
                                   "--child=" + variant,
                                   "--dir=" + c.dir,
                                   "--round=" + std::to_string(round),
                                   "--phase=" + std::to_string(c.phase_s),
                                   "--settle=" + std::to_string(c.settle_s),
                                   "--quiet-keys=" + std::to_string(c.quiet_keys),
                                   "--noisy-keys=" + std::to_string(c.noisy_keys),
                                   "--budget-mib=" + std::to_string(c.budget / kMiB),
                                   "--arena-decay-ms=" + std::to_string(c.arena_decay_ms)};
  int fds[2];
  if (pipe(fds) != 0) die("pipe");
  const pid_t pid = fork();
  if (pid < 0) die("fork");
  if (pid == 0) {
    dup2(fds[1], 1);
    close(fds[0]);
    close(fds[1]);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(exe.c_str(), argv.data());
    _exit(127);
  }
  close(fds[1]);
  Run run;
  FILE* f = fdopen(fds[0], "r");
  if (f == nullptr) die("fdopen");
  char line[512];
  while (std::fgets(line, sizeof line, f) != nullptr) {
    char name[128];
    double v = 0;
    if (std::sscanf(line, "R %127s %lf", name, &v) == 2) {
      run.r[name] = v;
    } else if (std::sscanf(line, "S %127s", name) == 1) {
      const char* t = line + 2 + std::strlen(name) + 1;
      std::string text(t);
      while (!text.empty() && text.back() == '\n') text.pop_back();
      run.s[name] = text;
    }
  }
  std::fclose(f);
  int st = 0;
  if (waitpid(pid, &st, 0) != pid) die("waitpid");
  run.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return run;
}

double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

const char* label(const std::string& v) {
  return v == "byte" ? "byte" : v == "arena" ? "arena" : v == "r1" ? "R1 shared strict" : "R2 fixed";
}

int run_parent(Config c) {
  std::vector<std::string> variants;
  for (std::size_t p = 0; p <= c.variants.size();) {
    const std::size_t q = std::min(c.variants.find(',', p), c.variants.size());
    const std::string v = c.variants.substr(p, q - p);
#ifndef MEMCG_NOISY_ARENA
    if (v == "arena") {
      std::fprintf(stderr, "arena mode not built (memcg::rocksdb_arena): skipped\n");
      p = q + 1;
      continue;
    }
#endif
    if (!v.empty()) variants.push_back(v);
    p = q + 1;
  }
  std::string tmpl = (std::filesystem::temp_directory_path() / "memcg-noisy-XXXXXX").string();
  if (mkdtemp(tmpl.data()) == nullptr) die("mkdtemp");
  c.dir = tmpl;
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) die("readlink /proc/self/exe");
  exe[n] = 0;
  const auto t0 = Clock::now();
  build(c.dir + "/quiet", c.quiet_keys);
  build(c.dir + "/noisy", c.noisy_keys);
  std::printf("data: quiet %d keys, noisy %d keys of %zu B, built in %.1f s; budget %llu MiB, "
              "quiet memory.min %llu MiB, writer %llu MiB at %d puts/s; %d round(s) of %.1f s "
              "phases\n",
              c.quiet_keys, c.noisy_keys, kValue,
              std::chrono::duration<double>(Clock::now() - t0).count(),
              static_cast<unsigned long long>(c.budget / kMiB),
              static_cast<unsigned long long>(c.quiet_min / kMiB),
              static_cast<unsigned long long>(c.writer_max / kMiB), c.writer_rate, c.rounds,
              c.phase_s);
  std::fflush(stdout);
  std::map<std::string, std::vector<Run>> runs;
  bool all_ran = true;
  for (int round = 0; round < c.rounds; ++round) {
    for (const auto& v : variants) {
      const auto s0 = Clock::now();
      Run r = spawn(exe, c, v, round);
      std::fprintf(stderr, "round %d %-6s exit %d, %.1f s\n", round, v.c_str(), r.status,
                   std::chrono::duration<double>(Clock::now() - s0).count());
      if (r.status != 0 || r.r.empty()) all_ran = false;
      runs[v].push_back(std::move(r));
    }
  }
  std::error_code ec;
  std::filesystem::remove_all(c.dir, ec);

  auto med = [&](const std::string& v, const std::string& k) {
    std::vector<double> xs;
    for (const Run& r : runs[v])
      if (auto it = r.r.find(k); it != r.r.end()) xs.push_back(it->second);
    return median(xs);
  };
  auto row = [&](const char* title, auto cell) {
    std::printf("| %s |", title);
    for (const auto& v : variants) std::printf(" %s |", cell(v).c_str());
    std::printf("\n");
  };
  auto fmt = [](const char* f, auto... xs) {
    char b[128];
    std::snprintf(b, sizeof b, f, xs...);
    return std::string(b);
  };
  auto header = [&](const char* first) {
    std::printf("\n| %s |", first);
    for (const auto& v : variants) std::printf(" %s |", label(v));
    std::printf("\n|---|");
    for (std::size_t i = 0; i < variants.size(); ++i) std::printf("---|");
    std::printf("\n");
  };
  const double budget = mib(static_cast<double>(c.budget));
  auto lat = [&](const std::string& p) {
    return [&, p](const std::string& v) {
      return fmt("%.1f / %.1f / %.1f", med(v, p + "_p50_us"), med(v, p + "_p99_us"),
                 med(v, p + "_p999_us"));
    };
  };
  auto num = [&](const std::string& k, const char* f) {
    return [&, k, f](const std::string& v) { return fmt(f, med(v, k)); };
  };
  std::printf("\nMedians over %d round(s); latencies of the quiet tenant's Gets in us "
              "(p50 / p99 / p99.9).\n",
              c.rounds);
  header("quiet point reads");
  row("alone, paced: latency", lat("alone_paced"));
  row("alone, paced: hit ratio", num("alone_paced_hit", "%.3f"));
  row("alone, hot: reads/s", num("alone_hot_reads_s", "%.0f"));
  row("alone, hot: reads per CPU-second", num("alone_hot_reads_cpu_s", "%.0f"));
  row("alone, hot: latency", lat("alone_hot"));
  row("noisy, paced: latency", lat("noisy_paced"));
  row("noisy, paced: hit ratio", num("noisy_paced_hit", "%.3f"));
  row("noisy, hot: reads/s", num("noisy_hot_reads_s", "%.0f"));
  row("noisy, hot: reads per CPU-second", num("noisy_hot_reads_cpu_s", "%.0f"));
  row("noisy, hot: latency", lat("noisy_hot"));
  row("noisy, hot: hit ratio", num("noisy_hot_hit", "%.3f"));
  row("failed quiet reads (4 phases)", [&](const std::string& v) {
    return fmt("%.0f", med(v, "alone_paced_failed") + med(v, "alone_hot_failed") +
                           med(v, "noisy_paced_failed") + med(v, "noisy_hot_failed"));
  });
  row("noisy scanner: keys/s", num("noise_scan_keys_s", "%.0f"));
  row("writer: puts/s", num("noise_puts_s", "%.0f"));
  row("noise errors (scans, puts)", num("noise_errors", "%.0f"));
  row("RSS growth, peak (MiB, x budget)", [&](const std::string& v) {
    const double r = std::max(med(v, "noisy_paced_rss_mib"), med(v, "noisy_hot_rss_mib"));
    return fmt("%.1f (%.2fx)", r, r / budget);
  });
  row("counted, peak (MiB)", [&](const std::string& v) {
    return fmt("%.1f", std::max(med(v, "noisy_paced_counted_mib"), med(v, "noisy_hot_counted_mib")));
  });
  row("RSS growth - counted, mean (MiB)", [&](const std::string& v) {
    return fmt("%.1f", (med(v, "noisy_paced_gap_mib") + med(v, "noisy_hot_gap_mib")) / 2);
  });

  // The hot reads against RocksDB's own, per round (the variants ran next to each other).
  for (const char* base : {"r1", "r2"}) {
    if (!runs.count(base) || !runs.count("byte")) continue;
    for (const char* p : {"alone_hot_reads_s", "noisy_hot_reads_s", "alone_hot_reads_cpu_s",
                          "noisy_hot_reads_cpu_s"}) {
      std::vector<double> ratios;
      std::string list;
      for (std::size_t i = 0; i < runs["byte"].size() && i < runs[base].size(); ++i) {
        const auto a = runs["byte"][i].r.find(p), b = runs[base][i].r.find(p);
        if (a == runs["byte"][i].r.end() || b == runs[base][i].r.end() || b->second == 0) continue;
        ratios.push_back(a->second / b->second);
        list += fmt(" %.2f", a->second / b->second);
      }
      std::printf("\nbyte / %s, %s, per round:%s; median %.2fx\n", label(base), p, list.c_str(),
                  median(ratios));
    }
  }

  if (runs.count("byte") || runs.count("arena")) {
    header("caches after the noisy phases");
    for (const char* t : {"quiet", "noisy", "writer"}) {
      const std::string p = std::string("noisy_end_") + t + "_";
      row((std::string(t) + ": group MiB, capacity MiB").c_str(), [&](const std::string& v) {
        if (v != "byte" && v != "arena") return std::string("-");
        return fmt("%.1f, %.1f", med(v, p + "group_mib"), med(v, p + "capacity_mib"));
      });
      row((std::string(t) + ": reclaims / lowered / raised / deferred").c_str(),
          [&](const std::string& v) {
            if (v != "byte" && v != "arena") return std::string("-");
            return fmt("%.0f / %.0f / %.0f / %.0f", med(v, p + "reclaims"), med(v, p + "lowered"),
                       med(v, p + "raised"), med(v, p + "deferred"));
          });
    }
  }

  header("budget halved at run time");
  row("quiet latency (paced)", lat("halved"));
  row("quiet hit ratio", num("halved_hit", "%.3f"));
  row("failed quiet reads", num("halved_failed", "%.0f"));
  row("failed scans and puts", num("halved_noise_failed", "%.0f"));
  row("ms until counted <= budget/2", num("halved_fit_ms", "%.0f"));
  row("counted at the end (MiB)", num("halved_counted_end_mib", "%.1f"));
  row("RSS growth at the end (MiB, x budget/2)", [&](const std::string& v) {
    const double r = med(v, "halved_rss_end_mib");
    return fmt("%.1f (%.2fx)", r, r / (budget / 2));
  });

  header("noisy tenant closed");
  row("close took (ms)", num("close_ms", "%.1f"));
  row("counted freed (MiB)", num("close_freed_mib", "%.1f"));
  row("left to the noisy tenant (MiB)", [&](const std::string& v) {
    const double x = med(v, "close_noisy_left_mib");
    return x < 0 ? std::string("n/a") : fmt("%.2f", x);
  });
  row("RSS drop at once / after 1 s (MiB)", [&](const std::string& v) {
    return fmt("%.1f / %.1f", med(v, "close_rss_drop_mib"), med(v, "close_rss_drop_1s_mib"));
  });

  header("64 MiB batch, writer limited to 48 MiB");
  row("Tenant::write()", [&](const std::string& v) {
    return runs[v].empty() || !runs[v][0].s.count("burst_admitted") ? std::string("?")
                                                                   : runs[v][0].s["burst_admitted"];
  });
  row("DB::Write", [&](const std::string& v) {
    return runs[v].empty() || !runs[v][0].s.count("burst_direct") ? std::string("?")
                                                                 : runs[v][0].s["burst_direct"];
  });
  row("writer's count before / peak (MiB)", [&](const std::string& v) {
    return fmt("%.1f / %.1f", med(v, "burst_peak_before_mib"), med(v, "burst_peak_mib"));
  });
  row("forced past the limit, counted (MiB)", [&](const std::string& v) {
    const double x = med(v, "burst_forced_mib");
    return x < 0 ? std::string("n/a") : fmt("%.1f", x);
  });
  row("memtables after (MiB)", num("burst_memtable_mib", "%.1f"));
  row("RSS rise (MiB)", num("burst_rss_rise_mib", "%.1f"));
  header("teardown");
  row("bytes left charged", [&](const std::string& v) {
    const double x = med(v, "teardown_left_bytes");
    return x < 0 ? std::string("n/a") : fmt("%.0f", x);
  });

  if (!all_ran) {
    std::printf("\nFAILED: a variant did not complete\n");
    return 1;
  }
  if (!c.smoke) return 0;
  // The smoke's checks, on every run of byte and arena mode.
  bool ok = true;
  auto expect = [&](bool cond, const std::string& what) {
    if (!cond) std::printf("FAILED: %s\n", what.c_str());
    ok = ok && cond;
  };
  for (const auto& v : variants) {
    if (v != "byte" && v != "arena") continue;
    for (const Run& r : runs[v]) {
      auto get = [&](const char* k) {
        auto it = r.r.find(k);
        return it == r.r.end() ? NAN : it->second;
      };
      for (const char* p : {"alone_paced", "alone_hot", "noisy_paced", "noisy_hot"}) {
        expect(get((std::string(p) + "_failed").c_str()) == 0, v + ": no failed quiet read in " + p);
        expect(get((std::string(p) + "_reads").c_str()) > 0, v + ": quiet read in " + p);
      }
      expect(get("teardown_left_bytes") == 0, v + ": groups back to 0 after teardown");
      expect(get("burst_refused") == 1, v + ": the batch refused by Tenant::write()");
      expect(get("burst_direct_ok") == 1, v + ": the batch written by DB::Write");
      expect(get("burst_peak_mib") >= mib(static_cast<double>(c.burst)),
             v + ": the written batch counted (writer's peak >= its size)");
    }
  }
  std::printf("\nsmoke: %s\n", ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}

bool parse(int argc, char** argv, Config& c) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const std::size_t eq = a.find('=');
    const std::string k = a.substr(0, eq), v = eq == std::string::npos ? "" : a.substr(eq + 1);
    if (k == "--rounds") c.rounds = std::stoi(v);
    else if (k == "--phase") c.phase_s = std::stod(v);
    else if (k == "--settle") c.settle_s = std::stod(v);
    else if (k == "--quiet-keys") c.quiet_keys = std::stoi(v);
    else if (k == "--noisy-keys") c.noisy_keys = std::stoi(v);
    else if (k == "--budget-mib") c.budget = std::stoull(v) * kMiB;
    else if (k == "--variants") c.variants = v;
    else if (k == "--child") c.child = v;
    else if (k == "--dir") c.dir = v;
    else if (k == "--round") c.round = std::stoi(v);
    else if (k == "--build") c.build = v;
    else if (k == "--hot-only") c.hot_only = true;
    else if (k == "--arena-decay-ms") c.arena_decay_ms = std::stoll(v);
    else if (k == "--smoke") {
      c.smoke = true;
      c.rounds = 1;
      c.phase_s = 0.3;
      c.settle_s = 0.2;
      c.quiet_keys = 5'000;
      c.noisy_keys = 40'000;
    } else {
      std::fprintf(stderr,
                   "usage: rocksdb_noisy_bench [--rounds=N] [--phase=SECONDS] [--quiet-keys=N] "
                   "[--noisy-keys=N] [--budget-mib=N] [--variants=byte,arena,r1,r2] [--smoke]\n");
      return false;
    }
  }
  return c.rounds > 0 && c.phase_s > 0 && c.quiet_keys > 0 && c.noisy_keys > 0 && c.budget > 0;
}

}  // namespace
}  // namespace noisy

int main(int argc, char** argv) {
  noisy::Config c;
  if (!noisy::parse(argc, argv, c)) return 2;
  if (!c.build.empty()) {  // the data sets alone, for a child run by hand (a profile)
    noisy::build(c.build + "/quiet", c.quiet_keys);
    noisy::build(c.build + "/noisy", c.noisy_keys);
    return 0;
  }
  return c.child.empty() ? noisy::run_parent(c) : noisy::run_child(c);
}
