// The randomized torture test (tests/torture_body.hpp) with the global operator-new hook linked
// (memcg::hook, default preset only): attached threads also allocate with plain new, strings and
// vectors, and call into the library (read files, create and remove groups, look up) while their
// group may be full.
#include "memcg/hook/hook.hpp"

#include "torture_body.hpp"

namespace memcg {
namespace {

TEST(Torture, RandomizedPublicApiWithHook) {
  torture::run(torture::config_from_env(/*hook=*/true));
}

}  // namespace
}  // namespace memcg
