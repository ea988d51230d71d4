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
          memcg::GroupRef own;  // the iteration's own group (`iterations` with `group`)
          if (lane.new_member) {
            // A new member per iteration, kept (retired) after it exits so that the reports
            // can name it; members_ changes only while this lane runs (one lane at a time).
            name = lane.member + "#" + std::to_string(it);
            if (!lane.iteration_groups.empty() && !lane.iteration_groups[it - 1].empty()) {
              // Online: the loader checked it at the block, and a lane removes nothing.
              own = ctl_.lookup(lane.iteration_groups[it - 1]);
              if (own) static_cast<void>(memcg::attach_current_thread(*own));
            }
            auto fresh = make_member(own ? *own : g, name, base.immune, base.release_on_preempt,
                                     base.unwind_ns);
            st = fresh.get();
            members_[name] = std::move(fresh);
            tl_lane_name = &lane.member;
            tl_lane_state = st;
          }
          st->lane_running = true;
          st->end_iteration = false;
          ++iterations;
          bool stop = false;
          const std::vector<Step>& steps = lane.steps_of(it);
          for (size_t k = 0; k < steps.size() && !r_.malformed; ++k) {
            if (unwind(*st)) ++unwound;  // a kill or preemption is noticed between steps
            StepResult sr;
            sr.step = &steps[k];
            sr.index = res->index;
            sr.lane = name;
            sr.lane_step = k + 1;
            if (!perform(steps[k], &sr)) {  // malformed: every lane stops
              stop = true;
              break;
            }
            finish_step(&sr);
            lane_results_.push_back(std::move(sr));
            ++done;
            sample(res->index, /*force=*/false);
            // Lanes due at the same time take turns step by step (a tick has yielded already).
            if (!std::holds_alternative<TickStep>(steps[k].body)) clock_.yield_for(0);
            if (st->end_iteration) break;  // a `reserve` step's `ends_on`: the query gives up
          }
          if (unwind(*st)) ++unwound;
          st->lane_running = false;
          if (lane.new_member) {
            killed += st->killed;
            preempted += st->preempted;
            // The iteration's member exits: what it still holds goes back (its reservation
            // first, whose admission ends), and it is gone.
            st->reservation.reset();
            st->member->uncharge(st->member->charged());
            st->member.reset();
            tl_lane_state = nullptr;
            tl_lane_name = nullptr;
            if (own) {
              if (attach_err == 0)
                static_cast<void>(memcg::attach_current_thread(g));
              else
                memcg::detach_current_thread();
            }
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
        if (lane.repeat > 1 || lane.new_member || !lane.iterations.empty()) {
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
