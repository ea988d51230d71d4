// Uses the installed memcg::sqlite component: a tenant's database, a row written and read back,
// its page cache and heap counted in the group while open, and the group back to 0 once the
// connection is closed and the Engine gone.
#include <memcg/memcg.hpp>
#include <memcg/sqlite/connection.hpp>
#include <memcg/sqlite/engine.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

int main() {
  std::string dir = (std::filesystem::temp_directory_path() / "memcg-consumer-XXXXXX").string();
  if (mkdtemp(dir.data()) == nullptr) return 1;
  int rc = 0;
  {
    memcg::Options options;
    memcg::sqlite::add_stat_kinds(options);
    memcg::Controller ctl(options);
    memcg::GroupRef g;
    if (ctl.create("tenant", &g) != 0) return 2;
    {
      std::unique_ptr<memcg::sqlite::Engine> engine;
      std::string why;
      if (memcg::sqlite::Engine::install(ctl, {}, &engine, &why) != 0) {
        std::fprintf(stderr, "%s\n", why.c_str());
        return 3;
      }
      memcg::sqlite::Connection db;
      if (memcg::sqlite::Connection::open(dir + "/t.db", *g, &db, &why) != 0) return 4;
      if (db.exec("CREATE TABLE t(k INTEGER PRIMARY KEY, v TEXT);"
                  "INSERT INTO t VALUES (1, 'one');") != SQLITE_OK)
        rc = 5;
      const uint64_t open_current = g->current();
      std::printf("sqlite tenant current=%llu\n", static_cast<unsigned long long>(open_current));
      if (open_current == 0) rc = 6;
      if (db.close() != SQLITE_OK) rc = 7;
    }
    ctl.drain_stocks();
    if (g->current() != 0) rc = 8;
  }
  std::filesystem::remove_all(dir);
  return rc;
}
