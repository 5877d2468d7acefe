#!/usr/bin/env bash
# How long the account-keyed schema's two steps take per million rows: a database migrated up to
# the release before them, filled with N events, N deliveries, 2N attempts and N hourly tallies;
# then the expand step (migrations 20261204000001 to …11, and the fill it runs after them) by
# the expand release's `kxp migrate apply` if its kxp is given, and this version's `kxp migrate
# apply` (the contract step, 20261205000001 on, and the expand step too if it was not run),
# each printing every migration's time.
#   benches/migrations/account-keyed.sh [N] [path to kxp] [path to the expand release's kxp]
#   (defaults 1000000, target/debug/kxp, none: both steps by this version)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
N="${1:-1000000}"
KXP="$(realpath "${2:-$root/target/debug/kxp}")"
EXPAND="${3:+$(realpath "$3")}"
cd "$root/kxp-sender/migrations"
FIRST=20261204000001_account_columns.sql
PG="psql -qX -v ON_ERROR_STOP=1 -h 127.0.0.1 -U postgres"

fill() {
    cat <<SQL
INSERT INTO kxp_accounts (id, name, api_key_hash, default_api_version, created_at)
    VALUES ('acc_1', 'a', 'h', 'v', 1);
INSERT INTO kxp_endpoints (id, account_id, url, event_types, timeout_ms, created_at, updated_at)
    SELECT 'ep_' || i, 'acc_1', 'http://127.0.0.1:9/', '["*"]', 1000, 1, 1 FROM s WHERE i <= 1000;
INSERT INTO kxp_events (id, account_id, event_type, api_version, payload, created_at)
    SELECT 'evt_' || i, 'acc_1', 'payment.succeeded', 'v', '{"data":{"amount":4200,"currency":"EUR"}}', i FROM s;
INSERT INTO kxp_deliveries (id, account_id, event_id, endpoint_id, status, next_attempt_at, created_at, updated_at, sequence)
    SELECT 'dlv_' || i, 'acc_1', 'evt_' || i, 'ep_' || (1 + i % 1000), 'delivered', i, i, i, i FROM s;
INSERT INTO kxp_attempts (delivery_id, attempt, started_at, duration_ms) SELECT 'dlv_' || i, 1, i, 5 FROM s;
INSERT INTO kxp_attempts (delivery_id, attempt, started_at, duration_ms) SELECT 'dlv_' || i, 2, i, 5 FROM s;
INSERT INTO kxp_endpoint_stats_hourly (endpoint_id, hour, successes, failures, le_10, le_25, le_50, le_100,
    le_250, le_500, le_1000, le_2500, le_5000, le_10000, le_30000, le_inf)
    SELECT 'ep_' || (1 + i % 1000), CAST(3600000 AS BIGINT) * (i / 1000), 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 FROM s;
SQL
}

echo "== PostgreSQL, N = $N"
$PG -d test -c "DROP DATABASE IF EXISTS kxp_migration_bench" -c "CREATE DATABASE kxp_migration_bench"
for f in postgres/*.sql; do
    [[ "$(basename "$f")" < "$FIRST" ]] || continue
    $PG -d kxp_migration_bench -f "$f" >/dev/null
    v=$(basename "$f" | cut -d_ -f1)
    $PG -d kxp_migration_bench -c "CREATE TABLE IF NOT EXISTS _sqlx_migrations (version BIGINT PRIMARY KEY, \
        description TEXT NOT NULL, installed_on TIMESTAMPTZ NOT NULL DEFAULT now(), success BOOLEAN NOT NULL, \
        checksum BYTEA NOT NULL, execution_time BIGINT NOT NULL)" >/dev/null
    $PG -d kxp_migration_bench -c "INSERT INTO _sqlx_migrations VALUES ($v, 'bench', now(), true, \
        decode('$(sha384sum "$f" | cut -d' ' -f1)', 'hex'), 0)" >/dev/null
done
{ echo "CREATE TEMP VIEW s AS SELECT generate_series(1, $N) AS i;"; fill; echo "VACUUM ANALYZE;"; } | $PG -d kxp_migration_bench
apply() {
    if [ -n "$EXPAND" ]; then
        echo "-- the expand step, by $EXPAND"
        "$EXPAND" migrate apply --database-url "$1"
        echo "-- the contract step, by $KXP"
    fi
    "$KXP" migrate apply --database-url "$1"
}
apply postgres://postgres@127.0.0.1:5432/kxp_migration_bench
$PG -d test -c "DROP DATABASE kxp_migration_bench"

echo "== SQLite, N = $N"
dir=$(mktemp -d)
db=$dir/kxp.db
sqlite3 "$db" "CREATE TABLE _sqlx_migrations (version BIGINT PRIMARY KEY, description TEXT NOT NULL, \
    installed_on TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP, success BOOLEAN NOT NULL, checksum BLOB NOT NULL, \
    execution_time BIGINT NOT NULL)"
for f in sqlite/*.sql; do
    [[ "$(basename "$f")" < "$FIRST" ]] || continue
    sqlite3 "$db" < "$f"
    v=$(basename "$f" | cut -d_ -f1)
    sqlite3 "$db" "INSERT INTO _sqlx_migrations VALUES ($v, 'bench', CURRENT_TIMESTAMP, 1, \
        X'$(sha384sum "$f" | cut -d' ' -f1)', 0)"
done
{ echo "PRAGMA journal_mode = WAL; BEGIN;";
  echo "CREATE TEMP TABLE s AS WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < $N) SELECT i FROM c;";
  fill; echo "COMMIT;"; } | sqlite3 "$db" >/dev/null
apply "sqlite://$db"
rm -rf "$dir"
