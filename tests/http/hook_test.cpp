// memcg::http with the global hook (memcg::hook) linked: the server is started and stopped from
// a thread attached to a group that is full, and serves while it is; nothing it allocates is
// charged to that group (its own threads are never attached). Not built under sanitizers, like
// every test that links the hook.
#include <gtest/gtest.h>
#include <httplib.h>

#include <string>

#include "memcg/core/charge/attach.hpp"
#include "memcg/core/tree/controller.hpp"
#include "memcg/hook/hook.hpp"
#include "memcg/http/server.hpp"

namespace memcg::http {
namespace {

TEST(HttpHookTest, ServingChargesNothingToTheStartingThreadsGroup) {
  Controller ctl;
  GroupRef tenant;
  ASSERT_EQ(ctl.create("tenant", &tenant), 0);
  Server server(ctl);  // the object itself is the caller's memory: made before attaching
  uint64_t charged_at_start = 0;
  {
    ScopedAttach in_tenant(*tenant);
    ASSERT_TRUE(in_tenant.ok());
    // Full: any further charge to the tenant would fail (operator new would throw).
    charged_at_start = tenant->current();
    tenant->set_max(charged_at_start);
    const uint64_t failed_before = hook::failed_charges();
    // The server's structures, its threads and their allocations are the library's.
    const int err = server.start();
    const uint64_t after = tenant->current();
    const uint64_t failed = hook::failed_charges();
    tenant->set_max(kUnlimited);  // before any assertion allocates a message
    ASSERT_EQ(err, 0);
    EXPECT_EQ(failed, failed_before);
    EXPECT_EQ(after, charged_at_start);
  }
  // Scrapes (from this thread, now unattached) make the server's threads allocate megabytes.
  tenant->set_max(charged_at_start);  // full again while the server serves
  httplib::Client client("127.0.0.1", server.port());
  client.set_read_timeout(10, 0);
  for (const char* path : {"/metrics", "/v1/groups", "/v1/groups/tenant/memory.stat"}) {
    auto res = client.Get(path);
    ASSERT_TRUE(res) << path;
    EXPECT_EQ(res->status, 200) << path;
  }
  EXPECT_EQ(tenant->current(), charged_at_start);
  uint64_t after_stop = 0;
  {
    ScopedAttach in_tenant(*tenant);
    server.stop();
    after_stop = tenant->current();
  }
  tenant->set_max(kUnlimited);
  EXPECT_EQ(after_stop, charged_at_start);
  EXPECT_FALSE(server.running());
}

}  // namespace
}  // namespace memcg::http
