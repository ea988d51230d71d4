// The Prometheus exposition, checked with a parser of the text format written here (and with
// promtool where it is installed).
#include "promtool.hpp"
#include "memcg/files/prometheus.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <stdexcept>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "memcg/base/clock.hpp"
#include "memcg/core/admission/admission.hpp"
#include "memcg/core/admission/admission_queue.hpp"
#include "memcg/core/admission/reservation.hpp"
#include "memcg/core/charge/charge.hpp"
#include "memcg/core/wait/charge_wait.hpp"
#include "memcg/core/tree/controller.hpp"
#include "watchdog.hpp"

namespace memcg {
namespace {

struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;  // unescaped values
  double value;
};

struct Family {
  std::string help;
  std::string type;
  std::vector<Sample> samples;
};

bool metric_name_char(char c, bool first) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
         (!first && c >= '0' && c <= '9');
}

// Parses a label value starting after its opening quote; `i` ends after the closing quote.
bool parse_label_value(const std::string& line, size_t& i, std::string* out) {
  out->clear();
  while (i < line.size()) {
    const char c = line[i++];
    if (c == '"') return true;
    if (c == '\n') return false;
    if (c != '\\') {
      *out += c;
      continue;
    }
    if (i >= line.size()) return false;
    const char e = line[i++];
    if (e == '\\') {
      *out += '\\';
    } else if (e == '"') {
      *out += '"';
    } else if (e == 'n') {
      *out += '\n';
    } else {
      return false;
    }
  }
  return false;
}

bool parse_value(const std::string& s, double* v) {
  if (s == "+Inf") {
    *v = INFINITY;
    return true;
  }
  if (s == "-Inf") {
    *v = -INFINITY;
    return true;
  }
  if (s == "NaN") {
    *v = NAN;
    return true;
  }
  char* end = nullptr;
  *v = std::strtod(s.c_str(), &end);
  return !s.empty() && end == s.c_str() + s.size();
}

// Text format 0.0.4: # HELP / # TYPE lines, other comments, blank lines, and samples
// `name{label="value",...} value [timestamp]`. Fails the test on any malformed line, on a sample
// whose family lacks HELP or TYPE before it, on repeated HELP/TYPE, on a family whose samples
// are not contiguous, and on a repeated series.
void parse_into(const std::string& text, std::map<std::string, Family>* out) {
  std::map<std::string, Family>& families = *out;
  std::set<std::string> series;
  std::string current;  // family of the last sample
  std::set<std::string> closed;
  std::istringstream in(text);
  std::string line;
  int n = 0;
  EXPECT_TRUE(text.empty() || text.back() == '\n');
  while (std::getline(in, line)) {
    ++n;
    SCOPED_TRACE("line " + std::to_string(n) + ": " + line);
    if (line.empty()) continue;
    if (line[0] == '#') {
      std::istringstream c(line);
      std::string hash, kind, name;
      c >> hash >> kind >> name;
      if (kind != "HELP" && kind != "TYPE") continue;  // a plain comment
      EXPECT_EQ(hash, "#");
      EXPECT_FALSE(name.empty());
      Family& f = families[name];
      std::string rest;
      std::getline(c, rest);
      if (!rest.empty() && rest[0] == ' ') rest.erase(0, 1);
      if (kind == "HELP") {
        EXPECT_TRUE(f.help.empty()) << "second HELP";
        EXPECT_TRUE(f.samples.empty()) << "HELP after samples";
        EXPECT_FALSE(rest.empty());
        f.help = rest;
      } else {
        EXPECT_TRUE(f.type.empty()) << "second TYPE";
        EXPECT_TRUE(f.samples.empty()) << "TYPE after samples";
        EXPECT_TRUE(rest == "counter" || rest == "gauge" || rest == "histogram" ||
                    rest == "summary" || rest == "untyped")
            << rest;
        f.type = rest;
      }
      continue;
    }
    Sample s;
    size_t i = 0;
    while (i < line.size() && metric_name_char(line[i], i == 0)) ++i;
    s.name = line.substr(0, i);
    ASSERT_FALSE(s.name.empty());
    if (i < line.size() && line[i] == '{') {
      ++i;
      while (i < line.size() && line[i] != '}') {
        const size_t start = i;
        while (i < line.size() && metric_name_char(line[i], i == start)) ++i;
        const std::string label = line.substr(start, i - start);
        ASSERT_FALSE(label.empty());
        ASSERT_LT(i + 1, line.size());
        ASSERT_EQ(line[i], '=');
        ASSERT_EQ(line[i + 1], '"');
        i += 2;
        std::string value;
        ASSERT_TRUE(parse_label_value(line, i, &value));
        ASSERT_TRUE(s.labels.emplace(label, value).second) << "label repeated";
        if (i < line.size() && line[i] == ',') ++i;
      }
      ASSERT_LT(i, line.size());
      ++i;  // '}'
    }
    ASSERT_LT(i, line.size());
    ASSERT_EQ(line[i], ' ');
    std::istringstream rest(line.substr(i + 1));
    std::string value, timestamp, extra;
    rest >> value >> timestamp >> extra;
    ASSERT_TRUE(parse_value(value, &s.value)) << value;
    ASSERT_TRUE(extra.empty());
    if (!timestamp.empty()) {
      ASSERT_EQ(timestamp.find_first_not_of("-0123456789"), std::string::npos);
    }

    // A histogram's samples are name_bucket, name_sum and name_count of the family `name`.
    std::string fam = s.name;
    if (families.find(fam) == families.end())
      for (const std::string suffix : {"_bucket", "_sum", "_count"})
        if (fam.size() > suffix.size() &&
            fam.compare(fam.size() - suffix.size(), suffix.size(), suffix) == 0) {
          const auto base = families.find(fam.substr(0, fam.size() - suffix.size()));
          if (base != families.end() && base->second.type == "histogram") fam = base->first;
        }
    auto it = families.find(fam);
    ASSERT_NE(it, families.end()) << "sample without HELP/TYPE";
    ASSERT_FALSE(it->second.help.empty()) << "sample before HELP";
    ASSERT_FALSE(it->second.type.empty()) << "sample before TYPE";
    if (fam != current) {
      ASSERT_EQ(closed.count(fam), 0u) << "family samples not contiguous";
      if (!current.empty()) closed.insert(current);
      current = fam;
    }
    std::string key = s.name;
    for (const auto& [k, v] : s.labels) key += "|" + k + "=" + v;
    EXPECT_TRUE(series.insert(key).second) << "repeated series";
    it->second.samples.push_back(std::move(s));
  }
}

std::map<std::string, Family> parse_exposition(const std::string& text) {
  std::map<std::string, Family> families;
  parse_into(text, &families);
  return families;
}

double value_of(const std::map<std::string, Family>& f, const std::string& name,
                const std::map<std::string, std::string>& labels) {
  auto it = f.find(name);
  if (it == f.end()) return NAN;
  for (const Sample& s : it->second.samples)
    if (s.labels == labels) return s.value;
  return NAN;
}

struct Populated {
  Populated() : ctl(options()) {
    EXPECT_EQ(ctl.create("tenants", &tenants), 0);
    EXPECT_EQ(ctl.create("tenants/a.b-c:d@e+f_g", &odd), 0);
    EXPECT_EQ(ctl.create("tenants/gone", &gone), 0);
    odd->set_max(64 << 20);
    odd->set_low(1 << 20);
    EXPECT_TRUE(charged(try_charge(*odd, 10, kDefaultCharge, ctl.stat_index("hash_tables"))));
    EXPECT_TRUE(charged(try_charge(*odd, 3, kDefaultCharge, StatRegistry::kSock)));
    odd->raise(Event::kHigh);
    EXPECT_EQ(ctl.remove(*gone), 0);
    ctl.flush_stats();
  }
  ~Populated() {
    uncharge(*odd, 10, ctl.stat_index("hash_tables"));
    uncharge(*odd, 3, StatRegistry::kSock);
  }
  static Options options() {
    Options o;
    o.stat_kinds = {"hash_tables"};
    return o;
  }
  Controller ctl;
  GroupRef tenants, odd, gone;
};

TEST(PrometheusTest, EscapesLabelValuesAndHelp) {
  EXPECT_EQ(prometheus_escape_label("plain/a.b"), "plain/a.b");
  EXPECT_EQ(prometheus_escape_label("a\"b"), "a\\\"b");
  EXPECT_EQ(prometheus_escape_label("a\\b"), "a\\\\b");
  EXPECT_EQ(prometheus_escape_label("a\nb"), "a\\nb");
  EXPECT_EQ(prometheus_escape_label("\\\"\n"), "\\\\\\\"\\n");
  EXPECT_EQ(prometheus_escape_help("say \"x\"\\\n"), "say \"x\"\\\\\\n");

  // Round trip through the parser's unescaping.
  const std::string nasty = "q\"uo\\te\nnl";
  const std::string line = "m{group=\"" + prometheus_escape_label(nasty) + "\"} 1\n";
  const auto f = parse_exposition("# HELP m h\n# TYPE m gauge\n" + line);
  ASSERT_EQ(f.at("m").samples.size(), 1u);
  EXPECT_EQ(f.at("m").samples[0].labels.at("group"), nasty);
}

TEST(PrometheusTest, EveryLineParsesAndEveryFamilyHasHelpAndType) {
  Populated t;
  const std::string text = render_prometheus(t.ctl);
  const auto f = parse_exposition(text);
  for (const char* name :
       {"memcg_memory_current_bytes", "memcg_memory_peak_bytes", "memcg_memory_min_bytes",
        "memcg_memory_low_bytes", "memcg_memory_high_bytes", "memcg_memory_max_bytes",
        "memcg_memory_events_total", "memcg_memory_events_local_total", "memcg_memory_stat_bytes",
        "memcg_memory_stat_events_total", "memcg_memory_wait_waiters",
        "memcg_memory_wait_queued_bytes"}) {
    ASSERT_EQ(f.count(name), 1u) << name;
    EXPECT_FALSE(f.at(name).samples.empty()) << name;
  }
  EXPECT_EQ(f.at("memcg_memory_events_total").type, "counter");
  EXPECT_EQ(f.at("memcg_memory_stat_bytes").type, "gauge");

  const std::string odd = "tenants/a.b-c:d@e+f_g";
  const uint64_t unit = t.ctl.unit_size();
  EXPECT_EQ(value_of(f, "memcg_memory_current_bytes", {{"group", odd}}),
            static_cast<double>(t.odd->current()));
  EXPECT_EQ(value_of(f, "memcg_memory_current_bytes", {{"group", "/"}}),
            static_cast<double>(t.ctl.root().current()));
  EXPECT_EQ(value_of(f, "memcg_memory_max_bytes", {{"group", odd}}), 64 << 20);
  EXPECT_EQ(value_of(f, "memcg_memory_low_bytes", {{"group", odd}}), 1 << 20);
  EXPECT_TRUE(std::isinf(value_of(f, "memcg_memory_max_bytes", {{"group", "tenants"}})));
  EXPECT_TRUE(std::isinf(value_of(f, "memcg_memory_high_bytes", {{"group", "tenants"}})));
  EXPECT_EQ(value_of(f, "memcg_memory_events_total", {{"group", "tenants"}, {"event", "high"}}), 1);
  EXPECT_EQ(
      value_of(f, "memcg_memory_events_local_total", {{"group", "tenants"}, {"event", "high"}}), 0);
  EXPECT_EQ(value_of(f, "memcg_memory_events_local_total", {{"group", odd}, {"event", "high"}}), 1);
  EXPECT_EQ(value_of(f, "memcg_memory_stat_bytes", {{"group", "/"}, {"item", "hash_tables"}}),
            10.0 * unit);
  EXPECT_EQ(value_of(f, "memcg_memory_stat_bytes", {{"group", odd}, {"item", "sock"}}), 3.0 * unit);
  EXPECT_FALSE(std::isnan(
      value_of(f, "memcg_memory_stat_events_total", {{"group", odd}, {"item", "pgscan"}})));
  // The root has no knobs and no events; a removed group is left out.
  EXPECT_TRUE(std::isnan(value_of(f, "memcg_memory_max_bytes", {{"group", "/"}})));
  EXPECT_TRUE(
      std::isnan(value_of(f, "memcg_memory_events_total", {{"group", "/"}, {"event", "high"}})));
  EXPECT_TRUE(std::isnan(value_of(f, "memcg_memory_current_bytes", {{"group", "tenants/gone"}})));
  // Every group has the same set of stat samples as memory.stat has lines.
  EXPECT_EQ(f.at("memcg_memory_stat_bytes").samples.size() +
                f.at("memcg_memory_stat_events_total").samples.size(),
            3 * (t.ctl.stats().size() + 2));
}

// The document in pieces is render_prometheus()'s, byte for byte, whatever the piece size, and
// size() counts it exactly before a byte is written.
TEST(PrometheusTest, ExpositionInPiecesIsTheDocument) {
  Populated t;
  std::vector<GroupRef> more;
  for (int i = 0; i < 50; ++i) {
    GroupRef g;
    ASSERT_EQ(t.ctl.create(*t.tenants, "g" + std::to_string(i), &g), 0);
    g->set_max(static_cast<uint64_t>(i + 1) << 20);
    if (i % 3 == 0) g->raise(Event::kMax);
    more.push_back(g);
  }
  const std::string whole = render_prometheus(t.ctl);
  for (size_t piece : {size_t{1}, size_t{100}, size_t{4096}, SIZE_MAX}) {
    PrometheusExposition doc(t.ctl);
    EXPECT_EQ(doc.groups(), t.ctl.nr_groups());
    EXPECT_EQ(doc.size(), whole.size()) << piece;
    std::string all, p = "x";  // a piece is appended, even to a string longer than asked
    size_t calls = 0;
    while (doc.next(&p, piece)) {
      ASSERT_GT(p.size(), 1u);
      all.append(p, 1, std::string::npos);
      p = "x";
      ++calls;
    }
    EXPECT_EQ(p, "x") << "appended at the end";
    EXPECT_FALSE(doc.next(&p, piece));
    EXPECT_EQ(all, whole) << "pieces of " << piece;
    EXPECT_EQ(doc.size(), whole.size());
    if (piece == 4096) {
      EXPECT_GE(calls, whole.size() / (4096 + 4096));
    }
  }
  // read(): into fixed buffers, full ones until the end, lines split where a buffer ends.
  for (size_t size : {size_t{1}, size_t{7}, size_t{4096}, size_t{256} << 10}) {
    PrometheusExposition doc(t.ctl);
    std::vector<char> buf(size);
    std::string all;
    size_t n;
    while ((n = doc.read(buf.data(), size)) > 0) {
      all.append(buf.data(), n);
      if (n < size) {
        EXPECT_EQ(all.size(), whole.size()) << "a short read before the end";
      }
    }
    EXPECT_EQ(doc.read(buf.data(), size), 0u);
    EXPECT_EQ(all, whole) << "buffers of " << size;
  }
  // Both mixed: read() keeps what did not fit, next() hands it over first.
  {
    PrometheusExposition doc(t.ctl);
    std::string all, p;
    char buf[1000];
    for (int i = 0;; ++i) {
      if (i % 2 == 0) {
        const size_t n = doc.read(buf, sizeof buf);
        if (n == 0) break;
        all.append(buf, n);
      } else {
        p.clear();
        if (!doc.next(&p, 3000)) break;
        all += p;
      }
    }
    EXPECT_EQ(all, whole);
  }
}

TEST(PrometheusTest, PromtoolAcceptsTheOutput) {
  if (std::system("command -v promtool > /dev/null 2>&1") != 0) {
    GTEST_SKIP() << "promtool is not installed (Debian package 'prometheus')";
  }
  Populated t;
  EXPECT_TRUE(testing::promtool_accepts("promtool", render_prometheus(t.ctl)));
}

// memory.wait as gauges, and the `wait` event, while a charge waits and after.
TEST(PrometheusTest, WaitGaugesWhileAChargeWaits) {
  testing::Watchdog dog("WaitGaugesWhileAChargeWaits");
  ManualClock clock;  // the waiter's deadline never passes by itself
  Options o;
  o.batch = 1;
  o.clock = &clock;
  Controller ctl(o);
  GroupRef pool, kid;
  ASSERT_EQ(ctl.create("pool", &pool), 0);
  ASSERT_EQ(ctl.create("pool/kid", &kid), 0);
  pool->set_max(3 * ctl.unit_size());
  ASSERT_EQ(try_charge(*kid, 3), ChargeStatus::kOk);
  std::jthread waiter([&] {
    EXPECT_EQ(try_charge_wait_for(*kid, 3, std::chrono::hours(1)), WaitStatus::kTimedOut);
  });
  for (int i = 0; i < 10'000 && wait_stats(*pool).waiters == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_EQ(wait_stats(*pool).waiters, 1u);
  const std::string text = render_prometheus(ctl);
  const auto f = parse_exposition(text);
  EXPECT_EQ(f.at("memcg_memory_wait_waiters").type, "gauge");
  EXPECT_EQ(value_of(f, "memcg_memory_wait_waiters", {{"group", "pool"}}), 1);
  EXPECT_EQ(value_of(f, "memcg_memory_wait_queued_bytes", {{"group", "pool"}}),
            3.0 * ctl.unit_size());
  EXPECT_EQ(value_of(f, "memcg_memory_wait_waiters", {{"group", "pool/kid"}}), 0);
  EXPECT_TRUE(std::isnan(value_of(f, "memcg_memory_wait_waiters", {{"group", "/"}})));
  EXPECT_EQ(value_of(f, "memcg_memory_events_total", {{"group", "pool"}, {"event", "wait"}}), 1);
  EXPECT_EQ(
      value_of(f, "memcg_memory_events_local_total", {{"group", "pool/kid"}, {"event", "wait"}}),
      0);
  if (std::system("command -v promtool > /dev/null 2>&1") == 0) {
    EXPECT_TRUE(testing::promtool_accepts("promtool", text));
  }
  clock.advance(3'600'000'000'000);  // the hour passes
  waiter.join();
  const std::string after_text = render_prometheus(ctl);
  const auto after = parse_exposition(after_text);
  EXPECT_EQ(value_of(after, "memcg_memory_wait_waiters", {{"group", "pool"}}), 0);
  EXPECT_EQ(value_of(after, "memcg_memory_wait_queued_bytes", {{"group", "pool"}}), 0);
  // The wait time: one charge waited the hour, on the controller's clock.
  EXPECT_EQ(after.at("memcg_memory_wait_seconds").type, "histogram");
  EXPECT_NE(after_text.find("memcg_memory_wait_seconds_bucket{group=\"pool\",le=\"10.000000000\"} 0\n"),
            std::string::npos);
  EXPECT_NE(after_text.find("memcg_memory_wait_seconds_bucket{group=\"pool\",le=\"+Inf\"} 1\n"),
            std::string::npos);
  EXPECT_NE(after_text.find("memcg_memory_wait_seconds_sum{group=\"pool\"} 3600.000000000\n"),
            std::string::npos);
  EXPECT_NE(after_text.find("memcg_memory_wait_seconds_count{group=\"pool\"} 1\n"),
            std::string::npos);
  EXPECT_NE(after_text.find("memcg_memory_wait_seconds_count{group=\"pool/kid\"} 0\n"),
            std::string::npos);
  if (std::system("command -v promtool > /dev/null 2>&1") == 0) {
    EXPECT_TRUE(testing::promtool_accepts("promtool", after_text));
  }
  // How the requests ended: the one that waited timed out; one larger than pool's memory.max is
  // refused at once (never_fits, counted where the limit is).
  const auto outcome = [&](const std::map<std::string, Family>& fam, const char* group,
                           const char* what) {
    return value_of(fam, "memcg_memory_wait_outcomes_total", {{"group", group}, {"outcome", what}});
  };
  EXPECT_EQ(after.at("memcg_memory_wait_outcomes_total").type, "counter");
  EXPECT_EQ(outcome(after, "pool", "timed_out"), 1);
  EXPECT_EQ(outcome(after, "pool", "granted"), 0);
  EXPECT_EQ(outcome(after, "pool", "never_fits"), 0);
  EXPECT_TRUE(std::isnan(outcome(after, "/", "timed_out")));
  EXPECT_EQ(try_charge_wait_for(*kid, 4, std::chrono::hours(1)), WaitStatus::kNeverFits);
  const auto fits = parse_exposition(render_prometheus(ctl));
  EXPECT_EQ(outcome(fits, "pool", "never_fits"), 1);
  EXPECT_EQ(outcome(fits, "pool/kid", "never_fits"), 0);
  EXPECT_EQ(outcome(fits, "pool", "timed_out"), 1);
  uncharge(*kid, 2);
}

// Admission: the promise of an admitted reservation, a waiting admission that did not fit, and
// an admission queue's item, each as memory.wait and memory.admit.queue count them.
TEST(PrometheusTest, AdmissionFiguresAreExported) {
  testing::Watchdog dog("AdmissionFiguresAreExported");
  Controller ctl;
  const uint64_t unit = ctl.unit_size();
  GroupRef svc, t;
  ASSERT_EQ(ctl.create("svc", &svc), 0);
  ASSERT_EQ(ctl.create("svc/t", &t), 0);
  svc->set_max(64 * unit);
  ASSERT_EQ(set_admit_growth(*t, 2000), 0);  // expects twice what is asked
  Reservation r(*t);
  ASSERT_EQ(r.reserve_for(16 * unit, std::chrono::milliseconds(0)), ReserveStatus::kOk);
  const int64_t promised = admit_stats(*svc).promised_units;
  ASSERT_GT(promised, 0);
  // 40 units expect 80: never within 64 beside the promise; the admission waits, then gives up.
  Reservation big(*t);
  EXPECT_EQ(big.reserve_for(24 * unit, std::chrono::milliseconds(2)), ReserveStatus::kTimedOut);
  {
    AdmissionQueue q(ctl);
    std::atomic<bool> ran{false};
    WorkItem w;
    w.bytes = 4 * unit;
    w.run = [&ran](Reservation&) { ran = true; };
    ASSERT_EQ(q.submit(*t, std::move(w)), SubmitStatus::kOk);
    for (int i = 0; i < 10'000 && admit_queue_stats(*t).running + admit_queue_stats(*t).queued != 0;
         ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    EXPECT_TRUE(ran);
  }
  const std::string text = render_prometheus(ctl);
  const auto f = parse_exposition(text);
  EXPECT_EQ(f.at("memcg_memory_admit_promised_bytes").type, "gauge");
  EXPECT_EQ(value_of(f, "memcg_memory_admit_promised_bytes", {{"group", "svc"}}),
            static_cast<double>(promised) * unit);
  EXPECT_EQ(value_of(f, "memcg_memory_admit_waits_total", {{"group", "svc"}}),
            static_cast<double>(admit_stats(*svc).admit_waits));
  EXPECT_GE(value_of(f, "memcg_memory_admit_waits_total", {{"group", "svc"}}), 1);
  EXPECT_EQ(value_of(f, "memcg_memory_admit_reclaims_total", {{"group", "svc"}}), 0);
  EXPECT_EQ(value_of(f, "memcg_memory_admit_reclaimed_bytes_total", {{"group", "svc"}}), 0);
  const auto item = [&](const char* outcome) {
    return value_of(f, "memcg_memory_admit_queue_items_total",
                    {{"group", "svc/t"}, {"outcome", outcome}});
  };
  EXPECT_EQ(item("admitted"), 1);
  EXPECT_EQ(item("timed_out"), 0);
  EXPECT_EQ(value_of(f, "memcg_memory_admit_queue_items", {{"group", "svc/t"}, {"state", "queued"}}),
            0);
  EXPECT_GE(value_of(f, "memcg_memory_admit_queue_tries_total", {{"group", "svc/t"}}), 1);
  EXPECT_TRUE(std::isnan(value_of(f, "memcg_memory_admit_promised_bytes", {{"group", "/"}})));
  if (std::system("command -v promtool > /dev/null 2>&1") == 0) {
    EXPECT_TRUE(testing::promtool_accepts("promtool", text));
  }
}

// Forced charges: counted, and their size in bytes (whole units), controller-wide.
TEST(PrometheusTest, ForcedChargesAreCountedWithTheirBytes) {
  Options o;
  o.batch = 1;
  o.nr_shards = 1;
  Controller ctl(o);
  GroupRef g;
  ASSERT_EQ(ctl.create("g", &g), 0);
  g->set_max(2 * ctl.unit_size());
  ASSERT_EQ(try_charge(*g, 5, kNoFail), ChargeStatus::kForced);
  ASSERT_EQ(try_charge(*g, 1, kHighPrio), ChargeStatus::kForced);
  EXPECT_EQ(charge_stats(ctl).forced, 2u);
  EXPECT_EQ(charge_stats(ctl).forced_bytes, 6 * ctl.unit_size());
  const auto f = parse_exposition(render_prometheus(ctl));
  EXPECT_EQ(f.at("memcg_charges_forced_bytes_total").type, "counter");
  EXPECT_EQ(value_of(f, "memcg_charges_forced_total", {{"group", "/"}}), 2);
  EXPECT_EQ(value_of(f, "memcg_charges_forced_bytes_total", {{"group", "/"}}),
            6.0 * ctl.unit_size());
  EXPECT_TRUE(std::isnan(value_of(f, "memcg_charges_forced_bytes_total", {{"group", "g"}})));
  uncharge(*g, 6);
}

// ---- what is shown: PrometheusOptions --------------------------------------------------------

// The groups that have a memcg_memory_current_bytes sample.
std::set<std::string> groups_of(const std::map<std::string, Family>& f) {
  std::set<std::string> out;
  for (const Sample& s : f.at("memcg_memory_current_bytes").samples) out.insert(s.labels.at("group"));
  return out;
}

// root, p0..p2, each with children c0..c3 charged (p<i>/c<j> holds 1 + 4 i + j units), and
// p0/c0/deep under p0/c0. No stock (batch 1): memory.current is exactly what was charged.
struct Wide {
  static Options options() {
    Options o;
    o.batch = 1;
    o.nr_shards = 1;
    return o;
  }
  Wide() : ctl(options()) {
    for (int i = 0; i < 3; ++i) {
      GroupRef p;
      EXPECT_EQ(ctl.create("p" + std::to_string(i), &p), 0);
      parents.push_back(p);
      for (int j = 0; j < 4; ++j) {
        GroupRef c;
        EXPECT_EQ(ctl.create(*p, "c" + std::to_string(j), &c), 0);
        const int64_t units = 1 + 4 * i + j;
        EXPECT_TRUE(charged(try_charge(*c, units)));
        if (j == 1) c->set_max(uint64_t{64} << 20);
        c->raise(Event::kHigh);
        leaves.push_back(c);
        charges.push_back(units);
      }
    }
    EXPECT_EQ(ctl.create("p0/c0/deep", &deep), 0);
    ctl.flush_stats();
  }
  ~Wide() {
    for (size_t i = 0; i < leaves.size(); ++i) uncharge(*leaves[i], charges[i]);
  }
  Controller ctl;
  std::vector<GroupRef> parents, leaves;
  std::vector<int64_t> charges;
  GroupRef deep;
};

TEST(PrometheusOptionsTest, DepthLimitsTheLevelsShown) {
  Wide t;
  PrometheusOptions o;
  o.max_depth = 0;
  EXPECT_EQ(groups_of(parse_exposition(render_prometheus(t.ctl, o))), std::set<std::string>{"/"});
  o.max_depth = 1;
  EXPECT_EQ(groups_of(parse_exposition(render_prometheus(t.ctl, o))),
            (std::set<std::string>{"/", "p0", "p1", "p2"}));
  o.max_depth = 2;
  const auto two = groups_of(parse_exposition(render_prometheus(t.ctl, o)));
  EXPECT_EQ(two.size(), 1u + 3 + 12);
  EXPECT_EQ(two.count("p0/c0/deep"), 0u);
  o.max_depth = -1;
  EXPECT_EQ(groups_of(parse_exposition(render_prometheus(t.ctl, o))).count("p0/c0/deep"), 1u);
  // Relative to the subtree shown.
  o.group = "p0";
  o.max_depth = 1;
  EXPECT_EQ(groups_of(parse_exposition(render_prometheus(t.ctl, o))),
            (std::set<std::string>{"p0", "p0/c0", "p0/c1", "p0/c2", "p0/c3"}));
}

TEST(PrometheusOptionsTest, OneSubtreeKeepsTheControllerCounts) {
  Wide t;
  PrometheusOptions o;
  o.group = "/p1/";
  const std::string text = render_prometheus(t.ctl, o);
  const auto f = parse_exposition(text);
  EXPECT_EQ(groups_of(f), (std::set<std::string>{"p1", "p1/c0", "p1/c1", "p1/c2", "p1/c3"}));
  EXPECT_EQ(value_of(f, "memcg_memory_current_bytes", {{"group", "p1"}}),
            static_cast<double>(t.parents[1]->current()));
  EXPECT_EQ(value_of(f, "memcg_memory_events_total", {{"group", "p1/c2"}, {"event", "high"}}), 1);
  // Controller-wide families once, with the root's label, whichever subtree is shown.
  EXPECT_EQ(f.at("memcg_charges_failed_total").samples.size(), 1u);
  EXPECT_EQ(f.at("memcg_charges_failed_total").samples[0].labels.at("group"), "/");
  EXPECT_EQ(value_of(f, "memcg_exposition_groups_omitted", {}), 0);
  if (std::system("command -v promtool > /dev/null 2>&1") == 0) {
    EXPECT_TRUE(testing::promtool_accepts("promtool", text));
  }
}

TEST(PrometheusOptionsTest, TopKSumsTheOthersAndCountsThem) {
  Wide t;
  PrometheusOptions o;
  o.top_k = 6;  // root, p2, p1, p0 (their usage includes their children's), p2/c3, p2/c2
  PrometheusExposition doc(t.ctl, o);
  const size_t all = t.ctl.nr_groups();
  EXPECT_EQ(doc.groups(), 6u);
  EXPECT_EQ(doc.groups_omitted(), all - 6);
  const std::string text = render_prometheus(t.ctl, o);
  const auto f = parse_exposition(text);
  EXPECT_EQ(groups_of(f), (std::set<std::string>{"/", "p0", "p1", "p2", "p2/c3", "p2/c2",
                                                 "(other)"}));
  EXPECT_EQ(value_of(f, "memcg_exposition_groups_omitted", {}), static_cast<double>(all - 6));
  EXPECT_EQ(f.at("memcg_exposition_groups_omitted").type, "gauge");
  // "(other)" is the sum of the groups left out, family by family.
  uint64_t current = 0, events = 0;
  for (size_t i = 0; i < t.leaves.size(); ++i) {
    if (i == 10 || i == 11) continue;  // p2/c2, p2/c3
    current += t.leaves[i]->current();
    events += t.leaves[i]->events().get(Event::kHigh);
  }
  EXPECT_EQ(value_of(f, "memcg_memory_current_bytes", {{"group", "(other)"}}),
            static_cast<double>(current));
  EXPECT_EQ(value_of(f, "memcg_memory_events_local_total", {{"group", "(other)"}, {"event", "high"}}),
            static_cast<double>(events));
  EXPECT_EQ(value_of(f, "memcg_memory_stat_bytes", {{"group", "(other)"}, {"item", "anon"}}),
            static_cast<double>(current));
  // A knob left out unlimited makes the sum unlimited; no sum of PSI shares (the stall
  // seconds are read as one through rate()).
  EXPECT_TRUE(std::isinf(value_of(f, "memcg_memory_max_bytes", {{"group", "(other)"}})));
  EXPECT_TRUE(std::isnan(value_of(f, "memcg_memory_pressure_ratio",
                                  {{"group", "(other)"}, {"state", "some"}, {"window", "10s"}})));
  EXPECT_TRUE(std::isnan(value_of(f, "memcg_memory_pressure_stall_seconds_total",
                                  {{"group", "(other)"}, {"state", "some"}})));
  EXPECT_FALSE(std::isnan(value_of(f, "memcg_memory_pressure_stall_seconds_total",
                                   {{"group", "p2/c3"}, {"state", "some"}})));
  // Its length is counted as written, in pieces too.
  EXPECT_EQ(doc.size(), text.size());
  std::string pieces;
  std::vector<char> buf(333);
  for (size_t n; (n = doc.read(buf.data(), buf.size())) > 0;) pieces.append(buf.data(), n);
  EXPECT_EQ(pieces, text);
  if (std::system("command -v promtool > /dev/null 2>&1") == 0) {
    EXPECT_TRUE(testing::promtool_accepts("promtool", text));
  }

  // Only within the subtree and depth asked for.
  o.group = "p1";
  o.top_k = 2;  // p1, p1/c3
  const auto sub = parse_exposition(render_prometheus(t.ctl, o));
  EXPECT_EQ(groups_of(sub), (std::set<std::string>{"p1", "p1/c3", "(other)"}));
  EXPECT_EQ(value_of(sub, "memcg_exposition_groups_omitted", {}), 3);

  // 0, or as many as there are: every group, no "(other)".
  for (size_t k : {size_t{0}, all}) {
    PrometheusOptions every;
    every.top_k = k;
    const auto f2 = parse_exposition(render_prometheus(t.ctl, every));
    EXPECT_EQ(groups_of(f2).size(), all) << k;
    EXPECT_EQ(groups_of(f2).count("(other)"), 0u) << k;
    EXPECT_EQ(value_of(f2, "memcg_exposition_groups_omitted", {}), 0) << k;
  }
}

TEST(PrometheusOptionsTest, FamiliesTurnOff) {
  Wide t;
  PrometheusOptions o;
  o.disabled_families = {"memcg_memory_stat_bytes", "memcg_memory_wait_seconds",
                         "memcg_charges_failed_total", "memcg_exposition_groups_omitted"};
  PrometheusExposition doc(t.ctl, o);
  const std::string text = render_prometheus(t.ctl, o);
  EXPECT_EQ(doc.size(), text.size());
  const auto f = parse_exposition(text);
  for (const std::string& name : o.disabled_families) {
    EXPECT_EQ(f.count(name), 0u) << name;
    EXPECT_EQ(text.find(name), std::string::npos) << name;
  }
  EXPECT_EQ(f.count("memcg_memory_stat_events_total"), 1u);
  EXPECT_EQ(f.count("memcg_oom_reports_total"), 1u);
  // Every other family is there.
  const std::vector<std::string> names = prometheus_family_names();
  EXPECT_EQ(f.size(), names.size() - o.disabled_families.size());
  for (const std::string& name : names)
    if (std::find(o.disabled_families.begin(), o.disabled_families.end(), name) ==
        o.disabled_families.end()) {
      EXPECT_EQ(f.count(name), 1u) << name;
    }
  // All of them off: an empty document.
  o.disabled_families = names;
  EXPECT_EQ(render_prometheus(t.ctl, o), "");
}

TEST(PrometheusOptionsTest, BadOptionsAreRefusedWithAReason) {
  Wide t;
  const auto check = [&](const PrometheusOptions& o, int want, const char* says) {
    std::string why;
    EXPECT_EQ(check_prometheus_options(t.ctl, o, &why), want) << says;
    EXPECT_NE(why.find(says), std::string::npos) << why;
    try {
      (void)render_prometheus(t.ctl, o);
      ADD_FAILURE() << "rendered: " << says;
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()), why);
    }
  };
  PrometheusOptions o;
  o.max_depth = -2;
  check(o, EINVAL, "depth");
  o.max_depth = PrometheusOptions::kMaxDepth + 1;
  check(o, EINVAL, "depth");
  o = {};
  o.disabled_families = {"memcg_memory_current_bytes", "memcg_nope\n"};
  check(o, EINVAL, "unknown metric family 'memcg_nope?'");
  o = {};
  o.group = "p0/nope";
  check(o, ENOENT, "no such group: 'p0/nope'");
  o.group = "../p0";
  check(o, ENOENT, "no such group");
  // A removed group is no longer shown.
  GroupRef gone;
  ASSERT_EQ(t.ctl.create("gone", &gone), 0);
  o.group = "gone";
  EXPECT_EQ(check_prometheus_options(t.ctl, o, nullptr), 0);
  ASSERT_EQ(t.ctl.remove(*gone), 0);
  check(o, ENOENT, "no such group: 'gone'");
  // Valid ones: 0, and nothing said.
  o = {};
  o.group = "/";
  o.max_depth = PrometheusOptions::kMaxDepth;
  o.disabled_families = {"memcg_memory_peak_bytes"};
  EXPECT_EQ(check_prometheus_options(t.ctl, o, nullptr), 0);
}

// Groups created, charged and removed while expositions are made (the values are read after the
// walk, each group held by a reference): every document parses, shows at most top_k groups plus
// "(other)", and counts what it left out. Threads and lifetimes: run under TSan and ASan.
TEST(PrometheusOptionsTest, RendersWhileGroupsComeAndGo) {
  testing::Watchdog dog("RendersWhileGroupsComeAndGo");
  Wide t;
  std::atomic<bool> stop{false};
  std::atomic<int> cycles{0};
  std::thread churn([&] {
    for (int i = 0; !stop.load(); ++i) {
      GroupRef g;
      const std::string path = "p" + std::to_string(i % 3) + "/t" + std::to_string(i % 7);
      if (t.ctl.create(path, &g) != 0) continue;
      if (charged(try_charge(*g, 1 + i % 5))) uncharge(*g, 1 + i % 5);
      g->raise(Event::kMax);
      EXPECT_EQ(t.ctl.remove(*g), 0);
      cycles.fetch_add(1);
    }
  });
  PrometheusOptions top;
  top.top_k = 5;
  PrometheusOptions sub;
  sub.group = "p1";
  sub.max_depth = 1;
  sub.top_k = 3;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
  int renders = 0;
  while (std::chrono::steady_clock::now() < deadline || renders < 10) {
    for (const PrometheusOptions* o : {&top, &sub}) {
      PrometheusExposition doc(t.ctl, *o);
      const std::string text = render_prometheus(t.ctl, *o);
      const auto f = parse_exposition(text);
      const std::set<std::string> shown = groups_of(f);
      EXPECT_LE(doc.groups(), o->top_k);
      const double omitted = value_of(f, "memcg_exposition_groups_omitted", {});
      EXPECT_GE(omitted, 1);  // every subtree asked for holds more than top_k groups
      EXPECT_EQ(shown.count("(other)"), 1u);
      EXPECT_EQ(shown.size(), o->top_k + 1) << text.substr(0, 2000);
      ++renders;
    }
  }
  stop = true;
  churn.join();
  EXPECT_GT(cycles.load(), 0);
}

}  // namespace
}  // namespace memcg
