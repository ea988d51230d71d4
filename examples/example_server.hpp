// `--serve PORT` for the examples: serves one Controller over HTTP on 127.0.0.1 (memcg::http:
// /metrics, the page, /v1/oom) while the example runs, and prints "serving on
// http://127.0.0.1:PORT" as the first line of the output (PORT 0 picks a free port) so that a
// test or a person knows where to look. Built without memcg::http (no libmicrohttpd), start()
// says so and fails.
#pragma once

#include <cstdio>
#include <memory>
#include <string>

#include "memcg/core/tree/controller.hpp"
#ifdef MEMCG_EXAMPLE_HTTP
#include "memcg/http/server.hpp"
#endif

namespace memcg_example {

class ExampleServer {
 public:
  // Starts serving `ctl` (which must outlive this object) on `port`; false with a message on
  // stderr when it cannot.
  bool start(memcg::Controller& ctl, int port) {
#ifdef MEMCG_EXAMPLE_HTTP
    memcg::http::ServerOptions so;  // loopback only, read-only: the defaults
    so.port = port;
    server_ = std::make_unique<memcg::http::Server>(ctl, so);
    std::string error;
    if (server_->start(&error) != 0) {
      std::fprintf(stderr, "cannot serve: %s\n", error.c_str());
      return false;
    }
    std::printf("serving on http://127.0.0.1:%d\n", server_->port());
    std::fflush(stdout);
    return true;
#else
    static_cast<void>(ctl);
    static_cast<void>(port);
    std::fprintf(stderr, "built without memcg::http (it needs libmicrohttpd): no --serve\n");
    return false;
#endif
  }

 private:
#ifdef MEMCG_EXAMPLE_HTTP
  std::unique_ptr<memcg::http::Server> server_;
#endif
};

}  // namespace memcg_example
