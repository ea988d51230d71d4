// Compiled (syntax only, never run) by check_nodiscard.cmake with -Werror=unused-result: every
// line marked `// ignored` drops a result of the error convention (memcg/base/errors.hpp) and
// must fail the compile there (`// ignored, virtual`: only where the compiler diagnoses virtual
// calls, clang; g++ 12 does not); nothing else may fail. One line per errno entry point and per
// status enum, so that a [[nodiscard]] lost in a header shows here by name.
#include <chrono>
#include <memory>
#include <stop_token>
#include <string>
#include <vector>

#include "memcg/host/binding.hpp"
#include "memcg/host/discovery.hpp"
#include "memcg/host/procfs.hpp"
#include "memcg/http/server.hpp"
#include "memcg/jemalloc/arena.hpp"
#include "memcg/memcg.hpp"

namespace {

[[maybe_unused]] void drops_every_result(memcg::Controller& ctl, memcg::Group& g,
                                         memcg::Member& member, memcg::File& file,
                                         memcg::http::Server& server,
                                         memcg::host::HostBinding& host,
                                         memcg::AdmissionQueue& queue) {
  std::string text;
  uint64_t u64 = 0;
  int i = 0;
  memcg::GroupRef ref;
  std::unique_ptr<memcg::File> out_file;
  std::unique_ptr<memcg::EventListener> listener;
  std::unique_ptr<memcg::jemalloc::Arena> arena;
  memcg::PressureListener pressure;
  memcg::PsiTrigger trigger;
  memcg::PsiTriggerSpec spec{};
  memcg::PressureLevel level{};
  memcg::PressureMode mode{};
  memcg::ReclaimRequest reclaim{};
  memcg::MirroredCharge mirror(g);
  memcg::Reservation reservation(g);
  memcg::ChargeHandle handle;
  memcg::host::HostCgroup cg;
  std::vector<memcg::host::CgroupLine> lines;
  std::vector<memcg::host::CgroupMount> mounts;

  // The three status enums: every function returning one.
  memcg::try_charge(g, 1);  // ignored
  memcg::try_charge_bytes(g, 4096);  // ignored
  member.charge(1);  // ignored
  memcg::try_charge_bytes_wait_for(g, 4096, std::chrono::seconds(1));  // ignored
  memcg::charge_wait_for(handle, g, 4096, std::chrono::seconds(1));  // ignored
  reservation.reserve(4096);  // ignored
  reservation.grow(4096);  // ignored

  // errno entry points.
  ctl.create("a");  // ignored
  ctl.create(g, "b", &ref);  // ignored
  ctl.remove("a");  // ignored
  ctl.remove(g);  // ignored
  g.set_max_checked(1);  // ignored
  g.memory().set_max_checked(1);  // ignored
  memcg::attach_current_thread(g);  // ignored
  memcg::set_wait_priority(g, memcg::WaitPriority::kHigh);  // ignored
  memcg::set_wait_preempt(g, true);  // ignored
  memcg::set_admit_weight(g, 100);  // ignored
  queue.submit(g, memcg::WorkItem{});  // ignored
  queue.submit(member, memcg::WorkItem{});  // ignored
  mirror.set(4096);  // ignored
  memcg::open_file(g, "memory.max", &out_file);  // ignored
  memcg::read_file(g, "memory.max", &text);  // ignored
  memcg::write_file(g, "memory.max", "1G");  // ignored
  file.read(&text);  // ignored, virtual
  file.write("1G");  // ignored, virtual
  memcg::parse_limit("1G", 12, &u64);  // ignored
  memcg::parse_bytes("1G", &u64);  // ignored
  memcg::parse_duration("1s", &u64);  // ignored
  memcg::parse_oom_group("1", &i);  // ignored
  memcg::parse_reclaim("1G", &reclaim);  // ignored
  memcg::parse_psi_trigger("some 1 2", true, &spec);  // ignored
  memcg::parse_pressure_level("low", &level, &mode);  // ignored
  memcg::parse_event_control("1 2 low", &i, &i, &level, &mode);  // ignored
  trigger.arm(g, spec, [] {});  // ignored
  trigger.arm(g, "some 1 2", [] {});  // ignored
  pressure.listen(g, level, mode, [](memcg::PressureLevel) {});  // ignored
  pressure.listen(g, "low", [](memcg::PressureLevel) {});  // ignored
  pressure.set_rate_limit(std::chrono::milliseconds(1));  // ignored
  memcg::register_event_control(g, "1 2 low", &pressure);  // ignored
  memcg::EventListener::open(g, memcg::EventsFile::kEvents, {}, &listener);  // ignored
  memcg::jemalloc::Arena::create(g, &arena);  // ignored
  server.start();  // ignored
  host.start();  // ignored
  host.refresh();  // ignored
  memcg::host::discover({}, &cg, &text);  // ignored
  memcg::host::read_small_file("/proc/self/cgroup", &text);  // ignored
  memcg::host::parse_proc_cgroup("0::/\n", &lines);  // ignored
  memcg::host::parse_mountinfo("", &mounts);  // ignored
  memcg::host::parse_limit_file("max\n", &u64);  // ignored
  memcg::host::parse_u64_file("1\n", &u64);  // ignored
  memcg::host::find_stat_value("anon 1\n", "anon", &u64);  // ignored
  memcg::host::find_status_kb("VmRSS: 1 kB\n", "VmRSS", &u64);  // ignored

  // A result dropped on purpose is cast to void: no diagnostic.
  (void)memcg::write_file(g, "memory.high", "max");
  static_cast<void>(memcg::try_charge(g, 1));
}

}  // namespace
