#include "memcg/sqlite/connection.hpp"

#include <cerrno>
#include <utility>

#include "memcg/core/charge/safe_point.hpp"

namespace memcg::sqlite {

namespace {
int fail(std::string* error, int code, std::string why) {
  if (error != nullptr) *error = std::move(why);
  return code;
}
}  // namespace

Connection::Connection(Connection&& o) noexcept
    : db_(std::exchange(o.db_, nullptr)), group_(std::move(o.group_)) {}

Connection& Connection::operator=(Connection&& o) noexcept {
  if (this != &o) {
    close_v2();
    db_ = std::exchange(o.db_, nullptr);
    group_ = std::move(o.group_);
  }
  return *this;
}

int Connection::open(const std::string& path, Group& group, Connection* out, std::string* error,
                     int flags, int* sqlite_rc) {
  if (sqlite_rc != nullptr) *sqlite_rc = SQLITE_OK;
  Engine* e = Engine::current();
  if (e == nullptr) return fail(error, ENOENT, "memcg::sqlite: no Engine is installed");
  if (&group.controller() != &e->controller())
    return fail(error, EINVAL, "memcg::sqlite: the group belongs to another controller");
  if (!group.is_online())
    return fail(error, ENOENT,
                "memcg::sqlite: cannot open " + path + ": group " + group.path() +
                    " was removed");
  GroupRef ref(&group);
  sqlite3* db = nullptr;
  int rc;
  {
    ConnectionScope scope(group);
    rc = sqlite3_open_v2(path.c_str(), &db, flags, nullptr);
    // The header now, in the scope: a database of another page size gets its final cache here
    // (SQLite re-creates the cache when it learns the page size), so the group's too.
    if (rc == SQLITE_OK) rc = sqlite3_exec(db, "PRAGMA schema_version", nullptr, nullptr, nullptr);
    if (rc != SQLITE_OK) {
      std::string why = "memcg::sqlite: cannot open " + path + ": " +
                        (db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
      (void)sqlite3_close_v2(db);  // a handle is returned even on failure (null is fine too)
      if (sqlite_rc != nullptr) *sqlite_rc = rc;
      safe_point();
      return fail(error, EIO, std::move(why));
    }
  }
  safe_point();
  *out = Connection();
  out->db_ = db;
  out->group_ = std::move(ref);
  return 0;
}

int Connection::exec(const char* sql, std::string* error) {
  if (db_ == nullptr) {
    if (error != nullptr) *error = "memcg::sqlite: the connection is closed";
    return SQLITE_MISUSE;
  }
  char* msg = nullptr;
  int rc;
  {
    ConnectionScope s(*group_);
    rc = sqlite3_exec(db_, sql, nullptr, nullptr, &msg);
    if (error != nullptr) *error = msg != nullptr ? msg : (rc == SQLITE_OK ? "" : sqlite3_errstr(rc));
    sqlite3_free(msg);
  }
  safe_point();  // what the heap could not charge: its reclaim runs now, outside SQLite
  return rc;
}

int Connection::rebind(Group& group, std::string* error) {
  if (db_ == nullptr) return fail(error, EINVAL, "memcg::sqlite: the connection is closed");
  if (int rc = bind(db_, group, error); rc != 0) return rc;
  group_ = GroupRef(&group);
  safe_point();
  return 0;
}

int Connection::close() {
  if (db_ == nullptr) return SQLITE_OK;
  int rc;
  {
    ConnectionScope s(*group_);
    rc = sqlite3_close(db_);
  }
  if (rc == SQLITE_OK) {
    db_ = nullptr;
    group_.reset();
  }
  return rc;
}

void Connection::close_v2() noexcept {
  if (db_ == nullptr) return;
  {
    ConnectionScope s(*group_);
    (void)sqlite3_close_v2(db_);  // SQLITE_OK, or a zombie closed by the last finalize
  }
  db_ = nullptr;
  group_.reset();
}

}  // namespace memcg::sqlite
