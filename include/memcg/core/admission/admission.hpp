// Admission by learned peak: a group learns how far the reservations admitted into it grow past
// the size they were admitted with, and a waiting admission (Reservation::reserve_for,
// reserve_until) is let in only when its expected peak fits beside the expected peaks of the
// reservations already running. Why: work admitted at its estimate that then grows past it
// overflows the limit, and the only answers left then are to kill or to make growth wait.
//
// Learning rule (per group; a reservation teaches the group it was made on):
//   - A reservation admitted by a waiting reserve_for/reserve_until teaches when that admission
//     ends (release(), destruction, or a later waiting admission of the same reservation): the
//     ratio r = peak units held since admission / admitted units, clamped to
//     kAdmitMaxGrowthPermille / 1000 (so that one ratio moves the factor by a bounded amount).
//   - Only work that ran its course teaches. An admission that ends cut short teaches nothing
//     (counted in AdmitStats::skipped): its member was OOM-killed or asked to give memory back
//     (preemption), or one of its growth requests was refused (kNoMem, kNoMemCostly,
//     kNeverFits, kKilled). Its ratio is censored, a lower bound of where the work was going; a
//     runaway stopped at a limit would teach the limit over its estimate (4 and more), and a few
//     such samples push the factor of the whole group up, which then holds back its
//     well-behaved work (measured: docs/BENCHMARKS-policy.md). Runaways are the OOM killer's
//     and the limits' business, not admission's. A spill request (CancelReason::kSpill) does
//     not cut the work short: it carries on.
//   - The learned growth factor is the exponentially decayed mean of the ratios: each new ratio
//     first multiplies the weights of the earlier ones by kAdmitDecay (31/32: the weight of a
//     ratio halves after about 22 later ones); factor = sum(w_i r_i) / sum(w_i), rounded to the
//     nearest thousandth, within [1.0, kAdmitMaxGrowthPermille / 1000]. O(1) per update, two
//     sums per group. The mean, not a high percentile: the promises of the running reservations
//     are summed on each level, and a sum of peaks is governed by their mean (a per-request
//     p90, summed over the running queries, held back headroom that their growth never used at
//     once; docs/BENCHMARKS-policy.md). A request that grows past its expected peak, up to its
//     tolerated peak (below), is still served by what is free (other requests' unused promises
//     included), then by memory on its way, then the OOM killer, whose excess order chooses the
//     ones past their admitted size first (oom.hpp).
//   - No history (total weight below kAdmitMinWeight, i.e. fewer than about 3 ratios): factor 1.0
//     (the prior: a request is expected to stay at its admitted size, as before this rule).
//   - The tolerance: the decayed mean plus kAdmitToleranceSd (2) decayed standard deviations of
//     the same ratios (a third decayed sum, of their squares), rounded and clamped as the
//     factor, never below the factor in force. With a total weight below kAdmitMinSpreadWeight
//     (about 9 ratios) the spread is not known and the tolerance is the clamp (4.0): nothing is
//     judged past it on a guess (a few similar first ratios would give a spread of about 0). A waiting admission of T
//     units tolerates the peak T x tolerance (clamped like E below): about as far as the group's
//     work that ran its course grew (uniform growth of 0-50 %: mean 1.25, tolerance about 1.54).
//     Growth past the tolerated peak is no longer the group's usual spread around its mean but
//     work that is going somewhere else: it may take only memory nobody else was promised
//     (reservation.hpp), and it is not asked to spill before a kill (oom.hpp).
//
// Growth past the tolerated peak (Reservation::grow, OomPolicy kKernel or kPieces): it may take
// only memory that is neither promised to the other admitted reservations nor needed by them,
// i.e. on every level L of the path with a memory.max where others have a promise,
//       usage(L) + (promised(L) - its own promise) + need <= max(L).
// Otherwise the growth goes to the OOM killer of the first such level, asked for room for
// need + the others' promise there, as a charge that does not fit would (kKernel over the costly
// size: kNoMemCostly without a kill; kNever: kNoMem), and the admission-aware (excess) order
// chooses the member furthest past its admitted size, which is the growing runaway itself as
// soon as it is the largest excess; it then fails with kKilled, having charged nothing. A
// victim other than the grower unwinds (the killer waits for it as usual) and the growth looks
// again, at most 4 times. Why: admission keeps the promised headroom free, and before this rule
// a runaway grew into it unopposed until the limit (and the killer) stopped it, while its
// usage kept its tenant's admissions waiting (docs/BENCHMARKS-policy.md). Growth between the
// expected and the tolerated peak is served as before (what is free, promised or not, then
// memory on its way, then the killer): the group's usual spread costs no kill.
// A non-waiting reserve() states an admitted size too (Member::admitted(), the OOM killer's
// excess order) but neither teaches nor is admitted by expectation: it is a try, not a queue.
//
// Reclaim for admission: memory that reclaim can take at once counts as room. A waiting
// admission that does not fit computes, on each limited level L of its path, what it lacks
// (usage + promised + need - max) and what reclaim rooted at L can free at once (the registered
// reclaimers' sizes under L, each group's capped by its usage above its effective protection
// against L: memory.min and memory.low honoured). When every level that lacks room can get it
// that way, it drains the stocks of the highest such level, then reclaims what each level still
// lacks, lowest first (the ladder a charge runs, without the OOM killer), and looks again; when
// some level lacks more than reclaim could give there, it reclaims nothing and waits. A reclaim
// that freed nothing is retried no sooner than kAdmitReclaimRetryNs. Counted in memory.wait
// (admit_reclaims, admit_reclaimed_bytes) of the level reclaimed. Why: a charge in the same place
// would reclaim those caches and go on; an admission that waited for them instead throttled a
// service by its own caches (docs/charge_wait.md, docs/BENCHMARKS-policy.md).
//
// A promise on each level: a running admitted reservation of group G promises the same units on
// G and each ancestor but the root (a parent's promised = the sum below it); on each level it is
// headroom kept free, never charged, never protected, never reclaimable.
//
// Admission rule (waiting admissions only; on by default, memory.admit.growth "auto"):
//   expected peak E = min(ceil(total units x factor), the smallest memory.max on the path)
//   admitted when, on every level L of the path with a memory.max:
//       usage(L) + promised(L) + (E - units already held) <= max(L)
//   where promised(L) is the sum over running admitted reservations under L of what they were
//   promised and have not charged yet (max(0, E_i - units_i)). Once admitted, the reservation
//   promises E - units held until it ends; growth within it lowers the promise. The check and the
//   promise are taken under one process-wide admission mutex (a slow path, a leaf lock); the
//   charge itself then goes through the waiting charge (charge_wait.hpp). A request that does not
//   fit by expectation waits (counted in memory.wait admit_waits) until it does, its deadline
//   passes (timed-out) or its stop token fires (cancelled), re-checking whenever a promise is
//   given back or a reservation gives memory back (release, shrink), and every kAdmitPollNs of
//   the controller's clock (other uncharges, and plain charges, are seen by the poll). The
//   waiters are not queued in order: whichever fits when it looks goes in, so a large request
//   may wait behind smaller ones that keep fitting (up to its deadline). A factor of 1 with no
//   promise on the path is exactly the plain waiting charge.
#pragma once

#include <cstdint>

namespace memcg {

class Group;

inline constexpr uint32_t kAdmitMaxGrowthPermille = 4000;  // the clamp of every ratio and factor
inline constexpr double kAdmitDecay = 31.0 / 32.0;
inline constexpr double kAdmitMinWeight = 2.5;
inline constexpr uint64_t kAdmitPollNs = 1'000'000;  // 1 ms of the controller's clock
// After a reclaim for admission that freed nothing, the same admission reclaims again no sooner
// than this (a walk of the subtree per poll would be all cost: the caches are empty or protected).
inline constexpr uint64_t kAdmitReclaimRetryNs = 10'000'000;  // 10 ms
// The tolerance: the decayed mean plus this many decayed standard deviations of the ratios.
inline constexpr double kAdmitToleranceSd = 2.0;
// The spread is known from this total weight on (about 9 ratios); before, the tolerance is the
// clamp, kAdmitMaxGrowthPermille.
inline constexpr double kAdmitMinSpreadWeight = 8.0;

// Growth past admission waits for memory on its way for at most twice the decayed mean (weight
// 1/8 per sample) of the waits that got it on that limit, clamped to these (reservation.hpp);
// the prior, before any such wait, is the mean kGrowthWaitPriorNs.
inline constexpr uint64_t kGrowthWaitMinNs = 2'000'000;    // 2 ms
inline constexpr uint64_t kGrowthWaitMaxNs = 100'000'000;  // 100 ms
inline constexpr uint64_t kGrowthWaitPriorNs = 10'000'000; // 10 ms

// The growth factor of `group`'s waiting admissions, in thousandths (1000 = 1.0): 0 = "auto" (the
// learned one, the default), or a fixed factor in 1000..kAdmitMaxGrowthPermille. EINVAL outside
// (nothing changes), ENOENT for the root (it admits everything). A fixed factor keeps learning
// so that "auto" resumes with the history. Shown and written as memory.admit.growth ("auto", or
// a factor such as "1.5"; reading "auto" shows the learned factor after it: "auto 1.500").
[[nodiscard]] int set_admit_growth(Group& group, uint32_t permille) noexcept;
uint32_t admit_growth_setting(const Group& group) noexcept;  // 0 for auto
// The factor in force now (the fixed one, or the learned one), thousandths.
uint32_t admit_growth(const Group& group) noexcept;

// What admission and growth know about one group (memory.wait's admit_* and growth_* lines).
struct AdmitStats {
  uint32_t growth_permille = 1000;  // the factor in force
  uint32_t tolerance_permille = kAdmitMaxGrowthPermille;  // in force (at least the factor)
  bool fixed = false;               // set by set_admit_growth, not learned
  uint64_t samples = 0;             // ratios learned (ever)
  uint64_t skipped = 0;             // admissions that ended cut short and taught nothing
  double weight = 0;                // their decayed weight (kAdmitMinWeight to be used)
  int64_t promised_units = 0;       // promised, not charged, by admitted reservations under it
  uint64_t admit_waits = 0;         // waiting admissions that waited for an expected peak here
  uint64_t admit_reclaims = 0;      // waiting admissions that reclaimed on this level to fit
  uint64_t admit_reclaimed_units = 0;  // units they reclaimed here
  // Growth past admission (Reservation::grow) whose free memory ran out on this group's limit:
  uint64_t growth_waits = 0;        // waited for memory on its way (reservation.hpp)
  uint64_t growth_granted = 0;      // ...and got it without the killer
  uint64_t growth_bound_ns = 0;     // the bound such a wait has now (derived, see reservation.hpp)
};
AdmitStats admit_stats(const Group& group) noexcept;

}  // namespace memcg
