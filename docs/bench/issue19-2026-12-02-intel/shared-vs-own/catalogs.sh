#!/usr/bin/env bash
# The shared PostgreSQL's state that ages with use: databases, the template's and postgres'
# catalog sizes and dead rows (autovacuum is off on that server), WAL files, when it started.
psql -h 127.0.0.1 -U postgres -d postgres -Atc "SELECT 'databases', count(*) FROM pg_database"
for db in template1 postgres test; do
  psql -h 127.0.0.1 -U postgres -d "$db" -Atc "SELECT '$db', relname, pg_relation_size(oid), n_live_tup, n_dead_tup FROM pg_class JOIN pg_stat_sys_tables USING (relname) WHERE relid = oid AND relname IN ('pg_class','pg_attribute','pg_depend','pg_type','pg_statistic','pg_index') ORDER BY 2"
done
psql -h 127.0.0.1 -U postgres -d postgres -Atc "SELECT 'shared catalogs', relname, pg_relation_size(oid) FROM pg_class WHERE relname IN ('pg_database','pg_authid','pg_shdepend') ORDER BY 2"
psql -h 127.0.0.1 -U postgres -d postgres -Atc "SELECT 'wal files', count(*), pg_size_pretty(sum(size)) FROM pg_ls_waldir()"
psql -h 127.0.0.1 -U postgres -d postgres -Atc "SELECT 'started', pg_postmaster_start_time()"
