#include "ledger/keys.h"

#include <sys/random.h>

#include <algorithm>

#include <nlohmann/json.hpp>

#include "common/sha256.h"
#include "common/tags.h"
#include "ledger/any_db.h"

namespace ferry::ledger {

namespace {

constexpr const char* kColumns =
    "id, sha256, team, project, role, tags, created_us, created_by, revoked_us";

Result<std::string> random_hex(size_t bytes) {
  std::string raw(bytes, '\0');
  size_t got = 0;
  while (got < bytes) {
    ssize_t n = getrandom(raw.data() + got, bytes - got, 0);
    if (n <= 0) return Error::make(ErrorCode::kInternal, "no randomness for a key");
    got += static_cast<size_t>(n);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : raw) {
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

std::string tags_text(const std::vector<std::string>& tags) {
  return nlohmann::json(tags).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

StoredKey key_of(const std::vector<Value>& row) {
  StoredKey k;
  k.id = value_text(row[0]);
  k.sha256 = value_text(row[1]);
  k.team = value_text(row[2]);
  k.project = value_text(row[3]);
  k.role = value_text(row[4]);
  auto tags = nlohmann::json::parse(value_text(row[5]), nullptr, false);
  if (tags.is_array()) {
    for (const auto& t : tags) {
      if (t.is_string()) k.tags.push_back(t.get<std::string>());
    }
  }
  k.created_us = value_int(row[6]);
  k.created_by = value_text(row[7]);
  if (!std::holds_alternative<std::monostate>(row[8])) k.revoked_us = value_int(row[8]);
  return k;
}

Result<std::optional<StoredKey>> find_key(const std::string& db, const std::string& id) {
  auto rows =
      query_rows(db, std::string("SELECT ") + kColumns + " FROM api_keys WHERE id = ?", {id});
  if (!rows) return rows.error();
  if (rows->empty()) return std::optional<StoredKey>();
  return std::optional<StoredKey>(key_of(rows->front()));
}

}  // namespace

bool is_key_id(std::string_view id) {
  if (id.empty() || id.size() > 64) return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '.' || c == '-';
  });
}

Result<CreatedKey> create_key(const std::string& db, StoredKey spec,
                              const std::vector<std::string>& reserved_ids) {
  if (spec.id.empty()) {
    auto id = random_hex(6);
    if (!id) return id.error();
    spec.id = "k-" + *id;
  }
  if (!is_key_id(spec.id)) {
    return Error::make(ErrorCode::kInvalidRequest,
                       "a key id must be 1-64 of A-Z a-z 0-9 _ . -, got '" + spec.id + "'", "id",
                       "invalid_value");
  }
  if (std::find(spec.tags.begin(), spec.tags.end(), kShadowTag) != spec.tags.end()) {
    return Error::make(ErrorCode::kInvalidRequest,
                       "the tag 'shadow' is reserved for the rows of shadow copies", "tags",
                       "invalid_value");
  }
  auto conflict = [&] {
    return Error::make(ErrorCode::kInvalidRequest, "a key with the id '" + spec.id + "' exists",
                       "id", "key_exists");
  };
  if (std::find(reserved_ids.begin(), reserved_ids.end(), spec.id) != reserved_ids.end()) {
    return conflict();
  }
  auto existing = find_key(db, spec.id);
  if (!existing) return existing.error();
  if (*existing) return conflict();
  auto secret = random_hex(24);
  if (!secret) return secret.error();
  CreatedKey out;
  out.secret = "fk-" + *secret;
  spec.sha256 = sha256_hex(out.secret);
  spec.revoked_us.reset();
  auto put = query_rows(db,
                        "INSERT INTO api_keys(id, sha256, team, project, role, tags, created_us, "
                        "created_by) VALUES(?,?,?,?,?,?,?,?)",
                        {spec.id, spec.sha256, spec.team, spec.project, spec.role,
                         tags_text(spec.tags), spec.created_us, spec.created_by},
                        true);
  if (!put) {
    // A concurrent create of the same id lost the race on the primary key.
    if (put.error().code == ErrorCode::kInvalidRequest) return conflict();
    return put.error();
  }
  out.key = std::move(spec);
  return out;
}

namespace {

Result<std::vector<StoredKey>> list_on(AnyDb& conn, bool include_revoked) {
  auto rows = conn.query(std::string("SELECT ") + kColumns + " FROM api_keys" +
                             (include_revoked ? "" : " WHERE revoked_us IS NULL") +
                             " ORDER BY created_us, id",
                         {});
  if (!rows) return rows.error();
  std::vector<StoredKey> out;
  for (const auto& row : *rows) out.push_back(key_of(row));
  return out;
}

}  // namespace

Result<std::vector<StoredKey>> list_keys(const std::string& db, bool include_revoked) {
  auto conn = AnyDb::open(db);
  if (!conn) return conn.error();
  return list_on(*conn, include_revoked);
}

Result<StoredKey> revoke_key(const std::string& db, const std::string& id, int64_t now_us) {
  auto done =
      query_rows(db, "UPDATE api_keys SET revoked_us = ? WHERE id = ? AND revoked_us IS NULL",
                 {now_us, id}, true);
  if (!done) return done.error();
  auto key = find_key(db, id);
  if (!key) return key.error();
  if (!*key) {
    return Error::make(ErrorCode::kNotFound, "no stored key has the id '" + id + "'", "id",
                       "key_not_found");
  }
  return **key;
}

StoredKeyReader::StoredKeyReader(std::string db) : db_(std::move(db)) {}
StoredKeyReader::~StoredKeyReader() = default;

Result<StoredKeyReader::Keys> StoredKeyReader::read() {
  auto got = read_if(true);
  if (!got) return got.error();
  return std::move(**got);
}

Result<std::optional<StoredKeyReader::Keys>> StoredKeyReader::poll() {
  return read_if(false);
}

Result<std::optional<StoredKeyReader::Keys>> StoredKeyReader::read_if(bool always) {
  if (!conn_) {
    auto conn = AnyDb::open(db_);
    if (!conn) return conn.error();
    conn_ = std::make_unique<AnyDb>(std::move(*conn));
    ++connects_;
  }
  auto fail = [&](Error e) -> Result<std::optional<Keys>> {
    conn_.reset();
    seen_.reset();
    return e;
  };
  // Read before the keys: a change made between the two is seen again by the next poll.
  auto sums = conn_->query(
      "SELECT COUNT(*), COUNT(revoked_us), COALESCE(MAX(created_us), 0), "
      "COALESCE(MAX(revoked_us), 0) FROM api_keys",
      {});
  if (!sums) return fail(sums.error());
  if (sums->empty() || sums->front().size() != 4) {
    return fail(Error::make(ErrorCode::kInternal, "the api_keys aggregate returned no row"));
  }
  std::array<int64_t, 4> now{};
  for (size_t i = 0; i < now.size(); ++i) now[i] = value_int(sums->front()[i]);
  if (!always && seen_ && *seen_ == now) return std::optional<Keys>();
  auto active = list_on(*conn_, false);
  if (!active) return fail(active.error());
  ++full_reads_;
  seen_ = now;
  Keys out;
  out.active = std::move(*active);
  // Authentication stays on once any key was stored, even with every key revoked.
  out.ever_stored = now[0] > 0;
  return std::optional<Keys>(std::move(out));
}

}  // namespace ferry::ledger
