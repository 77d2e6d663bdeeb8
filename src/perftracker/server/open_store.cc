#include "perftracker/server/open_store.h"

#include "perftracker/server/sqlite/sqlite_store.h"
#if PERFTRACKER_HAVE_POSTGRES
#include "perftracker/server/postgres/postgres_store.h"
#endif

namespace perftracker {

bool IsSharedStoreSpec(const std::string& spec) {
  return spec.rfind("postgresql://", 0) == 0 || spec.rfind("postgres://", 0) == 0;
}

std::string StoreDisplayName(const std::string& spec) {
#if PERFTRACKER_HAVE_POSTGRES
  if (IsSharedStoreSpec(spec)) return RedactPostgresUrl(spec);
#endif
  return spec;
}

StatusOr<std::unique_ptr<Store>> OpenStore(const std::string& spec) {
  if (IsSharedStoreSpec(spec)) {
#if PERFTRACKER_HAVE_POSTGRES
    StatusOr<std::unique_ptr<PostgresStore>> store = PostgresStore::Open(spec);
    if (!store.ok()) return store.status();
    return std::unique_ptr<Store>(std::move(store).value());
#else
    return Status::InvalidArgument(
        "store: this perftracker was built without PostgreSQL support (libpq); install "
        "libpq-dev and rebuild, or pass the path of an SQLite file");
#endif
  }
  StatusOr<std::unique_ptr<SqliteStore>> store = SqliteStore::Open(spec);
  if (!store.ok()) return store.status();
  return std::unique_ptr<Store>(std::move(store).value());
}

}  // namespace perftracker
