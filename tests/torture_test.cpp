// The randomized torture test through the public API (tests/torture_body.hpp), without the
// global operator-new hook: built and run in every preset, sanitizers included.
#include "torture_body.hpp"

namespace memcg {
namespace {

TEST(Torture, RandomizedPublicApi) {
  torture::run(torture::config_from_env(/*hook=*/false));
}

}  // namespace
}  // namespace memcg
