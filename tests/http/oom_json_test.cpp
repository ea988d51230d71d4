// /v1/oom and /v1/oom.txt (memcg/http/oom_json.hpp) with the user's text at its worst: names cut
// at a multi-byte character, bytes that are not UTF-8, huge handler names and messages. The JSON
// must parse with a strict parser (nlohmann::json throws on invalid UTF-8) and the text be UTF-8.
#include "memcg/http/oom_json.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "../../src/http/json_put.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/core/oom/oom.hpp"

namespace memcg::http {
namespace {

using namespace std::chrono_literals;

// Throws (nlohmann's type_error 316) when `s` is not valid UTF-8.
void check_utf8(const std::string& s) { static_cast<void>(nlohmann::json(s).dump()); }

Options one_shard() {
  Options o;
  o.nr_shards = 1;
  return o;
}

TEST(OomJson, UserTextAtItsWorstStillParses) {
  Controller ctl(one_shard());
  GroupRef d;
  ASSERT_EQ(ctl.create("d", &d), 0);
  d->set_max(100 * ctl.unit_size());
  auto release = [](Member& m) { m.uncharge(m.charged()); };
  // 255 ASCII bytes then a 2-byte, a 3-byte and a 4-byte character: cut inside the first.
  Member at_cut(*d, std::string(255, 'a') + "\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80", release);
  Member invalid(*d, "q\xFF\xC0\xAF\xED\xA0\x80z", release);
  OomHandler h;
  ASSERT_EQ(OomHandler::add(*d, std::string(1 << 20, 'h') + "\xE2\x82",
                            [](const OomContext&) -> int64_t {
                              throw std::runtime_error(std::string(300, 'w') + "\xFF");
                            },
                            &h),
            0);
  for (int i = 0; i < 60; ++i) ASSERT_TRUE(charged(at_cut.charge(1)));
  for (int i = 0; i < 40; ++i) ASSERT_TRUE(charged(invalid.charge(1)));
  ASSERT_TRUE(OomKiller::kill(*d, 4, nullptr));
  ASSERT_TRUE(at_cut.killed());

  const std::string body = render_oom_json(ctl, 0);
  nlohmann::json j;
  ASSERT_NO_THROW(j = nlohmann::json::parse(body)) << body.substr(0, 2000);
  ASSERT_EQ(j["reports"].size(), 1u);
  const auto& r = j["reports"][0];
  EXPECT_EQ(r["victim"].get<std::string>(), std::string(255, 'a'));
  EXPECT_LE(r["handlers"][0]["handler"].get<std::string>().size(), OomLog::kMaxName);
  EXPECT_EQ(r["handlers"][0]["outcome"].get<std::string>().rfind("threw: www", 0), 0u);
  bool found = false;
  for (const auto& m : r["top_members"])
    found |= m["name"].get<std::string>() == "q\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"
                                             "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBDz";
  EXPECT_TRUE(found) << r["top_members"].dump();
  EXPECT_EQ(j["totals"]["outcomes"]["kill"].get<uint64_t>(), 1u);
  EXPECT_EQ(j["totals"]["outcomes"]["none"].get<uint64_t>(), 0u);
  EXPECT_EQ(j["totals"]["no_victim"].get<uint64_t>(), 0u);

  const std::string text = render_oom_text(ctl, 0);
  EXPECT_NO_THROW(check_utf8(text));
  EXPECT_LT(text.size(), 8192u);
}

// The writer itself: bytes that are not UTF-8 become U+FFFD, valid characters pass unchanged,
// control characters are escaped.
TEST(OomJson, StringsAreValidatedWhenWritten) {
  std::string out;
  json_out::put_string(out, "ok\xC3\xA9\xFF\x80\xE2\x82\"\\\n\xF0\x9F\x98\x80");
  nlohmann::json j;
  ASSERT_NO_THROW(j = nlohmann::json::parse(out)) << out;
  EXPECT_EQ(j.get<std::string>(),
            "ok\xC3\xA9\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\"\\\n\xF0\x9F\x98\x80");
}

}  // namespace
}  // namespace memcg::http
