// The scenario loader: `expect` and `print` (loader.hpp).
#include "loader.hpp"

#include "memcg/base/errors.hpp"
#include "memcg/files/parse.hpp"

namespace memcgctl::detail {

bool Loader::load_expect(const YAML::Node& v, Step* step) {
  Entries e;
  if (!entries_required_map(v, "expect",
                            {"group", "file", "key", "eq", "le", "ge", "close_to", "err",
                             "listener", "level", "trigger", "peak", "watch", "removed"},
                            &e))
    return false;
  ExpectStep x;
  bool ok = true;
  int sources = 0;
  for (auto [name, src] : {std::pair{"listener", ExpectStep::Source::kListener},
                           {"trigger", ExpectStep::Source::kTrigger},
                           {"peak", ExpectStep::Source::kPeak},
                           {"watch", ExpectStep::Source::kWatch}}) {
    const YAML::Node* n = find(e, name);
    if (!n) continue;
    ++sources;
    x.source = src;
    if (!scalar(*n, std::string("expect ") + name, &x.handle) ||
        !handle_ref(*n, x.handle, name == std::string("listener") ? "listener" : name, "expect")) {
      ok = false;
    } else {
      x.group = handles_[x.handle].second;
    }
  }
  if (sources > 1 || (sources == 1 && (find(e, "group") || find(e, "file") || find(e, "key")))) {
    error(v,
          "expect: read either a group's `file` or one handle (`listener`, `trigger`, "
          "`peak` or `watch`)");
    step->body = std::move(x);
    return false;
  }
  if (const YAML::Node* l = find(e, "level")) {
    std::string level;
    memcg::PressureLevel lv{};
    memcg::PressureMode md{};
    if (x.source != ExpectStep::Source::kListener) {
      error(*l, "expect: `level` goes with `listener` only");
      ok = false;
    } else if (!scalar(*l, "expect level", &level) ||
               memcg::parse_pressure_level(level, &lv, &md) != 0 || level.find(',') != level.npos) {
      error(*l, "expect level: expected low, medium or critical");
      ok = false;
    } else {
      x.level = static_cast<int>(lv);
    }
  }
  if (const YAML::Node* r = find(e, "removed")) {
    bool on = false;
    if (x.source != ExpectStep::Source::kWatch && x.source != ExpectStep::Source::kListener &&
        x.source != ExpectStep::Source::kTrigger) {
      error(*r, "expect: `removed` goes with `watch`, `listener` or `trigger` only");
      ok = false;
    } else if (find(e, "level")) {
      error(*r, "expect: `removed` counts the removal notice alone: no `level` with it");
      ok = false;
    } else if (!boolean(*r, "expect removed", &on)) {
      ok = false;
    } else if (!on) {
      error(*r, "expect removed: only `true` means something");
      ok = false;
    }
    x.removed = on;
  }
  if (x.source == ExpectStep::Source::kFile) {
    ok = required(v, e, "expect", "group", &x.group) &&
         group_ref(*find(e, "group"), x.group, "expect");
    ok = required(v, e, "expect", "file", &x.file) && ok;
    if (const YAML::Node* k = find(e, "key")) ok = scalar(*k, "expect key", &x.key) && ok;
    if (ok && x.key.empty() && is_keyed_file(x.file)) {
      error(*find(e, "file"), "expect: " + x.file + " has one value per key: give a `key`");
      ok = false;
    }
    if (ok && x.file == "memory.pressure") {
      static const std::set<std::string> kKeys = {"some.avg10",  "some.avg60", "some.avg300",
                                                  "some.total",  "full.avg10", "full.avg60",
                                                  "full.avg300", "full.total"};
      if (!kKeys.count(x.key)) {
        error(find(e, "key") ? *find(e, "key") : *find(e, "file"),
              "expect: memory.pressure needs a `key` of some|full.avg10|avg60|avg300|total, not `" +
                  x.key + "`");
        ok = false;
      }
      x.hundredths = x.key.find(".avg") != std::string::npos;
    }
  }
  int ops = 0;
  const YAML::Node* value = nullptr;
  for (auto [name, op] : {std::pair{"eq", ExpectStep::Op::kEq},
                          {"le", ExpectStep::Op::kLe},
                          {"ge", ExpectStep::Op::kGe},
                          {"close_to", ExpectStep::Op::kCloseTo}}) {
    if (const YAML::Node* n = find(e, name)) {
      ++ops;
      x.op = op;
      value = n;
    }
  }
  if (ops != 1) {
    error(v, "expect: give exactly one check of `eq`, `le`, `ge` or `close_to`");
    step->body = std::move(x);
    return false;
  }
  std::string what = std::string("expect ") + op_name(x.op);
  if (x.hundredths) {
    std::string t;
    if (!scalar(*value, what, &t) || !parse_hundredths(t, &x.value)) {
      error(*value, what + ": `" + value->Scalar() +
                        "` is not a percentage from 0 to 100 with at most two decimals");
      ok = false;
    }
  } else if (x.source == ExpectStep::Source::kListener ||
             x.source == ExpectStep::Source::kTrigger || x.source == ExpectStep::Source::kWatch) {
    std::string t;
    if (!scalar(*value, what, &t) || !parse_uint(t, &x.value)) {
      error(*value, what + ": expected a whole number of notifications");
      ok = false;
    }
  } else {
    ok = size(*value, what, &x.value) && ok;
  }
  x.value_text = value->IsScalar() ? value->Scalar() : "";
  const YAML::Node* err = find(e, "err");
  if (x.op == ExpectStep::Op::kCloseTo) {
    std::string s;
    if (!err) {
      error(v, "expect close_to: missing `err` (the allowed error, in percent)");
      ok = false;
    } else if (!scalar(*err, "expect err", &s) || !parse_uint(s, &x.err) || x.err > 100) {
      error(*err, "expect err: expected a whole percentage from 0 to 100");
      ok = false;
    }
  } else if (err) {
    error(*err, "expect: `err` goes with `close_to` only");
    ok = false;
  }
  step->body = std::move(x);
  return ok;
}

bool Loader::load_print(const YAML::Node& v, Step* step) {
  Entries e;
  if (!entries_required_map(v, "print", {"group", "file", "key"}, &e)) return false;
  PrintStep p;
  if (!required(v, e, "print", "group", &p.group)) return false;
  bool ok = p.group == "all" || group_ref(*find(e, "group"), p.group, "print");
  if (const YAML::Node* f = find(e, "file")) ok = scalar(*f, "print file", &p.file) && ok;
  if (const YAML::Node* k = find(e, "key")) {
    ok = scalar(*k, "print key", &p.key) && ok;
    if (ok && !is_keyed_file(p.file)) {
      error(*k, "print: `key` needs a keyed file (memory.events, memory.stat, ...)");
      ok = false;
    }
  }
  if (ok) {
    const uint64_t files = p.group == "all" ? online_.size() : 1;
    if (files > kMaxPrintedFiles - printed_files_) {
      error(*find(e, "group"), "print: the prints of this scenario add up to more than " +
                                   std::to_string(kMaxPrintedFiles) +
                                   " group files (`all` counts every online group)");
      ok = false;
    } else {
      printed_files_ += files;
    }
  }
  step->body = std::move(p);
  return ok;
}

}  // namespace memcgctl::detail
