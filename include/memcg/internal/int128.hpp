// Deprecated include path, kept for one release: include <memcg/base/internal/int128.hpp> (or <memcg/memcg.hpp>).
// The headers are now in one folder per layer (docs/ARCHITECTURE.md); this file forwards there.
#pragma once
#include "memcg/base/internal/int128.hpp"
