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
        MemberState& base = *members_.at(lane.member);
        // The lane is a task of its member's group for PSI: it runs there, or stalls there. A
        // group removed earlier in the run cannot be attached (ENOENT): the lane then runs as a
        // task whose cgroup is gone, unattached, and its report says so.
        memcg::Group& g = base.member->group();  // the lane's member lives through the block
        const int attach_err = memcg::attach_current_thread(g);
        size_t done = 0;
        uint64_t iterations = 0, killed = 0, preempted = 0, unwound = 0;
        for (uint64_t it = 1; it <= lane.repeat && !r_.malformed; ++it) {
          MemberState* st = &base;
          std::string name = lane.member;
          if (lane.new_member) {
            // A new member per iteration, kept (retired) after it exits so that the reports
            // can name it; members_ changes only while this lane runs (one lane at a time).
            name = lane.member + "#" + std::to_string(it);
            auto fresh = make_member(g, name, base.immune, base.release_on_preempt,
                                     base.unwind_ns);
            st = fresh.get();
            members_[name] = std::move(fresh);
            tl_lane_name = &lane.member;
            tl_lane_state = st;
          }
          st->lane_running = true;
          ++iterations;
          bool stop = false;
          for (size_t k = 0; k < lane.steps.size() && !r_.malformed; ++k) {
            if (unwind(*st)) ++unwound;  // a kill or preemption is noticed between steps
            StepResult sr;
            sr.step = &lane.steps[k];
            sr.index = res->index;
            sr.lane = name;
            sr.lane_step = k + 1;
            if (!perform(lane.steps[k], &sr)) {  // malformed: every lane stops
              stop = true;
              break;
            }
            finish_step(&sr);
            lane_results_.push_back(std::move(sr));
            ++done;
            sample(res->index, /*force=*/false);
            // Lanes due at the same time take turns step by step (a tick has yielded already).
            if (!std::holds_alternative<TickStep>(lane.steps[k].body)) clock_.yield_for(0);
          }
          if (unwind(*st)) ++unwound;
          st->lane_running = false;
          if (lane.new_member) {
            killed += st->killed;
            preempted += st->preempted;
            // The iteration's member exits: what it still holds goes back, and it is gone.
            st->member->uncharge(st->member->charged());
            st->member.reset();
            tl_lane_state = nullptr;
            tl_lane_name = nullptr;
          }
          if (stop) break;
        }
        if (!lane.new_member) {
          killed = base.killed;
          preempted = base.preempted;
        }
        memcg::detach_current_thread();
        Json& out = lanes[lane.member];
        out = {{"steps", done}, {"end_ns", clock_.now_ns()}};
        if (lane.repeat > 1 || lane.new_member) {
          out["iterations"] = iterations;
          out["killed"] = killed;
          out["preempted"] = preempted;
          out["unwound"] = unwound;
        }
        if (attach_err != 0) out["attach"] = memcg::errno_name(attach_err);
      },
      [&] { on_tick(); });
  res->detail["lanes"] = std::move(lanes);
  res->detail["elapsed_ns"] = clock_.now_ns() - start;
  return !r_.malformed;
}

}  // namespace memcgctl::detail
