// Values as the interface files spell them, and as reports show them: reading numbers and
// "key value" lines, the selftests' closeness rule, short size spellings, JSON renderings.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace memcgctl {

using Json = nlohmann::ordered_json;

// `s` without leading and trailing ASCII whitespace.
std::string trim(std::string_view s);

// The "key value" lines of a keyed file (memory.events, memory.stat), in file order.
std::vector<std::pair<std::string, std::string>> keyed_lines(std::string_view content);

// A value read from a file: a decimal number, or `max` (UINT64_MAX). False for anything else.
bool read_number(std::string_view text, uint64_t* v);

// A value as JSON: a number when it is a decimal number, else the text ("max").
Json value_json(std::string_view text);

// A file's content as JSON: keyed files as an object of their lines, numbers as numbers, other
// text ("max") as strings.
Json file_json(std::string_view name, std::string_view content);

// The selftests' closeness rule: |v - x| <= floor((v + x) / 100) * err, in integer arithmetic
// (so close_to(v, 0, e) holds only for v == 0).
bool close_to(uint64_t v, uint64_t x, uint64_t err);

// "52428800" → "50M": the shortest exact spelling with a binary suffix, else the number;
// UINT64_MAX → "max".
std::string human_size(uint64_t bytes);

}  // namespace memcgctl
