// The values of the data directory's records (storage.cpp describes the key layout): encoded and
// decoded here, apart from RocksDB, so that their bytes can be tested without a database.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "core/types.h"
#include "shell/storage.h"

namespace voltlock::storage_records {

// "identity": the format version the directory was written in, and whose it is.
struct IdentityRecord {
    uint32_t format_version = 0;
    CellIdentity identity;
    bool operator==(const IdentityRecord&) const = default;
};
Bytes encode_identity(const IdentityRecord& record);
std::optional<IdentityRecord> decode_identity(std::string_view in);

// "view": the view and the last view in which the replica's status was normal.
struct ViewsRecord {
    View view = 0;
    View last_normal_view = 0;
    bool operator==(const ViewsRecord&) const = default;
};
Bytes encode_views(const ViewsRecord& record);
std::optional<ViewsRecord> decode_views(std::string_view in);

// "log/" op: one log entry.
Bytes encode_entry(const Entry& entry);
std::optional<Entry> decode_entry(std::string_view in);

// "snapshot/" op: how the snapshot of `op` is cut into chunks, and their checksums.
struct SnapshotManifest {
    Op op = 0;
    uint64_t size_bytes = 0;
    uint32_t chunk_bytes = 0;
    uint32_t crc = 0;  // over the whole snapshot
    std::vector<uint32_t> chunk_crcs;
    bool operator==(const SnapshotManifest&) const = default;
};
Bytes encode_manifest(const SnapshotManifest& manifest);
// nullopt unless every field is present and consistent with the others.
std::optional<SnapshotManifest> decode_manifest(std::string_view in);

}  // namespace voltlock::storage_records
