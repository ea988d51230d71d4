// The scenario loader: `parallel`, lanes of steps run by one thread each (loader.hpp).
#include "loader.hpp"

#include <algorithm>

namespace memcgctl::detail {

bool Loader::load_parallel(const YAML::Node& v, Step* step) {
  if (!v.IsMap() || v.size() == 0) {
    error(v, "parallel: expected a map of lanes, member name → list of steps");
    return false;
  }
  if (v.size() > kMaxLanes) {
    error(v, "parallel: more than " + std::to_string(kMaxLanes) + " lanes");
    return false;
  }
  Entries lanes;
  if (!entries(v, "parallel", {}, &lanes)) return false;
  ParallelStep p;
  bool ok = true;
  in_lane_ = true;
  for (const auto& [k, body] : lanes) {
    ParallelStep::Lane lane;
    lane.member = k.Scalar();
    lane.mark = mark_of(k);
    if (!members_.count(lane.member)) {
      error(k, "parallel: no member `" + lane.member + "`" +
                   (exited_.count(lane.member) ? " (it exited before this step)" : "") +
                   ": each lane is named after the member it runs as");
      ok = false;
    }
    YAML::Node steps = body;
    if (body.IsMap() && !body["steps"] && !body["iterations"]) {
      error(body, "parallel lane " + lane.member +
                      ": expected a list of steps, or { repeat, new_member, steps }, or "
                      "{ new_member, iterations }");
      ok = false;
      continue;
    }
    if (body.IsMap()) {
      // The long form: { repeat: N, new_member: BOOL, steps: [ ... ] }, or
      // { new_member: BOOL, iterations: [ [ ... ], [ ... ] ] }.
      Entries e;
      if (!entries(body, "parallel lane " + lane.member,
                   {"steps", "repeat", "new_member", "iterations"}, &e)) {
        ok = false;
        continue;
      }
      if (const YAML::Node* its = find(e, "iterations")) {
        if (find(e, "steps") || find(e, "repeat")) {
          error(*its, "parallel lane " + lane.member +
                          ": `iterations` lists every iteration's steps (not with `steps` or "
                          "`repeat`)");
          ok = false;
          continue;
        }
        if (const YAML::Node* nm = find(e, "new_member"))
          ok = boolean(*nm, "parallel lane new_member", &lane.new_member) && ok;
        if (!its->IsSequence() || its->size() == 0) {
          error(*its, "parallel lane " + lane.member +
                          " iterations: expected a non-empty list of step lists");
          ok = false;
          continue;
        }
        if (its->size() > kMaxLaneRepeat) {
          error(*its, "parallel lane " + lane.member + " iterations: more than " +
                          std::to_string(kMaxLaneRepeat) + " iterations");
          ok = false;
          continue;
        }
        uint64_t runs = 0;
        for (auto it = its->begin(); it != its->end(); ++it) {
          YAML::Node list = *it;
          std::string group;
          if (list.IsMap()) {
            // { group: G, steps: [ ... ] }: the iteration's member joins G.
            Entries ie;
            const std::string what = "parallel lane " + lane.member + " iteration";
            if (!entries(list, what, {"group", "steps"}, &ie)) {
              ok = false;
              continue;
            }
            const YAML::Node* st = find(ie, "steps");
            if (!st) {
              error(list, what + ": `steps` is required");
              ok = false;
              continue;
            }
            if (const YAML::Node* g = find(ie, "group")) {
              if (!scalar(*g, what + " group", &group) || !group_ref(*g, group, what)) {
                ok = false;
              } else if (!lane.new_member) {
                error(*g, what + ": `group` is the group of the iteration's new member "
                                 "(it needs `new_member: true`)");
                ok = false;
              }
            }
            list = *st;
          }
          if (!list.IsSequence()) {
            error(list, "parallel lane " + lane.member +
                            " iterations: each iteration is a list of steps, or "
                            "{ group, steps }");
            ok = false;
            continue;
          }
          std::vector<Step> one;
          ok = load_step_list(list, lane.member, &one) && ok;
          runs += std::max<size_t>(one.size(), 1);
          lane.iterations.push_back(std::move(one));
          lane.iteration_groups.push_back(std::move(group));
          if (too_many()) break;
        }
        if (runs > kMaxLaneStepRuns) {
          error(*its, "parallel lane " + lane.member + ": its iterations have " +
                          std::to_string(runs) + " steps in all, more than " +
                          std::to_string(kMaxLaneStepRuns) + ", the most a lane may run");
          ok = false;
        }
        lane.repeat = lane.iterations.size();
        p.lanes.push_back(std::move(lane));
        continue;
      }
      const YAML::Node* st = find(e, "steps");
      if (!st) {
        error(body, "parallel lane " + lane.member + ": `steps` is required");
        ok = false;
        continue;
      }
      steps = *st;
      if (const YAML::Node* r = find(e, "repeat")) {
        std::string s;
        uint64_t n = 0;
        if (!scalar(*r, "parallel lane repeat", &s) || !parse_uint(s, &n) || n < 1 ||
            n > kMaxLaneRepeat) {
          error(*r, "parallel lane " + lane.member + " repeat: expected a whole number from 1 to " +
                        std::to_string(kMaxLaneRepeat));
          ok = false;
        } else {
          lane.repeat = n;
        }
      }
      if (const YAML::Node* nm = find(e, "new_member"))
        ok = boolean(*nm, "parallel lane new_member", &lane.new_member) && ok;
    }
    if (!steps.IsSequence()) {
      error(steps, "parallel lane " + lane.member +
                       ": expected a list of steps, or { repeat, new_member, steps }, or "
                       "{ new_member, iterations }");
      ok = false;
      continue;
    }
    const uint64_t work_before = work_units_;
    const uint64_t ns_before = virtual_ns_;
    ok = load_step_list(steps, lane.member, &lane.steps) && ok;
    if (lane.repeat * std::max<uint64_t>(lane.steps.size(), 1) > kMaxLaneStepRuns) {
      error(steps, "parallel lane " + lane.member + ": " + std::to_string(lane.repeat) +
                       " iterations of " + std::to_string(lane.steps.size()) +
                       " steps are more than " + std::to_string(kMaxLaneStepRuns) +
                       " step runs, the most a lane may make");
      ok = false;
    } else if (ok && lane.repeat > 1) {
      // Every iteration charges and ticks again: the budgets count them all.
      const uint64_t work = work_units_ - work_before;
      const uint64_t ns = virtual_ns_ - ns_before;
      ok = add_work(steps, "parallel lane " + lane.member + " repeat",
                    work > (kMaxWorkUnits + 1) / (lane.repeat - 1)
                        ? kMaxWorkUnits + 1
                        : work * (lane.repeat - 1));
      if (ok && ns != 0 &&
          (ns > kMaxVirtualNs / (lane.repeat - 1) ||
           ns * (lane.repeat - 1) > kMaxVirtualNs - virtual_ns_)) {
        error(steps, "parallel lane " + lane.member + " repeat: the ticks and waits of every "
                     "iteration add up to more than " +
                         std::to_string(kMaxVirtualNs / 1'000'000'000) +
                         " s of virtual time, the most a scenario may take");
        ok = false;
      } else if (ok) {
        virtual_ns_ += ns * (lane.repeat - 1);
      }
    }
    p.lanes.push_back(std::move(lane));
  }
  in_lane_ = false;
  step->body = std::move(p);
  return ok;
}

}  // namespace memcgctl::detail
