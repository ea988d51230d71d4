// memcg/c/memcg.h compiles as C++ (extern "C" linkage, no C-only constructs), and without
// MEMCG_C_EXPERIMENTAL declares none of the experimental part.
#include "memcg/c/memcg.h"

static_assert(MEMCG_CHARGE_OK == 0 && MEMCG_RESERVE_OK == 0);
#ifdef MEMCG_C_EXPERIMENTAL
#error "MEMCG_C_EXPERIMENTAL is defined by nobody but the program"
#endif
// Declared unless experimental: these names must resolve.
[[maybe_unused]] static auto* const kCharge = &memcg_charge;
[[maybe_unused]] static auto* const kRead = &memcg_group_read;
