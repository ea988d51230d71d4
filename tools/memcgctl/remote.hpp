// `memcgctl remote`: a client of a process serving memcg::http (docs/http.md), over TCP
// (http://HOST:PORT) or a Unix socket (unix:PATH):
//
//   memcgctl remote TARGET [--token-file F] [--json] groups
//   memcgctl remote TARGET get GROUP FILE
//   memcgctl remote TARGET set GROUP FILE VALUE
//   memcgctl remote TARGET members [--group G]
//   memcgctl remote TARGET kill ID [--deadline-ms N]
//   memcgctl remote TARGET preempt ID [--deadline-ms N]
//   memcgctl remote TARGET memory
//   memcgctl remote TARGET budget [BYTES | clear] [--force]
//   memcgctl remote TARGET events [--type T] [--group G]
//   memcgctl remote TARGET audit
//
// Human-readable tables by default (the style of systemd-cgtop and kubectl), the server's JSON
// with --json. The token is read from --token-file (or $MEMCG_TOKEN_FILE), never from the
// command line, where other users of the machine would see it.
//
// Exit status: 0 when the server did what was asked (an action whose memory is not given back
// yet, 202, included), 1 when it refused or could not be reached (its error printed), 2 for a
// malformed command line.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>

namespace CLI {
class App;
}

namespace memcgctl {

struct RemoteOptions {
  std::string target;      // http://HOST:PORT or unix:PATH
  std::string token_file;
  bool json = false;
  std::string command;     // groups, get, set, members, kill, preempt, memory, budget, events, audit
  std::string group, file, value;
  std::string id;
  std::string budget;      // "", a size ("512M", bytes), or "clear"
  bool force = false;
  int64_t deadline_ms = -1;
  std::string event_type;
  int64_t max_events = -1;  // events: stop after this many (tests); -1 follows for ever
};

// Adds the `remote` subcommand and its subcommands to `app`, filling `options`; returns it.
CLI::App* add_remote_command(CLI::App& app, RemoteOptions* options);
// Runs what the parsed command line asks.
int run_remote(RemoteOptions options, std::ostream& out, std::ostream& err);

}  // namespace memcgctl
