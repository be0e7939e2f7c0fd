#!/usr/bin/env bash
# Installs and starts a local PostgreSQL for the Postgres tests, then prints the URL they use.
# Idempotent; prints a reason and exits non-zero when Postgres cannot be had here.
set -euo pipefail
DB=deep_research_test USER_NAME=deep_research PASS=deep_research

if ! command -v pg_ctlcluster >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  (apt-get update -qq && apt-get install -y -qq postgresql >/dev/null) >&2 || {
    echo "postgres: apt-get could not install postgresql" >&2; exit 1; }
fi
version=$(ls /usr/lib/postgresql | sort -V | tail -1)
if ! pg_lsclusters -h | grep -q "^$version main"; then
  pg_createcluster "$version" main >&2
fi
pg_ctlcluster "$version" main start >&2 2>&1 || true   # "already running" is fine; stdout carries only the URL
for _ in $(seq 30); do pg_isready -q -h 127.0.0.1 && break; sleep 0.5; done
pg_isready -q -h 127.0.0.1 || { echo "postgres: server did not start" >&2; exit 1; }

as_pg() { su postgres -c "psql -qtA -c \"$1\"" ; }
[ "$(as_pg "SELECT 1 FROM pg_roles WHERE rolname='$USER_NAME'")" = 1 ] || \
  as_pg "CREATE ROLE $USER_NAME LOGIN PASSWORD '$PASS'" >&2
[ "$(as_pg "SELECT 1 FROM pg_database WHERE datname='$DB'")" = 1 ] || \
  as_pg "CREATE DATABASE $DB OWNER $USER_NAME" >&2
echo "postgresql://$USER_NAME:$PASS@127.0.0.1:5432/$DB"
