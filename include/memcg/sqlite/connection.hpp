// Connection: one tenant's SQLite connection, its page caches and heap charged to the tenant's
// group (engine.hpp says how).
//
//   memcg::sqlite::Connection db;
//   if (int rc = memcg::sqlite::Connection::open(path, *tenant, &db, &why); rc != 0) ...
//   db.exec("CREATE TABLE t(k INTEGER PRIMARY KEY, v BLOB)");
//   {
//     memcg::sqlite::ConnectionScope scope = db.scope();   // around the tenant's own statements
//     sqlite3_stmt* stmt; sqlite3_prepare_v2(db.handle(), ...); ...
//   }
//   db.close();                                            // or let it go: the destructor closes
//
// It holds a reference to its group, so the group may be removed while the connection is open:
// its charges stay valid and are uncharged at close (from the removed group's ancestors' view, as
// any charge of a removed group is). A connection may be used and closed from any thread, with
// SQLite's own rule that one connection is used by one thread at a time (SQLITE_OPEN_FULLMUTEX,
// the default of Debian's build, serializes it otherwise).
#ifndef MEMCG_SQLITE_CONNECTION_HPP_
#define MEMCG_SQLITE_CONNECTION_HPP_

#include <sqlite3.h>

#include <string>

#include "memcg/core/tree/group.hpp"
#include "memcg/sqlite/engine.hpp"

namespace memcg::sqlite {

class Connection {
 public:
  Connection() = default;
  // Closes (sqlite3_close_v2: unfinalized statements keep it alive until they are finalized).
  ~Connection() { close_v2(); }
  Connection(Connection&& o) noexcept;
  Connection& operator=(Connection&& o) noexcept;
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Opens `path` (sqlite3_open_v2's `flags`; a URI when SQLite is built for them) for `group`:
  // what the open allocates and the connection's caches are the group's, and the database's
  // header is read at once, so that a page size other than the default gives a cache of the
  // group too. Errors (nothing opened, `*out` unchanged, `error` set):
  //   ENOENT  no Engine is installed, or `group` was removed ("group <path> was removed");
  //   EINVAL  `group` belongs to another controller than the Engine's;
  //   EIO     SQLite could not open it (its message in `error`, its code in *sqlite_rc).
  [[nodiscard]] static int open(const std::string& path, Group& group, Connection* out,
                                std::string* error = nullptr,
                                int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE,
                                int* sqlite_rc = nullptr);

  // sqlite3_exec in the connection's scope, then a safe point (memcg's deferred reclaim for what
  // the heap could not charge). Returns SQLite's result code; `error` gets its message.
  int exec(const char* sql, std::string* error = nullptr);
  // A scope for the caller's own statements on this connection (engine.hpp, rule 1).
  // REQUIRES: the connection is open.
  [[nodiscard]] ConnectionScope scope() const noexcept { return ConnectionScope(*group_); }
  // Moves the connection's caches to `group` (bind() in engine.hpp); the heap allocated later
  // in its scopes goes there too.
  [[nodiscard]] int rebind(Group& group, std::string* error = nullptr);

  // sqlite3_close: SQLITE_BUSY (the connection stays open) while statements are unfinalized.
  int close();

  sqlite3* handle() const noexcept { return db_; }
  bool is_open() const noexcept { return db_ != nullptr; }
  Group* group() const noexcept { return group_.get(); }

 private:
  void close_v2() noexcept;
  sqlite3* db_ = nullptr;
  GroupRef group_;
};

}  // namespace memcg::sqlite

#endif  // MEMCG_SQLITE_CONNECTION_HPP_
