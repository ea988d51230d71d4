// The request target of memcg::http: decoding and the checks that keep every path inside the
// group tree. Not installed.
#pragma once

#include <string>
#include <string_view>

namespace memcg::http::detail {

// Decodes the raw target (path and optional "?query", which is dropped) into `path`. 0, or 400
// when the path holds a byte that is a control character, a space or outside ASCII, raw or
// percent-encoded, or a malformed %XX escape.
int decode_target(std::string_view raw, std::string* path);

// True for "/v1/groups/<anything>".
bool is_file_target(std::string_view path);

// "/v1/groups/<group path>/<file>" split into the group's path ("/" for the root) and the file
// name. False for anything that could name something outside the tree: empty, "." or ".."
// segments.
bool split_file_path(std::string_view path, std::string* group, std::string* file);

}  // namespace memcg::http::detail
