// memcg::jemalloc's pieces shared between its source files (not installed).
#pragma once

namespace memcg::jemalloc {

// Makes the collector thread (collector.cpp) retry collect_released() until no released arena
// holds blocks; starts it the first time.
void wake_collector() noexcept;
// Moves the safe point's ladder of every thread to jemalloc's arena 0 (binding.cpp).
void install_ladder_scope() noexcept;

}  // namespace memcg::jemalloc
