#!/usr/bin/env bash
# How long the migration that keys events by account (20261203000001) takes per million rows:
# a database migrated up to the release before it, filled with N events, N tagged, N deliveries
# and 2N attempts, then the one migration, timed. PostgreSQL through psql; SQLite through the
# sqlite3 shell, inside one transaction with foreign keys on, as sqlx runs it.
#   benches/migrations/event-ids-per-account.sh [N]   (default 1000000)
set -euo pipefail
cd "$(dirname "$0")/../../kxp-sender/migrations"
N="${1:-1000000}"
MIGRATION=20261203000001_event_ids_per_account.sql
PG="psql -qX -v ON_ERROR_STOP=1 -h 127.0.0.1 -U postgres"

fill() { # $1: the SQL dialect's "now" in ms
    cat <<SQL
INSERT INTO kxp_accounts (id, name, api_key_hash, default_api_version, created_at)
    VALUES ('acc_1', 'a', 'h', 'v', 1);
INSERT INTO kxp_endpoints (id, account_id, url, event_types, timeout_ms, created_at, updated_at)
    VALUES ('ep_1', 'acc_1', 'http://127.0.0.1:9/', '["*"]', 1000, 1, 1);
INSERT INTO kxp_events (id, account_id, event_type, api_version, payload, created_at)
    SELECT 'evt_' || i, 'acc_1', 'payment.succeeded', 'v', '{"data":{"amount":4200,"currency":"EUR"}}', i FROM s;
INSERT INTO kxp_event_tags (event_id, tag, account_id, created_at) SELECT 'evt_' || i, 'order:' || i, 'acc_1', i FROM s;
INSERT INTO kxp_deliveries (id, account_id, event_id, endpoint_id, status, next_attempt_at, created_at, updated_at, sequence)
    SELECT 'dlv_' || i, 'acc_1', 'evt_' || i, 'ep_1', 'delivered', i, i, i, i FROM s;
INSERT INTO kxp_attempts (delivery_id, attempt, started_at, duration_ms) SELECT 'dlv_' || i, 1, i, 5 FROM s;
INSERT INTO kxp_attempts (delivery_id, attempt, started_at, duration_ms) SELECT 'dlv_' || i, 2, i, 5 FROM s;
SQL
}

echo "== PostgreSQL, N = $N"
$PG -d test -c "DROP DATABASE IF EXISTS kxp_migration_bench" -c "CREATE DATABASE kxp_migration_bench"
for f in postgres/*.sql; do [[ "$(basename "$f")" < "$MIGRATION" ]] && $PG -d kxp_migration_bench -f "$f" >/dev/null; done
{ echo "CREATE TEMP VIEW s AS SELECT generate_series(1, $N) AS i;"; fill; echo "VACUUM ANALYZE;"; } | $PG -d kxp_migration_bench
start=$(date +%s.%N)
{ echo "BEGIN;"; cat "postgres/$MIGRATION"; echo "COMMIT;"; } | $PG -d kxp_migration_bench 2>&1 | grep -v NOTICE || true
echo "migration: $(echo "$(date +%s.%N) - $start" | bc) s"
$PG -d test -c "DROP DATABASE kxp_migration_bench"

echo "== SQLite, N = $N"
db=$(mktemp -d)/kxp.db
for f in sqlite/*.sql; do [[ "$(basename "$f")" < "$MIGRATION" ]] && sqlite3 "$db" < "$f"; done
{ echo "PRAGMA journal_mode = WAL; BEGIN;";
  echo "CREATE TEMP TABLE s AS WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < $N) SELECT i FROM c;";
  fill; echo "COMMIT;"; } | sqlite3 "$db" >/dev/null
start=$(date +%s.%N)
{ echo "PRAGMA foreign_keys = ON; BEGIN;"; cat "sqlite/$MIGRATION"; echo "COMMIT;"; } | sqlite3 "$db"
echo "migration: $(echo "$(date +%s.%N) - $start" | bc) s"
rm -rf "$(dirname "$db")"
