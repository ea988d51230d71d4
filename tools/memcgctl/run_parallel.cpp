// The scenario runner: the lanes of a `parallel` block, threads scheduled one at a time on the
// virtual clock (runner.hpp, sim_clock.hpp).
#include "runner.hpp"

namespace memcgctl::detail {

bool Runner::perform_body(const Step&, const ParallelStep& p, StepResult* res) {
  const uint64_t start = clock_.now_ns();
  Json lanes = Json::object();
  clock_.run_lanes(
      p.lanes.size(),
      [&](size_t i) {
        const ParallelStep::Lane& lane = p.lanes[i];
        // The lane is a task of its member's group for PSI: it runs there, or stalls there. A
        // group removed earlier in the run cannot be attached (ENOENT): the lane then runs as a
        // task whose cgroup is gone, unattached, and its report says so.
        const int attach_err =
            memcg::attach_current_thread(members_.at(lane.member)->member->group());
        size_t done = 0;
        for (size_t k = 0; k < lane.steps.size() && !r_.malformed; ++k) {
          StepResult sr;
          sr.step = &lane.steps[k];
          sr.index = res->index;
          sr.lane = lane.member;
          sr.lane_step = k + 1;
          if (!perform(lane.steps[k], &sr)) break;  // malformed: every lane stops
          finish_step(&sr);
          lane_results_.push_back(std::move(sr));
          ++done;
          sample(res->index, /*force=*/false);
          // Lanes due at the same time take turns step by step (a tick has yielded already).
          if (!std::holds_alternative<TickStep>(lane.steps[k].body)) clock_.yield_for(0);
        }
        memcg::detach_current_thread();
        lanes[lane.member] = {{"steps", done}, {"end_ns", clock_.now_ns()}};
        if (attach_err != 0) lanes[lane.member]["attach"] = memcg::errno_name(attach_err);
      },
      [&] { on_tick(); });
  res->detail["lanes"] = std::move(lanes);
  res->detail["elapsed_ns"] = clock_.now_ns() - start;
  return !r_.malformed;
}

}  // namespace memcgctl::detail
