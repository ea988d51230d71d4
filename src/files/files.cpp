#include "memcg/files/files.hpp"

#include <algorithm>
#include <cerrno>
#include <functional>
#include <optional>

#include "memcg/base/internal/hook_bypass.hpp"
#include "memcg/core/admission/admission.hpp"
#include "memcg/core/admission/admission_queue.hpp"
#include "memcg/core/wait/charge_wait.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/core/tree/internal/file_node.hpp"
#include "memcg/core/charge/limits.hpp"
#include "memcg/core/charge/obj_stock.hpp"
#include "memcg/core/oom/oom.hpp"
#include "memcg/core/signal/psi.hpp"
#include "memcg/core/reclaim/reclaim.hpp"
#include "memcg/files/parse.hpp"

namespace memcg {
namespace {

enum Where : uint8_t { kNonRoot, kAll };

using Reader = std::function<int(Group&, std::string*)>;
using Writer = std::function<int(Group&, std::string_view, bool)>;

struct FileSpec {
  const char* name;
  Where where;
  Reader read;   // empty = write-only
  Writer write;  // empty = read-only
  // The read runs the controller's periodic work first (it may deliver notifications).
  bool ticks = false;
};

std::string bytes_line(uint64_t v) {
  return std::to_string(v) + "\n";
}

int read_limit(int64_t units, const Group& g, std::string* out) {
  *out = format_limit(static_cast<uint64_t>(units), g.controller().unit_shift());
  return 0;
}

// Parses a limit in the value grammar and hands the result, in bytes, to `apply`.
Writer limit_writer(void (*apply)(Group&, uint64_t bytes, bool nonblocking)) {
  return [apply](Group& g, std::string_view text, bool nonblocking) {
    uint64_t units = 0;
    if (int err = parse_limit(text, g.controller().unit_shift(), &units)) return err;
    apply(g, g.controller().to_bytes(static_cast<int64_t>(units)), nonblocking);
    return 0;
  };
}

// memory.reclaim: proactive reclaim of the requested amount from the subtree, in bites of a
// quarter of what is left, 16 fruitless bites at most. Swappiness is accepted and ignored: the
// library's reclaimers do not distinguish anonymous from file memory. The subtree's per-CPU
// stocks are drained first, as a blocking memory.high/max write does: units pre-charged there
// hold no memory, and what they give back counts towards the request.
int write_reclaim(Group& g, std::string_view text) {
  ReclaimRequest req;
  if (int err = parse_reclaim(text, &req)) return err;
  Controller& ctl = g.controller();
  const int64_t target = ctl.to_units_floor(req.bytes);
  const int64_t before = g.memory().usage();
  ctl.obj_stock().drain_all(&g);  // object reserves first: they return units to the stock
  ctl.stock().drain_all(&g);
  // Concurrent charges may raise the usage meanwhile: count no more than it dropped.
  int64_t reclaimed = std::max<int64_t>(0, before - g.memory().usage());
  int retries = 16;
  while (reclaimed < target) {
    const int64_t got = reclaim(g, (target - reclaimed) / 4, ReclaimReason::kProactive);
    reclaimed += got;
    if (got == 0 && --retries == 0) return EAGAIN;
  }
  return 0;
}

// One "key value\n" line of a flat keyed file.
template <typename Int>
void append_line(std::string& s, std::string_view key, Int v) {
  s.append(key);
  s += ' ';
  s += std::to_string(v);
  s += '\n';
}

// memory.stat: the kernel's flat "key value" lines, after a fold if enough is pending (or the
// periodic one is due: TableFile::read ticks first). State items first (bytes), then
// pgscan/pgsteal (the sums of their per-reason items, as in the kernel) and the event items
// (counts).
int read_stat(Group& g, std::string* out) {
  Controller& ctl = g.controller();
  ctl.rstat().flush_if_needed(g.stat_node());
  const StatRegistry& reg = ctl.stats();
  std::string s;
  auto line = [&](std::string_view key, int64_t v) { append_line(s, key, v); };
  for (size_t i = 0; i < reg.size(); ++i)
    if (reg.item(i).kind == StatKind::kState) line(reg.item(i).name, g.stat(static_cast<int>(i)));
  line("pgscan", g.stat(StatRegistry::kPgscanDirect) + g.stat(StatRegistry::kPgscanProactive));
  line("pgsteal", g.stat(StatRegistry::kPgstealDirect) + g.stat(StatRegistry::kPgstealProactive));
  for (size_t i = 0; i < reg.size(); ++i)
    if (reg.item(i).kind == StatKind::kEvent) line(reg.item(i).name, g.stat(static_cast<int>(i)));
  *out = std::move(s);
  return 0;
}

// memory.wait (an extension): the queue of charges waiting on this group's memory.max and the
// totals of what became of them (charge_wait.hpp, wait_stats()).
int read_wait(Group& g, std::string* out) {
  const WaitStats w = wait_stats(g);
  std::string s;
  auto line = [&](std::string_view key, uint64_t v) { append_line(s, key, v); };
  line("waiters", w.waiters);
  line("queued_bytes", w.queued_bytes);
  line("reserved_bytes", w.reserved_bytes);
  line("waits", w.waits);
  line("granted", w.granted);
  line("timed_out", w.timed_out);
  line("cancelled", w.cancelled);
  line("removed", w.removed);
  // Appended after the first eight, so that readers of those keep working.
  line("last_wait_usec", w.last_wait_ns / 1000);
  line("max_wait_usec", w.max_wait_ns / 1000);
  for (int c = kWaitPriorities - 1; c >= 0; --c) {
    const std::string p = wait_priority_name(static_cast<WaitPriority>(c));
    const WaitStats::Class& k = w.by_priority[c];
    line(p + "_waiters", k.waiters);
    line(p + "_queued_bytes", k.queued_bytes);
    line(p + "_waits", k.waits);
    line(p + "_granted", k.granted);
    line(p + "_timed_out", k.timed_out);
    line(p + "_cancelled", k.cancelled);
    line(p + "_removed", k.removed);
  }
  line("never_fits", w.never_fits);  // appended after the lines above, as they were
  // Admission by learned peak and growth past admission (admission.hpp), appended last.
  const AdmitStats a = admit_stats(g);
  line("admit_growth_permille", a.growth_permille);
  line("admit_samples", a.samples);
  line("admit_promised_bytes",
       static_cast<uint64_t>(std::max<int64_t>(a.promised_units, 0)) << g.controller().unit_shift());
  line("admit_waits", a.admit_waits);
  line("growth_waits", a.growth_waits);
  line("growth_granted", a.growth_granted);
  line("growth_bound_usec", a.growth_bound_ns / 1000);
  // The tolerated peak's factor and the admissions cut short (admission.hpp), appended after.
  line("admit_tolerance_permille", a.tolerance_permille);
  line("admit_skipped", a.skipped);
  // Reclaim for admission (admission.hpp): admissions that reclaimed on this level, and what.
  line("admit_reclaims", a.admit_reclaims);
  line("admit_reclaimed_bytes", a.admit_reclaimed_units << g.controller().unit_shift());
  *out = std::move(s);
  return 0;
}

// memory.admit.growth (an extension, admission.hpp): "auto" followed by the learned factor, or
// the fixed factor. Written: "auto", or a factor from 1 to 4 with up to three decimals.
std::string permille_text(uint32_t p) {
  std::string frac = std::to_string(p % 1000);
  return std::to_string(p / 1000) + "." + std::string(3 - frac.size(), '0') + frac;
}
int read_admit_growth(Group& g, std::string* out) {
  const uint32_t fixed = admit_growth_setting(g);
  *out = fixed != 0 ? permille_text(fixed) + "\n" : "auto " + permille_text(admit_growth(g)) + "\n";
  return 0;
}
int write_admit_growth(Group& g, std::string_view text, bool) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  if (text == "auto") return set_admit_growth(g, 0);
  // digits [ "." up to three digits ]
  uint64_t whole = 0, frac = 0;
  size_t i = 0, nd = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9' && nd < 4) {
    whole = whole * 10 + static_cast<uint64_t>(text[i++] - '0');
    ++nd;
  }
  if (nd == 0) return EINVAL;
  if (i < text.size() && text[i] == '.') {
    ++i;
    size_t fd = 0;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9' && fd < 3) {
      frac = frac * 10 + static_cast<uint64_t>(text[i++] - '0');
      ++fd;
    }
    if (fd == 0) return EINVAL;
    for (; fd < 3; ++fd) frac *= 10;
  }
  if (i != text.size()) return EINVAL;
  const uint64_t p = whole * 1000 + frac;
  if (p < 1000 || p > kAdmitMaxGrowthPermille) return EINVAL;
  return set_admit_growth(g, static_cast<uint32_t>(p));
}

// memory.admit.weight (an extension, admission_queue.hpp): the group's share of the memory an
// admission queue admits, an integer from 1 to 10000 (default 100), like cgroup's cpu.weight.
int read_admit_weight(Group& g, std::string* out) {
  *out = std::to_string(admit_weight(g)) + "\n";
  return 0;
}
int write_admit_weight(Group& g, std::string_view text, bool) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  if (text.empty() || text.size() > 5) return EINVAL;
  uint32_t v = 0;
  for (char ch : text) {
    if (ch < '0' || ch > '9') return EINVAL;
    v = v * 10 + static_cast<uint32_t>(ch - '0');
  }
  return set_admit_weight(g, v);  // EINVAL outside 1..10000
}

// memory.admit.queue (an extension, read-only): what the admission queues did with the group's
// items (admission_queue.hpp, admit_queue_stats()). The mean wait is over the admitted items.
int read_admit_queue(Group& g, std::string* out) {
  const AdmitQueueStats q = admit_queue_stats(g);
  std::string s;
  auto line = [&](std::string_view key, uint64_t v) { append_line(s, key, v); };
  line("queued", q.queued);
  line("running", q.running);
  line("submitted", q.submitted);
  line("admitted", q.admitted);
  line("timed_out", q.timed_out);
  line("cancelled", q.cancelled);
  line("never_fits", q.never_fits);
  line("refused", q.refused);
  line("tries", q.tries);
  line("errors", q.errors);
  line("mean_wait_usec", q.admitted ? q.wait_ns_sum / q.admitted / 1000 : 0);
  line("max_wait_usec", q.max_wait_ns / 1000);
  *out = std::move(s);
  return 0;
}

// memory.wait.priority (an extension): the class of the group's waiting charges that ask for
// none ("low", "normal" or "high"; charge_wait.hpp).
// memory.oom.order (an extension): the victim order of OOMs of this group's limit ("auto",
// "kernel" or "excess"; oom.hpp).
int write_oom_order(Group& g, std::string_view text, bool) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  for (OomOrder o : {OomOrder::kAuto, OomOrder::kKernel, OomOrder::kExcess})
    if (text == oom_order_name(o)) return set_oom_order(g, o);
  return EINVAL;
}

int write_wait_priority(Group& g, std::string_view text, bool) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  for (int c = 0; c < kWaitPriorities; ++c)
    if (text == wait_priority_name(static_cast<WaitPriority>(c)))
      return set_wait_priority(g, static_cast<WaitPriority>(c));
  return EINVAL;
}

const std::vector<FileSpec>& specs() {
  static const std::vector<FileSpec> table = {
      {"memory.current", kNonRoot,
       [](Group& g, std::string* out) {
         *out = bytes_line(g.current());
         return 0;
       },
       nullptr},
      {"memory.min", kNonRoot,
       [](Group& g, std::string* out) { return read_limit(g.memory().min(), g, out); },
       limit_writer([](Group& g, uint64_t b, bool) { g.set_min(b); })},
      {"memory.low", kNonRoot,
       [](Group& g, std::string* out) { return read_limit(g.memory().low(), g, out); },
       limit_writer([](Group& g, uint64_t b, bool) { g.set_low(b); })},
      {"memory.high", kNonRoot,
       [](Group& g, std::string* out) { return read_limit(g.memory().high(), g, out); },
       limit_writer([](Group& g, uint64_t b, bool nb) { write_high(g, b, nb); })},
      {"memory.max", kNonRoot,
       [](Group& g, std::string* out) { return read_limit(g.memory().max(), g, out); },
       limit_writer([](Group& g, uint64_t b, bool nb) { write_max(g, b, nb); })},
      {"memory.events", kNonRoot,
       [](Group& g, std::string* out) {
         *out = g.events().format();
         return 0;
       },
       nullptr},
      {"memory.events.local", kNonRoot,
       [](Group& g, std::string* out) {
         *out = g.events_local().format();
         return 0;
       },
       nullptr},
      {"memory.stat", kAll, read_stat, nullptr, /*ticks=*/true},
      {"memory.reclaim", kAll, nullptr,
       [](Group& g, std::string_view text, bool) { return write_reclaim(g, text); }},
      {"memory.oom.group", kNonRoot,
       [](Group& g, std::string* out) {
         *out = g.oom_group() ? "1\n" : "0\n";
         return 0;
       },
       [](Group& g, std::string_view text, bool) {
         int v = 0;
         if (int err = parse_oom_group(text, &v)) return err;
         g.set_oom_group(v == 1);
         return 0;
       }},
      // The library's own files, after the kernel's.
      {"memory.oom.order", kNonRoot,
       [](Group& g, std::string* out) {
         *out = std::string(oom_order_name(oom_order(g))) + "\n";
         return 0;
       },
       write_oom_order},
      {"memory.wait", kNonRoot, read_wait, nullptr},
      {"memory.admit.growth", kNonRoot, read_admit_growth, write_admit_growth},
      {"memory.admit.weight", kNonRoot, read_admit_weight, write_admit_weight},
      {"memory.admit.queue", kNonRoot, read_admit_queue, nullptr},
      {"memory.wait.priority", kNonRoot,
       [](Group& g, std::string* out) {
         *out = std::string(wait_priority_name(wait_priority(g))) + "\n";
         return 0;
       },
       write_wait_priority},
      {"memory.wait.preempt", kNonRoot,
       [](Group& g, std::string* out) {
         *out = wait_preempt(g) ? "1\n" : "0\n";
         return 0;
       },
       [](Group& g, std::string_view text, bool) {
         // "0" or "1", as memory.oom.group.
         int v = 0;
         if (int err = parse_oom_group(text, &v)) return err;
         return set_wait_preempt(g, v == 1);
       }},
  };
  return table;
}

const FileSpec* find_spec(const Group& g, std::string_view name) {
  for (const FileSpec& s : specs())
    if (name == s.name && (s.where == kAll || !g.is_root())) return &s;
  return nullptr;
}

class TableFile final : public File {
 public:
  TableFile(std::shared_ptr<internal::FileNode> node, const FileSpec& spec)
      : File(std::move(node), spec.name), spec_(spec) {}
  bool readable() const noexcept override { return static_cast<bool>(spec_.read); }
  bool writable() const noexcept override { return static_cast<bool>(spec_.write); }
  // Formatting a file is the library's own work: its memory is never charged (a full group
  // can still be read). Ticks and writes may call back (notifications, reclaimers): those run
  // outside the bypass, as everywhere (internal/lock.hpp).
  // ENODEV before EACCES: once the group is removed the file answers nothing else (kernfs).
  int read(std::string* out) override {
    internal::FileOp op(node());
    if (!op) return ENODEV;
    if (!spec_.read) return EACCES;
    if (spec_.ticks) op.group().controller().tick();
    internal::HookBypass bypass;
    return spec_.read(op.group(), out);
  }
  int write(std::string_view text, bool nonblocking) override {
    internal::FileOp op(node());
    if (!op) return ENODEV;
    if (!spec_.write) return EACCES;
    return spec_.write(op.group(), text, nonblocking);
  }

 private:
  const FileSpec& spec_;
};

// memory.peak's per-open-file state: it leaves the group with the file's reference.
struct PeakNode final : internal::FileNode {
  std::optional<Group::PeakWatcher> watcher;  // set once attached, until detached
  void detach(Group&) noexcept override { watcher.reset(); }
};

// memory.peak: the one file with per-open-file state.
class PeakFile final : public File {
 public:
  explicit PeakFile(std::shared_ptr<PeakNode> node) : File(node, "memory.peak"), peak_(*node) {}
  bool readable() const noexcept override { return true; }
  bool writable() const noexcept override { return true; }
  int read(std::string* out) override {
    internal::FileOp op(node());
    if (!op) return ENODEV;
    *out = bytes_line(peak_.watcher->read());
    return 0;
  }
  // Any content resets this handle's peak, as in the kernel.
  int write(std::string_view, bool) override {
    internal::FileOp op(node());
    if (!op) return ENODEV;
    peak_.watcher->reset();
    return 0;
  }

 private:
  PeakNode& peak_;  // node()'s
};

}  // namespace

int open_file(Group& group, std::string_view name, std::unique_ptr<File>* out) {
  internal::HookBypass bypass;  // the File is the library's
  if (name == "memory.peak" && !group.is_root()) {
    auto node = std::make_shared<PeakNode>();
    node->watcher.emplace(group);
    if (int err = internal::attach_file_node(group, node)) return err;
    *out = std::make_unique<PeakFile>(std::move(node));
    return 0;
  }
  if (name == "memory.pressure")  // per-open-file trigger state (psi.hpp)
    return internal::open_pressure_file(group, out);
  const FileSpec* spec = find_spec(group, name);
  if (!spec) return ENOENT;
  auto node = std::make_shared<internal::FileNode>();
  if (int err = internal::attach_file_node(group, node)) return err;
  *out = std::make_unique<TableFile>(std::move(node), *spec);
  return 0;
}

std::vector<std::string> file_names(const Group& group) {
  internal::HookBypass bypass;
  std::vector<std::string> names;
  for (const FileSpec& s : specs()) {
    if (s.where == kAll || !group.is_root()) names.emplace_back(s.name);
    if (std::string_view(s.name) == "memory.max" && !group.is_root())
      names.emplace_back("memory.peak");
  }
  names.emplace_back("memory.pressure");
  return names;
}

int read_file(Group& group, std::string_view name, std::string* out) {
  std::unique_ptr<File> f;
  if (int err = open_file(group, name, &f)) return err;
  return f->read(out);
}

int write_file(Group& group, std::string_view name, std::string_view text, bool nonblocking) {
  std::unique_ptr<File> f;
  if (int err = open_file(group, name, &f)) return err;
  return f->write(text, nonblocking);
}

}  // namespace memcg
