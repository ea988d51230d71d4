// The scenario runner: `expect` and `print` (runner.hpp).
#include "runner.hpp"

namespace memcgctl::detail {

int Runner::read_value(memcg::Group& g, const std::string& file, const std::string& key,
                       std::string* value, std::string* why) {
  std::string content;
  const int err = memcg::read_file(g, file, &content);
  if (err) {
    *why = "cannot read: " + error_text(err);
    return err;
  }
  if (key.empty()) {
    *value = trim(content);
    return 0;
  }
  for (const auto& [k, v] : keyed_lines(content)) {
    if (k == key) {
      *value = v;
      return 0;
    }
  }
  *why = "no key `" + key + "` in " + file;
  return ENOENT;
}

bool Runner::handle_value(const ExpectStep& x, uint64_t* v, std::string* text, std::string* why) {
  // A handle whose opening failed (an eventfd beyond the descriptor limit, ...) has no value;
  // its own step reported why.
  const bool open = x.source == ExpectStep::Source::kListener  ? listeners_.count(x.handle) != 0
                    : x.source == ExpectStep::Source::kTrigger ? triggers_.count(x.handle) != 0
                    : x.source == ExpectStep::Source::kPeak    ? peaks_.count(x.handle) != 0
                    : x.source == ExpectStep::Source::kWatch   ? watches_.count(x.handle) != 0
                                                               : false;
  if (!open) {
    *why = "the handle is not open: opening it failed";
    return false;
  }
  switch (x.source) {
    case ExpectStep::Source::kListener: {
      const ListenerState& l = *listeners_.at(x.handle);
      if (x.removed) {
        *v = l.removed;
        break;
      }
      *v = 0;
      for (int lv = 0; lv < 3; ++lv)
        if (x.level < 0 || x.level == lv) *v += l.by_level[static_cast<size_t>(lv)];
      break;
    }
    case ExpectStep::Source::kTrigger:
      *v = x.removed ? triggers_.at(x.handle)->removed : triggers_.at(x.handle)->fired;
      break;
    case ExpectStep::Source::kWatch:
      *v = x.removed ? watches_.at(x.handle)->removed : watches_.at(x.handle)->notified;
      break;
    case ExpectStep::Source::kPeak: {
      const int err = peaks_.at(x.handle)->read(text);
      if (err) {
        *why = "cannot read: " + error_text(err);
        return false;
      }
      *text = trim(*text);
      if (!read_number(*text, v)) {
        *why = "read `" + *text + "`, not a number";
        return false;
      }
      return true;
    }
    case ExpectStep::Source::kFile:
      break;
  }
  *text = std::to_string(*v);
  return true;
}

std::string Runner::source_text(const ExpectStep& x) {
  switch (x.source) {
    case ExpectStep::Source::kListener:
      return "listener " + x.handle + (x.removed ? " removed" : "") +
             (x.level < 0 ? ""
                          : std::string(" level ") +
                                memcg::to_string(static_cast<memcg::PressureLevel>(x.level)));
    case ExpectStep::Source::kTrigger:
      return "trigger " + x.handle + (x.removed ? " removed" : "");
    case ExpectStep::Source::kPeak:
      return "peak " + x.handle;
    case ExpectStep::Source::kWatch:
      return "watch " + x.handle + (x.removed ? " removed" : "");
    case ExpectStep::Source::kFile:
      break;
  }
  return x.group + " " + x.file + (x.key.empty() ? "" : "." + x.key);
}

bool Runner::pressure_field(const std::string& content, const std::string& key,
                            std::string* value) {
  const size_t dot = key.find('.');
  const std::string kind = key.substr(0, dot), field = key.substr(dot + 1) + "=";
  size_t start = 0;
  while (start < content.size()) {
    size_t end = content.find('\n', start);
    if (end == std::string::npos) end = content.size();
    const std::string line = content.substr(start, end - start);
    if (line.compare(0, kind.size() + 1, kind + " ") == 0) {
      size_t p = line.find(" " + field);
      if (p == std::string::npos) return false;
      p += field.size() + 1;
      const size_t q = line.find(' ', p);
      *value = line.substr(p, q == std::string::npos ? std::string::npos : q - p);
      return true;
    }
    start = end + 1;
  }
  return false;
}

bool Runner::perform_body(const Step&, const ExpectStep& x, StepResult* res) {
  res->checked = true;
  const std::string what = source_text(x);
  std::string expected = std::string(op_name(x.op)) + " " + x.value_text;
  if (x.op == ExpectStep::Op::kCloseTo) expected += " err " + std::to_string(x.err);
  res->detail["expected"] = expected;
  // A handle is read without its group, which may have been removed (a watch sees that).
  memcg::GroupRef g =
      x.source == ExpectStep::Source::kFile ? group(x.group, res) : memcg::GroupRef{};
  if (!g && x.source == ExpectStep::Source::kFile) {
    res->failed = false;
    res->passed = false;
    res->message = "expect " + what + " " + expected + ": no group " + x.group;
    return true;
  }
  std::string text, why;
  uint64_t v = 0;
  if (x.source != ExpectStep::Source::kFile) {
    handle_value(x, &v, &text, &why);
  } else if (x.file == "memory.pressure") {
    std::string content;
    const int err = memcg::read_file(*g, x.file, &content);
    if (err) {
      why = "cannot read: " + error_text(err);
    } else if (!pressure_field(content, x.key, &text)) {
      why = "no key `" + x.key + "` in memory.pressure";
    } else if (!(x.hundredths ? parse_hundredths(text, &v) : read_number(text, &v))) {
      why = "read `" + text + "`, not a number";
    }
  } else if (read_value(*g, x.file, x.key, &text, &why) == 0 && !read_number(text, &v)) {
    why = "read `" + text + "`, not a number";
  }
  if (!why.empty()) {
    res->passed = false;
    res->detail["error"] = why;
    res->message = "expect " + what + " " + expected + ": " + why;
    return true;
  }
  res->detail["read"] = value_json(text);
  switch (x.op) {
    case ExpectStep::Op::kEq:
      res->passed = v == x.value;
      break;
    case ExpectStep::Op::kLe:
      res->passed = v <= x.value;
      break;
    case ExpectStep::Op::kGe:
      res->passed = v >= x.value;
      break;
    case ExpectStep::Op::kCloseTo:
      res->passed = close_to(v, x.value, x.err);
      break;
  }
  if (!res->passed) {
    std::string read = text;
    if (x.source == ExpectStep::Source::kFile && !x.hundredths && human_size(v) != text)
      read += " (" + human_size(v) + ")";
    res->message = "expect " + what + " " + expected + ": read " + read;
  }
  return true;
}

bool Runner::perform_body(const Step&, const PrintStep& p, StepResult* res) {
  std::vector<std::string> groups;
  if (p.group == "all") {
    for (const std::string& path : r_.groups)
      if (ctl_.lookup(path)) groups.push_back(path);
  } else {
    groups.push_back(p.group);
  }
  const std::string file = p.file.empty() ? "memory.current" : p.file;
  Json values = Json::object();
  for (const std::string& path : groups) {
    memcg::GroupRef g = group(path, res);
    if (!g) return true;
    std::string content;
    const int err = memcg::read_file(*g, file, &content);
    if (err) {
      res->failed = true;
      res->message = "print " + path + " " + file + ": cannot read: " + error_text(err);
      return true;
    }
    if (is_keyed_file(file)) {
      bool found = p.key.empty();
      for (const auto& [k, v] : keyed_lines(content)) {
        if (!p.key.empty() && k != p.key) continue;
        found = true;
        res->lines.push_back(path + " " + file + "." + k + " " + v);
        values[path][k] = value_json(v);
      }
      if (!found) {
        res->failed = true;
        res->message = "print " + path + " " + file + ": no key `" + p.key + "`";
        return true;
      }
    } else {
      const std::string v = trim(content);
      res->lines.push_back(path + " " + file + " " + v);
      values[path] = value_json(v);
    }
  }
  res->detail["values"] = std::move(values);
  return true;
}

}  // namespace memcgctl::detail
