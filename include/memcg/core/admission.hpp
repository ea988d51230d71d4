// Admission by learned peak: how far a group's work grows past what it was admitted with, learned
// from finished reservations, so that a waiting admission holds room for the growth to come
// instead of letting admitted work overflow the limit later (where the only answers are to kill
// or to make growth wait). Peers do the same: a query engine's arbitrator that reuses a previous
// peak and grows budgets by a factor.
//
// The rule (per group, memory.admit.growth):
//   - A sample is the ratio peak / admitted of a Reservation whose total was stated by reserve(),
//     reserve_for() or reserve_until() (its admission): the largest total it held until it was
//     released or admitted again, over the admitted total.
//   - Samples go into fixed buckets (ratio up to 1.0, 1.1, 1.25, 1.5, 1.75, 2, 2.5, 3, 4 and
//     above), each weighted 1 when it arrives; every new sample first decays all weights by 1/32,
//     so the model reflects about the last 32 reservations and forgets old behaviour.
//   - The learned growth factor is the 90th percentile of the weights: the upper bound of the
//     bucket where the cumulative weight reaches 90 %; 4 for the last bucket. With less than
//     8 samples' weight it is 1 (a group with no history admits its requests as they are).
//   - A fixed factor (1..4) written to memory.admit.growth replaces the learned one; "auto" goes
//     back to it (the samples are kept either way).
// Waiting admission (reserve_for, reserve_until) then charges ceil(total x factor), capped at
// the smallest memory.max of the path: the reservation holds its expected peak from the start,
// and grow() within it charges nothing. So a request is admitted only when its expected peak fits
// beside the expected peaks the running reservations hold, and the wait in between is the
// waiting charge's (charge_wait.hpp). A non-waiting reserve() holds just its total.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace memcg {

class Group;

// The growth factor admission uses for `group`, in thousandths (1000 = no growth expected):
// the fixed one if set, else the learned one.
uint32_t admit_growth_permille(const Group& group) noexcept;
// What memory.admit.growth shows: "auto 1.25" (learned), or "1.5" (fixed).
std::string admit_growth_text(const Group& group);
// Writes memory.admit.growth: "auto", or a factor from 1 to 4 with up to three decimals.
// EINVAL (nothing changed) otherwise.
[[nodiscard]] int set_admit_growth(Group& group, std::string_view text) noexcept;
// Samples' weight in the model, in thousandths of a sample (for memory.wait and tests).
uint32_t admit_samples_permille(const Group& group) noexcept;

namespace internal {
// A finished admission of `group`: its peak and admitted totals (bytes). Ignored when admitted
// is 0. Callable with no library lock held; takes the model's own lock briefly.
void record_admission(Group& group, uint64_t peak_bytes, uint64_t admitted_bytes) noexcept;
}  // namespace internal

}  // namespace memcg
