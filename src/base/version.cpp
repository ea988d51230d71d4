#include "memcg/base/version.hpp"

namespace memcg {

Version version() noexcept {
  return {MEMCG_VERSION_MAJOR, MEMCG_VERSION_MINOR, MEMCG_VERSION_PATCH, MEMCG_VERSION_STRING};
}

}  // namespace memcg
