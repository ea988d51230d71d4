// memcg: the Linux memory cgroup's semantics (memory.min/low/high/max, hierarchical usage,
// events) for the groups of one C++ process. This umbrella header includes the public API.
#pragma once

// base: clock, errors, events, no-fail scopes
#include "memcg/base/clock.hpp"
#include "memcg/base/errors.hpp"
#include "memcg/base/events.hpp"
#include "memcg/base/nofail.hpp"
// counter: the hierarchical page counter, effective protection
#include "memcg/counter/page_counter.hpp"
#include "memcg/counter/protection.hpp"
// percpu: statistic kinds
#include "memcg/percpu/stat_registry.hpp"
// core: the tree, charge path, object layer, attachment, reclaim, OOM, limits, pressure, notify
#include "memcg/core/admission/admission.hpp"
#include "memcg/core/admission/admission_queue.hpp"
#include "memcg/core/charge/attach.hpp"
#include "memcg/core/reclaim/cache_governor.hpp"
#include "memcg/core/charge/charge.hpp"
#include "memcg/core/wait/charge_wait.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/core/tree/group.hpp"
#include "memcg/core/charge/limits.hpp"
#include "memcg/core/oom/members.hpp"
#include "memcg/core/charge/mirror.hpp"
#include "memcg/core/signal/notify.hpp"
#include "memcg/core/charge/obj_stock.hpp"
#include "memcg/core/oom/oom.hpp"
#include "memcg/core/signal/pressure.hpp"
#include "memcg/core/signal/psi.hpp"
#include "memcg/core/signal/trouble.hpp"
#include "memcg/core/reclaim/reclaim.hpp"
#include "memcg/core/admission/reservation.hpp"
#include "memcg/core/reclaim/vmpressure.hpp"
// files: the cgroup-v2 file interface, its grammars, the Prometheus text exposition
#include "memcg/files/files.hpp"
#include "memcg/files/parse.hpp"
#include "memcg/files/prometheus.hpp"
// alloc: STL allocator, pmr resource, the built-in LRU cache
#include "memcg/alloc/allocator.hpp"
#include "memcg/alloc/lru_cache.hpp"
#include "memcg/alloc/pmr.hpp"
