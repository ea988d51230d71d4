#include "values.hpp"

#include <charconv>

#include "scenario.hpp"

namespace memcgctl {

std::string trim(std::string_view s) {
  const char* ws = " \t\n\r\v\f";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return {};
  const size_t e = s.find_last_not_of(ws);
  return std::string(s.substr(b, e - b + 1));
}

std::vector<std::pair<std::string, std::string>> keyed_lines(std::string_view content) {
  std::vector<std::pair<std::string, std::string>> out;
  size_t pos = 0;
  while (pos < content.size()) {
    size_t nl = content.find('\n', pos);
    if (nl == std::string_view::npos) nl = content.size();
    const std::string line = trim(content.substr(pos, nl - pos));
    pos = nl + 1;
    if (line.empty()) continue;
    const size_t sp = line.find(' ');
    if (sp == std::string::npos) {
      out.emplace_back(line, "");
    } else {
      out.emplace_back(line.substr(0, sp), trim(std::string_view(line).substr(sp + 1)));
    }
  }
  return out;
}

bool read_number(std::string_view text, uint64_t* v) {
  if (text == "max") {
    *v = UINT64_MAX;
    return true;
  }
  if (text.empty()) return false;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), *v);
  return ec == std::errc() && p == text.data() + text.size();
}

Json value_json(std::string_view text) {
  uint64_t v = 0;
  if (text != "max" && read_number(text, &v)) return v;
  return std::string(text);
}

Json file_json(std::string_view name, std::string_view content) {
  if (is_keyed_file(name)) {
    Json o = Json::object();
    for (const auto& [k, v] : keyed_lines(content)) o[k] = value_json(v);
    return o;
  }
  return value_json(trim(content));
}

bool close_to(uint64_t v, uint64_t x, uint64_t err) {
  using U = unsigned __int128;
  const U diff = v > x ? U(v - x) : U(x - v);
  return diff <= (U(v) + U(x)) / 100 * U(err);
}

std::string human_size(uint64_t bytes) {
  if (bytes == UINT64_MAX) return "max";
  if (bytes == 0) return "0";
  static constexpr char kSuffix[] = "KMGTPE";
  int i = -1;
  uint64_t v = bytes;
  while ((v & 1023) == 0 && i < 5) {
    v >>= 10;
    ++i;
  }
  return i < 0 ? std::to_string(bytes) : std::to_string(v) + kSuffix[i];
}

}  // namespace memcgctl
