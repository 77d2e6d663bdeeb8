// OpenStore: the Store that `perftracker server --store <spec>` names. A postgresql:// (or
// postgres://) URL opens a PostgresStore, shared with other servers on that database;
// anything else is the path of an SQLite file (SqliteStore), created when missing.
#pragma once

#include <memory>
#include <string>

#include "perftracker/core/status.h"
#include "perftracker/server/store/store.h"

namespace perftracker {

// Errors are one line that names the store (a URL's password masked) and the problem; a
// PostgreSQL URL given to a build without libpq says so and how to get it.
StatusOr<std::unique_ptr<Store>> OpenStore(const std::string& spec);

// Whether `spec` names a store several servers may share (a PostgreSQL URL).
bool IsSharedStoreSpec(const std::string& spec);

// What messages may print of `spec`: the URL with its password masked, or the path.
std::string StoreDisplayName(const std::string& spec);

}  // namespace perftracker
