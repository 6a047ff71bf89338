#!/bin/sh
# PostgreSQL from Debian's package as the official image starts it: on an empty data
# folder, a cluster whose superuser POSTGRES_USER has the password in
# POSTGRES_PASSWORD_FILE and the database POSTGRES_DB, reachable with it (scram) over
# the network; then the server in the foreground.
set -eu
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  initdb --encoding=UTF8 --locale=C.UTF-8 --username="$POSTGRES_USER" --pwfile="$POSTGRES_PASSWORD_FILE" --auth-local=trust --auth-host=scram-sha-256 \
         -D "$PGDATA" >/dev/null
  echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
  pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start >/dev/null
  createdb --username="$POSTGRES_USER" "$POSTGRES_DB"
  pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
fi
exec postgres -D "$PGDATA" -c listen_addresses='*'
