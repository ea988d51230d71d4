// Deprecated include path, kept for one release: include <memcg/percpu/stat_registry.hpp> (or <memcg/memcg.hpp>).
// The headers are now in one folder per layer (docs/ARCHITECTURE.md); this file forwards there.
#pragma once
#include "memcg/percpu/stat_registry.hpp"
