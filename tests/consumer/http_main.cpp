// Uses the installed memcg::http: starts the endpoint on a free loopback port and stops it.
#include <memcg/http/server.hpp>
#include <memcg/memcg.hpp>

#include <cstdio>
#include <string>

int main() {
  memcg::Controller ctl;
  memcg::http::Server server(ctl);
  std::string error;
  if (server.start(&error) != 0) {
    std::fprintf(stderr, "%s\n", error.c_str());
    return 1;
  }
  std::printf("serving on 127.0.0.1:%d\n", server.port());
  server.stop();
  return server.running() ? 2 : 0;
}
