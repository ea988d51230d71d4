// Uses the installed library: a two-level tree, one failing charge, and the events it raised.
#include <memcg/memcg.hpp>
// One header by its layer path as well as the umbrella.
#include <memcg/core/tree/group.hpp>
#include <memcg/core/tree/controller.hpp>
#include <memcg/base/version.hpp>

#include <cstdio>
#include <cstring>

int main() {
  // The library linked is the one these headers describe (a stale shared object would not be).
  const memcg::Version v = memcg::version();
  std::printf("memcg %s\n", v.text);
  if (std::strcmp(v.text, MEMCG_VERSION_STRING) != 0 || v.major != MEMCG_VERSION_MAJOR ||
      v.minor != MEMCG_VERSION_MINOR || v.patch != MEMCG_VERSION_PATCH)
    return 5;
  memcg::Controller ctl;
  memcg::GroupRef a;
  if (ctl.create("a", &a) != 0) return 1;
  a->set_max(8192);
  if (a->memory().try_charge(2) != nullptr) return 2;  // two 4 KiB units fit
  if (a->memory().try_charge(1) == nullptr) return 3;  // the third does not
  a->raise(memcg::Event::kMax);
  a->memory().uncharge(2);
  std::printf("current=%llu max_events=%llu\n", static_cast<unsigned long long>(a->current()),
              static_cast<unsigned long long>(a->events().get(memcg::Event::kMax)));
  return a->current() == 0 && a->events().get(memcg::Event::kMax) == 1 ? 0 : 4;
}
