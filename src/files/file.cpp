// File: the open file's hold on its group (core/internal/file_node.hpp).
#include <utility>

#include "memcg/core/tree/internal/file_node.hpp"
#include "memcg/files/files.hpp"

namespace memcg {

File::File(std::shared_ptr<internal::FileNode> node, std::string name)
    : node_(std::move(node)), name_(std::move(name)) {}

File::~File() {
  internal::close_file_node(*node_);
}

Group* File::group() const noexcept {
  return node_->group();
}

}  // namespace memcg
