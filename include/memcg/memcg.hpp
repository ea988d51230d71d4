// memcg: the Linux memory cgroup's semantics (memory.min/low/high/max, hierarchical usage,
// events) for the groups of one C++ process. This umbrella header includes the public API.
#pragma once

#include "memcg/clock.hpp"
#include "memcg/controller.hpp"
#include "memcg/events.hpp"
#include "memcg/group.hpp"
#include "memcg/page_counter.hpp"
// Allocator integration (the global operator new hook, hook.hpp, is a separate library).
#include "memcg/allocator.hpp"
#include "memcg/charge_wait.hpp"
#include "memcg/nofail.hpp"
#include "memcg/obj_stock.hpp"
#include "memcg/pmr.hpp"
