// 128-bit integers for intermediate products that can pass 64 bits (protection with `max`
// settings, throttling penalties). A GCC/Clang extension; __extension__ keeps -Wpedantic quiet.
#pragma once

namespace memcg::internal {
__extension__ typedef __int128 i128;
__extension__ typedef unsigned __int128 u128;
}  // namespace memcg::internal
