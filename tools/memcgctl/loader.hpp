// The scenario loader's state machine (load.hpp is its interface): one Loader reads one scenario
// and keeps what every later step may refer to (groups online, members, caches, open handles),
// so that each reference is checked at its place in the steps.
//
// Its parts, one file per family:
//   load_fields.cpp   diagnostics and field readers (maps, scalars, sizes, durations, errnos)
//   load_groups.cpp   the root, `config`, `groups`, knob values and the step lists
//   load_steps.cpp    steps that change state: set, write, member, charge, release, exit,
//                     reclaim, remove, tick
//   load_reserve.cpp  reserve (and the statuses it may expect)
//   load_parallel.cpp parallel
//   load_handles.cpp  listen, trigger, peak, watch
//   load_checks.cpp   expect, print
//   load_cache.cpp    cache
//   load_queue.cpp    queue
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "load.hpp"
#include "scenario.hpp"

namespace memcgctl::detail {

// The largest stock shard count a scenario may ask for: enough for any simulated machine, small
// enough that a typo (cpus: 10000000) is reported instead of allocating per-shard state for it.
inline constexpr int kMaxCpus = 4096;
// Bounds of memcg::Options (controller.hpp): unit_shift 6..30, batch 1..127.
inline constexpr unsigned kMinUnitShift = 6;
inline constexpr unsigned kMaxUnitShift = 30;
inline constexpr int64_t kMaxBatch = 127;
// Errors listed before giving up: the first few locate the problem; hundreds would bury it.
inline constexpr size_t kMaxErrors = 20;

Mark mark_of(const YAML::Node& n);
Mark mark_of(const YAML::Mark& m);
bool parse_uint(std::string_view s, uint64_t* v);
// Group paths relative to the root: segments of [A-Za-z0-9_.-], not "." or "..", joined by '/'.
bool valid_group_path(std::string_view path);
std::string parent_of(const std::string& path);
bool valid_file_name(std::string_view f);

class Loader {
 public:
  explicit Loader(std::vector<Diagnostic>* errors) : errors_(errors) {}

  bool load(std::string_view text, Scenario* out);

 private:
  // ---- diagnostics ------------------------------------------------------------------------------
  void error(Mark m, std::string message) {
    if (errors_->size() < kMaxErrors) errors_->push_back({m, std::move(message)});
  }
  void error(const YAML::Node& n, std::string message) { error(mark_of(n), std::move(message)); }
  bool too_many() const { return errors_->size() >= kMaxErrors; }

  // ---- node helpers (load_fields.cpp) -----------------------------------------------------------
  // A map's entries in file order; duplicate and unknown keys are reported.
  using Entries = std::vector<std::pair<YAML::Node, YAML::Node>>;
  bool entries(const YAML::Node& map, const std::string& what, const std::set<std::string>& allowed,
               Entries* out);
  bool entries_required_map(const YAML::Node& v, const std::string& what,
                            const std::set<std::string>& allowed, Entries* e);
  static std::string one_of(const std::set<std::string>& allowed);
  static const YAML::Node* find(const Entries& e, std::string_view key);
  bool scalar(const YAML::Node& n, const std::string& what, std::string* out);
  // A required scalar field of a step.
  bool required(const YAML::Node& map, const Entries& e, const std::string& what,
                std::string_view key, std::string* out);
  bool size(const YAML::Node& n, const std::string& what, uint64_t* bytes);
  // A size that a step charges unit by unit: at most kMaxStepUnits units of the scenario's unit.
  bool step_size(const YAML::Node& n, const std::string& what, uint64_t* bytes);
  // Counts `units` of work of the step at `n` towards kMaxWorkUnits; false (and an error at
  // `n`) past it.
  bool add_work(const YAML::Node& n, const std::string& what, uint64_t units);
  // "64G": the shortest exact spelling with a binary suffix, as values.hpp's human_size (not
  // called: the loader links alone into the scenario fuzzer).
  static std::string size_text(uint64_t bytes);
  bool boolean(const YAML::Node& n, const std::string& what, bool* out);
  bool errno_value(const YAML::Node& n, const std::string& what, int* out);
  // A duration of at most `max_ns` (`max_text` in messages) that counts towards the virtual time
  // a scenario may take (kMaxVirtualNs).
  bool duration(const YAML::Node& v, const std::string& what, uint64_t max_ns, const char* max_text,
                uint64_t* ns);

  // ---- root, config, groups, step lists (load_groups.cpp) ---------------------------------------
  void load_root(const YAML::Node& root, Scenario* out);
  void load_config(const YAML::Node& node, Config* c);
  bool known_group(const std::string& g) const { return g == "/" || online_.count(g) != 0; }
  // A group reference of a step: "/" or an existing group at this point of the steps.
  bool group_ref(const YAML::Node& n, const std::string& g, const std::string& what,
                 bool allow_root = true);
  // Knob writes of a `groups` entry or a `set` step, checked with the library's parsers where the
  // file's grammar is known.
  void knob(const YAML::Node& key, const YAML::Node& value, const std::string& group,
            std::vector<Knob>* out);
  void load_groups(const YAML::Node& node, Scenario* out);
  void load_steps(const YAML::Node& node, Scenario* out);
  // The steps of a list (the scenario's, or a lane's when `lane` names its member, or a queue
  // item's when it is "queue MEMBER item"), in order.
  // False when any is malformed.
  bool load_step_list(const YAML::Node& list, const std::string& lane, std::vector<Step>* out);
  bool load_step(const std::string& kind, const YAML::Node& key, const YAML::Node& v, Step* step);

  // ---- steps that change state (load_steps.cpp) -------------------------------------------------
  bool load_set(const YAML::Node& v, Step* step);
  bool load_write(const YAML::Node& v, Step* step);
  bool load_cache(const YAML::Node& v, Step* step);
  bool load_member(const YAML::Node& v, Step* step);
  bool member_ref(const YAML::Node& map, const Entries& e, const std::string& what,
                  std::string* out);
  bool load_charge(const YAML::Node& v, Step* step);
  bool load_release(const YAML::Node& v, Step* step);
  // `reserve` (load_reserve.cpp): the member's reservation (ReserveStep); its options are the
  // member's, fixed by the first step that names it (reserve_options_).
  bool load_reserve(const YAML::Node& v, Step* step);
  bool reserve_status(const YAML::Node& n, const std::string& what, memcg::ReserveStatus* out);
  bool load_exit(const YAML::Node& v, Step* step);
  bool load_reclaim(const YAML::Node& v, Step* step);
  bool load_remove(const YAML::Node& v, Step* step);
  bool load_tick(const YAML::Node& v, Step* step);
  // `parallel` (load_parallel.cpp). Lanes may not create or destroy (load_step_list refuses
  // those steps, `parallel` included), so that every reference checked here holds whatever the
  // interleaving.
  bool load_parallel(const YAML::Node& v, Step* step);

  // ---- the admission queue (load_queue.cpp) -----------------------------------------------------
  // `queue`: items run by a pool of lanes; their steps follow a lane's rules (load_parallel).
  bool load_queue(const YAML::Node& v, Step* step);
  bool load_queue_item(const YAML::Node& n, const std::string& member, uint64_t default_deadline,
                       bool has_default_deadline, QueueStep* q);
  bool admit_weight(const YAML::Node& n, uint32_t* out);

  // ---- handles: listen, trigger, peak, watch (load_handles.cpp) ---------------------------------
  // A new handle's name: not in use by an open handle of any kind.
  bool new_handle(const YAML::Node& map, const Entries& e, const std::string& kind,
                  std::string* name);
  // A step's group for a new handle: an existing group below the root (the root has none of
  // these files).
  bool handle_group(const YAML::Node& map, const Entries& e, const std::string& what,
                    std::string* group);
  // A reference to an open handle of `kind` ("listener", "trigger", "peak", "watch").
  bool handle_ref(const YAML::Node& n, const std::string& name, const std::string& kind,
                  const std::string& what);
  bool load_listen(const YAML::Node& v, Step* step);
  bool load_trigger(const YAML::Node& v, Step* step);
  bool load_peak(const YAML::Node& v, Step* step);
  bool load_watch(const YAML::Node& v, Step* step);

  // ---- checks and output (load_checks.cpp) ------------------------------------------------------
  bool load_expect(const YAML::Node& v, Step* step);
  bool load_print(const YAML::Node& v, Step* step);

  static inline const std::set<std::string> kKnownSteps = {
      "set",  "write",  "cache", "member", "charge",  "release", "exit",  "reclaim", "remove",
      "tick", "expect", "print", "listen", "trigger", "peak",    "watch", "parallel",
      "reserve", "queue"};

  std::vector<Diagnostic>* errors_;
  bool in_lane_ = false;  // reading the steps of a `parallel` lane
  unsigned unit_shift_ = 12;
  uint64_t virtual_ns_ = 0;                     // ticks so far (kMaxVirtualNs)
  uint64_t printed_files_ = 0;                  // group files printed so far (kMaxPrintedFiles)
  uint64_t work_units_ = 0;                     // units asked for so far (kMaxWorkUnits)
  uint64_t charged_units_ = 0;                  // of those, by charge and grow steps
  std::set<std::string> online_;                // groups that exist at the step being read
  std::set<std::string> declared_;              // every group ever declared
  std::map<std::string, std::string> caches_;   // name → group
  std::map<std::string, std::string> members_;  // live members: name → group
  std::set<std::string> exited_;
  // A member's reservation options, by member name: fixed by the first `reserve` step naming it
  // (line of that step, oom, priority).
  struct ReserveOptionsSeen {
    int line = 0;
    memcg::OomPolicy oom = memcg::OomPolicy::kKernel;
    memcg::WaitPriority priority = memcg::WaitPriority::kDefault;
  };
  std::map<std::string, ReserveOptionsSeen> reserve_options_;
  // Open handles: name → (kind, group).
  std::map<std::string, std::pair<std::string, std::string>> handles_;
};

}  // namespace memcgctl::detail
