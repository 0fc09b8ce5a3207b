package migrations_test

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
	"github.com/dblock-go/dblock/migrations"
)

// schema is what the migrations must leave behind, as the code relies on it:
// per table, each column as "type[ not null][ extra]"; the primary keys;
// the secondary indexes; and the source of fencing tokens.
type schema struct {
	columns map[string]map[string]string
	pks     map[string]string // table -> primary key columns, comma-separated
	indexes map[string]string // index name -> definition (dialect's own form)
}

// wantSchema is the schema the code's statements and guarantees rely on:
//   - names and owners compare byte for byte (PostgreSQL text under its
//     deterministic collation; MySQL VARBINARY, never a case- or
//     accent-insensitive collation nor trailing-space padding; SQLite TEXT
//     with the binary collation);
//   - times are the database's own (timestamptz, DATETIME(6) in UTC,
//     integer microseconds on SQLite);
//   - free text is utf8mb4 on MySQL;
//   - the reaper has an index for each of its scans (expired leases, stale
//     waiters, idle rows) and the fair queue one for its order.
var wantSchema = map[store.Kind]schema{
	store.Postgres: {
		columns: map[string]map[string]string{
			"dblock_locks": {
				"name": "text not null", "owner": "text", "reentry": "integer not null",
				"version": "bigint not null", "mode": "text",
				"acquired_at": "timestamp with time zone", "expires_at": "timestamp with time zone",
				"updated_at": "timestamp with time zone not null", "metadata": "text",
				"shared_until": "timestamp with time zone", "wanted_until": "timestamp with time zone",
				"next_owner": "text", "next_since": "timestamp with time zone", "next_until": "timestamp with time zone", "reader": "text",
				"listened_until": "timestamp with time zone",
			},
			"dblock_shares": {
				"name": "text not null", "owner": "text not null", "token": "bigint not null", "reentry": "integer not null",
				"acquired_at": "timestamp with time zone not null", "expires_at": "timestamp with time zone not null", "metadata": "text",
			},
			"dblock_semaphores": {"name": "text not null", "lim": "integer not null", "updated_at": "timestamp with time zone not null"},
			"dblock_slots":      {"job": "text not null", "last_slot": "timestamp with time zone not null", "updated_at": "timestamp with time zone not null"},
			"dblock_permits": {
				"id": "bigint not null identity", "name": "text not null", "owner": "text not null", "permits": "integer not null",
				"acquired_at": "timestamp with time zone not null", "expires_at": "timestamp with time zone not null", "metadata": "text",
				"request": "text",
			},
			"dblock_waiters": {
				"id": "bigint not null identity", "name": "text not null", "owner": "text not null",
				"created_at": "timestamp with time zone not null", "heartbeat_at": "timestamp with time zone not null",
				"expires_at": "timestamp with time zone not null", "kind": "text not null",
			},
			"dblock_history": {
				"id": "bigint not null identity", "name": "text not null", "owner": "text not null",
				"token": "bigint not null", "mode": "text", "acquired_at": "timestamp with time zone",
				"ended_at": "timestamp with time zone not null", "ended_how": "text not null", "metadata": "text",
			},
		},
		pks: map[string]string{"dblock_locks": "name", "dblock_waiters": "id", "dblock_history": "id",
			"dblock_shares": "name,owner", "dblock_semaphores": "name", "dblock_permits": "id", "dblock_slots": "job"},
		indexes: map[string]string{
			"dblock_locks_expires_at_idx":   "ON dblock_locks USING btree (expires_at) WHERE (expires_at IS NOT NULL)",
			"dblock_locks_idle_idx":         "ON dblock_locks USING btree (updated_at) WHERE (owner IS NULL)",
			"dblock_waiters_queue_idx":      "ON dblock_waiters USING btree (name, created_at, id)",
			"dblock_waiters_expires_at_idx": "ON dblock_waiters USING btree (expires_at)",
			"dblock_history_name_idx":       "ON dblock_history USING btree (name, ended_at)",
			"dblock_history_ended_at_idx":   "ON dblock_history USING btree (ended_at)",
			"dblock_shares_expires_at_idx":  "ON dblock_shares USING btree (expires_at)",
			"dblock_permits_name_idx":       "ON dblock_permits USING btree (name, expires_at)",
			"dblock_permits_expires_at_idx": "ON dblock_permits USING btree (expires_at)",
		},
	},
	store.MySQL: {
		columns: map[string]map[string]string{
			"dblock_locks": {
				"name": "varbinary(255) not null", "owner": "varbinary(255)", "reentry": "int not null",
				"version": "bigint not null", "mode": "varchar(16) utf8mb4",
				"acquired_at": "datetime(6)", "expires_at": "datetime(6)",
				"updated_at": "datetime(6) not null", "metadata": "varchar(1024) utf8mb4",
				"shared_until": "datetime(6)", "wanted_until": "datetime(6)",
				"next_owner": "varbinary(255)", "next_since": "datetime(6)", "next_until": "datetime(6)", "reader": "varbinary(255)",
			},
			"dblock_shares": {
				"name": "varbinary(255) not null", "owner": "varbinary(255) not null", "token": "bigint not null",
				"reentry": "int not null", "acquired_at": "datetime(6) not null", "expires_at": "datetime(6) not null",
				"metadata": "varchar(1024) utf8mb4",
			},
			"dblock_semaphores": {"name": "varbinary(255) not null", "lim": "int not null", "updated_at": "datetime(6) not null"},
			"dblock_slots":      {"job": "varbinary(255) not null", "last_slot": "datetime(6) not null", "updated_at": "datetime(6) not null"},
			"dblock_permits": {
				"id": "bigint not null auto_increment", "name": "varbinary(255) not null", "owner": "varbinary(255) not null",
				"permits": "int not null", "acquired_at": "datetime(6) not null", "expires_at": "datetime(6) not null",
				"metadata": "varchar(1024) utf8mb4", "request": "varbinary(64)",
			},
			"dblock_waiters": {
				"id": "bigint not null auto_increment", "name": "varbinary(255) not null",
				"owner": "varbinary(255) not null", "created_at": "datetime(6) not null",
				"heartbeat_at": "datetime(6) not null", "expires_at": "datetime(6) not null",
				"kind": "varbinary(16) not null",
			},
			"dblock_fence": {"id": "int not null", "floor": "bigint not null"},
			"dblock_history": {
				"id": "bigint not null auto_increment", "name": "varbinary(255) not null", "owner": "varbinary(255) not null",
				"token": "bigint not null", "mode": "varchar(16) utf8mb4", "acquired_at": "datetime(6)",
				"ended_at": "datetime(6) not null", "ended_how": "varchar(16) not null utf8mb4", "metadata": "varchar(1024) utf8mb4",
			},
		},
		pks: map[string]string{"dblock_locks": "name", "dblock_waiters": "id", "dblock_fence": "id",
			"dblock_shares": "name,owner", "dblock_semaphores": "name", "dblock_permits": "id", "dblock_slots": "job", "dblock_history": "id"},
		indexes: map[string]string{
			"dblock_history_name_idx":       "dblock_history (name, ended_at)",
			"dblock_history_ended_at_idx":   "dblock_history (ended_at)",
			"dblock_locks_expires_at_idx":   "dblock_locks (expires_at)",
			"dblock_locks_idle_idx":         "dblock_locks (owner, updated_at)",
			"dblock_waiters_queue_idx":      "dblock_waiters (name, created_at, id)",
			"dblock_waiters_expires_at_idx": "dblock_waiters (expires_at)",
			"dblock_shares_expires_at_idx":  "dblock_shares (expires_at)",
			"dblock_permits_name_idx":       "dblock_permits (name, expires_at)",
			"dblock_permits_expires_at_idx": "dblock_permits (expires_at)",
		},
	},
	store.SQLite: {
		columns: map[string]map[string]string{
			"dblock_locks": {
				"name": "TEXT not null", "owner": "TEXT", "reentry": "INTEGER not null",
				"version": "INTEGER not null", "mode": "TEXT",
				"acquired_at": "INTEGER", "expires_at": "INTEGER",
				"updated_at": "INTEGER not null", "metadata": "TEXT",
				"shared_until": "INTEGER", "wanted_until": "INTEGER",
				"next_owner": "TEXT", "next_since": "INTEGER", "next_until": "INTEGER", "reader": "TEXT",
			},
			"dblock_shares": {
				"name": "TEXT not null", "owner": "TEXT not null", "token": "INTEGER not null", "reentry": "INTEGER not null",
				"acquired_at": "INTEGER not null", "expires_at": "INTEGER not null", "metadata": "TEXT",
			},
			"dblock_semaphores": {"name": "TEXT not null", "lim": "INTEGER not null", "updated_at": "INTEGER not null"},
			"dblock_slots":      {"job": "TEXT not null", "last_slot": "INTEGER not null", "updated_at": "INTEGER not null"},
			"dblock_permits": {
				"id": "INTEGER", "name": "TEXT not null", "owner": "TEXT not null", "permits": "INTEGER not null",
				"acquired_at": "INTEGER not null", "expires_at": "INTEGER not null", "metadata": "TEXT",
				"request": "TEXT",
			},
			"dblock_waiters": {
				"id": "INTEGER", "name": "TEXT not null", "owner": "TEXT not null",
				"created_at": "INTEGER not null", "heartbeat_at": "INTEGER not null",
				"expires_at": "INTEGER not null", "kind": "TEXT not null",
			},
			"dblock_fence": {"id": "INTEGER not null", "floor": "INTEGER not null"},
			"dblock_history": {
				"id": "INTEGER", "name": "TEXT not null", "owner": "TEXT not null", "token": "INTEGER not null",
				"mode": "TEXT", "acquired_at": "INTEGER", "ended_at": "INTEGER not null", "ended_how": "TEXT not null",
				"metadata": "TEXT",
			},
		},
		pks: map[string]string{"dblock_locks": "name", "dblock_waiters": "id", "dblock_fence": "id", "dblock_history": "id",
			"dblock_shares": "name,owner", "dblock_semaphores": "name", "dblock_permits": "id", "dblock_slots": "job"},
		indexes: map[string]string{
			"dblock_locks_expires_at_idx":   "ON dblock_locks (expires_at) WHERE expires_at IS NOT NULL",
			"dblock_locks_idle_idx":         "ON dblock_locks (updated_at) WHERE owner IS NULL",
			"dblock_waiters_queue_idx":      "ON dblock_waiters (name, created_at, id)",
			"dblock_waiters_expires_at_idx": "ON dblock_waiters (expires_at)",
			"dblock_history_name_idx":       "ON dblock_history (name, ended_at)",
			"dblock_history_ended_at_idx":   "ON dblock_history (ended_at)",
			"dblock_shares_expires_at_idx":  "ON dblock_shares (expires_at)",
			"dblock_permits_name_idx":       "ON dblock_permits (name, expires_at)",
			"dblock_permits_expires_at_idx": "ON dblock_permits (expires_at)",
		},
	},
}

// readSchema reads db's dblock tables as a schema.
func readSchema(t *testing.T, db *dialect.DB) schema {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := schema{columns: map[string]map[string]string{}, pks: map[string]string{}, indexes: map[string]string{}}
	type row struct{ A, B, C string }
	query := func(q string, args ...any) []row {
		t.Helper()
		rows, err := db.SQL().QueryContext(ctx, q, args...)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		defer rows.Close()
		var out []row
		for rows.Next() {
			var r row
			if err := rows.Scan(&r.A, &r.B, &r.C); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
			out = append(out, r)
		}
		if err := rows.Err(); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return out
	}
	addColumn := func(table, col, desc string) {
		if s.columns[table] == nil {
			s.columns[table] = map[string]string{}
		}
		s.columns[table][strings.ToLower(col)] = strings.TrimSpace(desc)
	}
	switch store.Of(db).Dialect.Kind() {
	case store.Postgres:
		for _, r := range query(`SELECT table_name, column_name,
    data_type || CASE WHEN is_nullable = 'NO' THEN ' not null' ELSE '' END
              || CASE WHEN is_identity = 'YES' THEN ' identity' ELSE '' END
FROM information_schema.columns
WHERE table_schema = current_schema() AND table_name LIKE 'dblock\_%' AND table_name <> $1`, migrations.VersionTable) {
			addColumn(r.A, r.B, r.C)
		}
		for _, r := range query(`SELECT tc.table_name, string_agg(kcu.column_name, ',' ORDER BY kcu.ordinal_position), ''
FROM information_schema.table_constraints tc
JOIN information_schema.key_column_usage kcu
  ON kcu.constraint_name = tc.constraint_name AND kcu.table_schema = tc.table_schema AND kcu.table_name = tc.table_name
WHERE tc.constraint_type = 'PRIMARY KEY' AND tc.table_schema = current_schema()
  AND tc.table_name LIKE 'dblock\_%' AND tc.table_name <> $1
GROUP BY tc.table_name`, migrations.VersionTable) {
			s.pks[r.A] = r.B
		}
		for _, r := range query(`SELECT indexname, indexdef, schemaname FROM pg_indexes
WHERE schemaname = current_schema() AND tablename LIKE 'dblock\_%' AND tablename <> $1 AND indexname NOT LIKE '%\_pkey'`,
			migrations.VersionTable) {
			def := strings.Replace(r.B, " ON "+r.C+".", " ON ", 1)
			s.indexes[r.A] = def[strings.Index(def, " ON ")+1:]
		}
	case store.MySQL:
		intWidth := regexp.MustCompile(`^(tinyint|smallint|mediumint|int|bigint)\(\d+\)`)
		for _, r := range query(`SELECT table_name, column_name,
    CONCAT(column_type, IF(is_nullable = 'NO', ' not null', ''), IF(extra <> '', CONCAT(' ', extra), ''),
           IFNULL(CONCAT(' ', character_set_name), ''))
FROM information_schema.columns
WHERE table_schema = DATABASE() AND table_name LIKE 'dblock\_%' AND table_name <> ?`, migrations.VersionTable) {
			addColumn(r.A, r.B, intWidth.ReplaceAllString(r.C, "$1"))
		}
		for _, r := range query(`SELECT table_name, GROUP_CONCAT(column_name ORDER BY seq_in_index), ''
FROM information_schema.statistics
WHERE table_schema = DATABASE() AND index_name = 'PRIMARY' AND table_name LIKE 'dblock\_%' AND table_name <> ?
GROUP BY table_name`, migrations.VersionTable) {
			s.pks[r.A] = r.B
		}
		for _, r := range query(`SELECT index_name, CONCAT(table_name, ' (', GROUP_CONCAT(column_name ORDER BY seq_in_index SEPARATOR ', '), ')'), ''
FROM information_schema.statistics
WHERE table_schema = DATABASE() AND index_name <> 'PRIMARY' AND table_name LIKE 'dblock\_%' AND table_name <> ?
GROUP BY table_name, index_name`, migrations.VersionTable) {
			s.indexes[r.A] = r.B
		}
		for _, r := range query(`SELECT table_name, engine, '' FROM information_schema.tables
WHERE table_schema = DATABASE() AND table_name LIKE 'dblock\_%'`) {
			if r.B != "InnoDB" {
				t.Errorf("%s uses engine %s, want InnoDB (row locks, transactions)", r.A, r.B)
			}
		}
	case store.SQLite:
		for _, t := range query(`SELECT name, '', '' FROM sqlite_master
WHERE type = 'table' AND name LIKE 'dblock\_%' ESCAPE '\' AND name <> ?1`, migrations.VersionTable) {
			table := t.A
			for _, r := range query(`SELECT name,
    type || CASE WHEN "notnull" THEN ' not null' ELSE '' END,
    CAST(pk AS TEXT)
FROM pragma_table_info(?1) ORDER BY pk`, table) {
				addColumn(table, r.A, r.B)
				if r.C != "0" {
					s.pks[table] = strings.TrimPrefix(s.pks[table]+","+r.A, ",")
				}
			}
		}
		space := regexp.MustCompile(`\s+`)
		for _, r := range query(`SELECT name, sql, '' FROM sqlite_master
WHERE type = 'index' AND sql IS NOT NULL AND tbl_name LIKE 'dblock\_%' ESCAPE '\'`) {
			def := space.ReplaceAllString(r.B, " ")
			s.indexes[r.A] = def[strings.Index(def, " ON ")+1:]
		}
	}
	return s
}

// checkSchema fails t unless db's dblock tables are exactly wantSchema.
func checkSchema(t *testing.T, db *dialect.DB) {
	t.Helper()
	want := wantSchema[store.Of(db).Dialect.Kind()]
	got := readSchema(t, db)
	for _, table := range slices.Sorted(maps.Keys(want.columns)) {
		if !maps.Equal(got.columns[table], want.columns[table]) {
			t.Errorf("%s columns:\n got %v\nwant %v", table, got.columns[table], want.columns[table])
		}
	}
	for table := range got.columns {
		if _, ok := want.columns[table]; !ok {
			t.Errorf("unexpected table %s: %v", table, got.columns[table])
		}
	}
	if !maps.Equal(got.pks, want.pks) {
		t.Errorf("primary keys:\n got %v\nwant %v", got.pks, want.pks)
	}
	if !maps.Equal(got.indexes, want.indexes) {
		t.Errorf("indexes:\n got %v\nwant %v", got.indexes, want.indexes)
	}
}

func TestSchemaMatchesCode(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		db := iso.DB
		checkSchema(t, db)
		if err := migrations.Check(ctx, db); err != nil {
			t.Fatalf("Check after Up: %v", err)
		}

		// The source of fencing tokens, which outlives deleted rows.
		switch iso.Kind {
		case store.Postgres:
			var typ string
			var inc int64
			err := store.Of(db).QueryRowxContext(ctx, `SELECT data_type, increment::bigint FROM information_schema.sequences
WHERE sequence_schema = current_schema() AND sequence_name = 'dblock_token_seq'`).Scan(&typ, &inc)
			if err != nil || typ != "bigint" || inc != 1 {
				t.Errorf("dblock_token_seq: %s increment %d, %v; want a bigint sequence by 1", typ, inc, err)
			}
			var checks []string
			if err := store.Of(db).SelectContext(ctx, &checks, `SELECT conname FROM pg_constraint
WHERE conrelid = 'dblock_locks'::regclass AND contype = 'c' ORDER BY conname`); err != nil {
				t.Fatal(err)
			}
			if want := []string{"dblock_locks_name_len", "dblock_locks_owner_reentry"}; !slices.Equal(checks, want) {
				t.Errorf("dblock_locks checks %v, want %v", checks, want)
			}
		default:
			var fence []struct {
				ID    int64 `db:"id"`
				Floor int64 `db:"floor"`
			}
			if err := store.Of(db).SelectContext(ctx, &fence, "SELECT id, floor FROM dblock_fence"); err != nil {
				t.Fatal(err)
			}
			if len(fence) != 1 || fence[0].ID != 1 || fence[0].Floor != 0 {
				t.Errorf("dblock_fence rows %+v, want the one seed row (1, 0)", fence)
			}
		}

		// Names compare byte for byte: none of these is the lock of another
		// (a case-, accent- or padding-insensitive collation would merge them).
		names := []string{"job", "Job", "JOB", "job ", "jöb", "jo\u0308b", "jób"}
		for i, name := range names {
			r, err := store.Of(db).AcquireLease(ctx, nil, store.AcquireParams{
				Name: name, Owner: fmt.Sprintf("owner-%d", i), Mode: dblock.ModeOptimistic, TTL: time.Minute,
			})
			if err != nil || !r.Acquired {
				t.Errorf("acquire %q (owner-%d) after %q: %+v, %v; names must be distinct locks", name, i, names[:i], r, err)
			}
		}
		for i, name := range names {
			h, err := store.Of(db).LeaseHolder(ctx, nil, name)
			if err != nil || h.Owner != fmt.Sprintf("owner-%d", i) {
				t.Errorf("holder of %q = %q, %v; want owner-%d", name, h.Owner, err, i)
			}
		}
	})
}

// statements returns every SQL statement a dialect exposes through Lease(),
// Row(), Queue() and Reap(), by field, with templates filled as the code
// fills them: the first %s with a list of two bind markers numbered after
// the statement's own (store.ListPlaceholders' plain ? where the statement
// uses plain ?), a second %s with each lock-clause suffix ("" and, with row
// locks, " NOWAIT").
func statements(t *testing.T, d store.Dialect) map[string]string {
	t.Helper()
	numbered := regexp.MustCompile(`[$?](\d+)`)
	list := func(q string) string {
		if d.Kind() == store.MySQL || d.Kind() == store.SQLite && !numbered.MatchString(q) {
			return "?, ?"
		}
		last := 0
		for _, m := range numbered.FindAllStringSubmatch(q, -1) {
			var n int
			fmt.Sscan(m[1], &n)
			last = max(last, n)
		}
		return d.Placeholder(last+1) + ", " + d.Placeholder(last+2)
	}
	suffixes := []string{""}
	if d.Caps().NoWait {
		suffixes = append(suffixes, " NOWAIT")
	}
	out := map[string]string{}
	for _, set := range []any{d.Lease(), d.Row(), d.Queue(), d.Reap()} {
		v := reflect.ValueOf(set).Elem()
		for i := range v.NumField() {
			f := v.Type().Field(i)
			if f.Type.Kind() != reflect.String {
				continue
			}
			key := v.Type().Name() + "." + f.Name
			q := v.Field(i).String()
			if q == "" {
				continue
			}
			switch strings.Count(q, "%s") {
			case 0:
				out[key] = q
			case 1:
				out[key] = fmt.Sprintf(q, list(q))
			case 2:
				for _, sfx := range suffixes {
					out[key+sfx] = fmt.Sprintf(q, list(q), sfx)
				}
			default:
				t.Fatalf("%s has more %%s holes than this test knows how to fill:\n%s", key, q)
			}
		}
	}
	if m, ok := d.(interface{ MariaDB() bool }); ok && m.MariaDB() {
		// MariaDB bounds the wait of these per statement (dialect/row.go).
		for _, key := range []string{"RowSQL.Lock", "RowSQL.LockMany", "RowSQL.Ensure"} {
			if q, ok := out[key]; ok {
				out[key+" (SET STATEMENT)"] = "SET STATEMENT innodb_lock_wait_timeout=1 FOR " + q
			}
		}
	}
	return out
}

// TestStatementsPrepare prepares, on the migrated schema, every statement
// each dialect exposes, so a migration and the code cannot drift apart
// without a failure naming the statement. The database parses each
// statement and resolves its tables, columns and functions; nothing runs.
// The statements are those of the server's flavour (MariaDB here; the MySQL 8
// flavour needs a MySQL 8 server).
func TestStatementsPrepare(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		stmts := statements(t, iso.Store().Dialect)
		n := 0
		for _, key := range slices.Sorted(maps.Keys(stmts)) {
			st, err := iso.Store().DB.DB.PrepareContext(ctx, stmts[key])
			if err != nil {
				t.Errorf("%s does not prepare on the migrated schema: %v\n%s", key, err, stmts[key])
				continue
			}
			_ = st.Close()
			n++
		}
		if n < 20 {
			t.Fatalf("only %d statements prepared; the dialect's statement sets look empty", n)
		}
	})
}

// TestReapIdleUsesIndex: the reaper's scan for idle rows (dialect/reap.go:
// owner IS NULL AND updated_at <= ...) is answered from dblock_locks_idle_idx,
// not by reading the whole table. The table holds 3,000 rows, most held, so
// the planner has something to choose between.
func TestReapIdleUsesIndex(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		db := iso.DB
		var fill, analyze string
		switch iso.Kind {
		case store.Postgres:
			fill = `INSERT INTO dblock_locks (name, owner, reentry, version, expires_at, updated_at)
SELECT 'n' || g, CASE WHEN g % 30 = 0 THEN NULL ELSE 'o' END, CASE WHEN g % 30 = 0 THEN 0 ELSE 1 END,
       nextval('dblock_token_seq'), now() + interval '1 hour', now() - interval '1 day'
FROM generate_series(1, 3000) g`
			analyze = "ANALYZE dblock_locks"
		case store.MySQL:
			// Digits crossed, not a recursive CTE: MySQL and MariaDB stop
			// recursion at 1,000 rows.
			fill = `INSERT INTO dblock_locks (name, owner, reentry, version, expires_at, updated_at)
WITH d (n) AS (SELECT 0 UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4
               UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9),
     g (n) AS (SELECT a.n + 10 * b.n + 100 * c.n + 1000 * e.n + 1 FROM d a, d b, d c, d e
               WHERE a.n + 10 * b.n + 100 * c.n + 1000 * e.n < 3000)
SELECT CONCAT('n', n), IF(n % 30 = 0, NULL, 'o'), IF(n % 30 = 0, 0, 1), n,
       UTC_TIMESTAMP(6) + INTERVAL 1 HOUR, UTC_TIMESTAMP(6) - INTERVAL 1 DAY
FROM g`
			analyze = "ANALYZE TABLE dblock_locks"
		case store.SQLite:
			fill = `INSERT INTO dblock_locks (name, owner, reentry, version, expires_at, updated_at)
WITH RECURSIVE g (n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < 3000)
SELECT 'n' || n, CASE WHEN n % 30 = 0 THEN NULL ELSE 'o' END, CASE WHEN n % 30 = 0 THEN 0 ELSE 1 END, n,
       (unixepoch() + 3600) * 1000000, (unixepoch() - 86400) * 1000000
FROM g`
			analyze = "ANALYZE"
		}
		if _, err := db.SQL().ExecContext(ctx, fill); err != nil {
			t.Fatalf("fill: %v", err)
		}
		if _, err := db.SQL().ExecContext(ctx, analyze); err != nil {
			t.Fatalf("%s: %v", analyze, err)
		}
		reap := store.Of(db).Dialect.Reap()
		hour := time.Hour.Microseconds()
		var query string
		var args []any
		switch iso.Kind {
		case store.Postgres:
			query, args = reap.DeleteIdle, []any{100, hour}
		case store.MySQL:
			query, args = reap.IdleCandidates, []any{hour, 100}
		case store.SQLite:
			query, args = reap.LockIdle, []any{hour, 100}
		}
		if query == "" {
			t.Fatalf("no idle scan among the %s reaper statements", iso.Kind)
		}
		explain := "EXPLAIN "
		if iso.Kind == store.SQLite {
			explain = "EXPLAIN QUERY PLAN "
		}
		rows, err := db.SQL().QueryContext(ctx, explain+query, args...)
		if err != nil {
			t.Fatalf("explain: %v", err)
		}
		defer rows.Close()
		cols, _ := rows.Columns()
		var plan []string
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			var line []string
			for i, v := range vals {
				if b, ok := v.([]byte); ok {
					v = string(b)
				}
				line = append(line, fmt.Sprintf("%s=%v", cols[i], v))
			}
			plan = append(plan, strings.Join(line, " "))
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		text := strings.Join(plan, "\n")
		if !strings.Contains(text, "dblock_locks_idle_idx") {
			t.Fatalf("the idle scan does not use dblock_locks_idle_idx:\n%s\n%s", query, text)
		}
		t.Logf("plan:\n%s", text)
	})
}

// TestMySQLLatin1Database: on a database whose default character set is
// latin1 (upstream MariaDB's default), the migrations still leave the text
// columns in utf8mb4, so metadata outside latin1 is stored as given.
func TestMySQLLatin1Database(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	iso := dbtest.NewEmpty(t, store.MySQL)
	if _, err := iso.Store().ExecContext(ctx, "ALTER DATABASE CHARACTER SET latin1 COLLATE latin1_swedish_ci"); err != nil {
		t.Fatal(err)
	}
	if err := migrations.Up(ctx, iso.DB); err != nil {
		t.Fatalf("migrate a latin1 database: %v", err)
	}
	checkSchema(t, iso.DB)
	const md = "host ☃ pid 1 🔒"
	r, err := iso.Store().AcquireLease(ctx, nil, store.AcquireParams{Name: "job", Owner: "o", Mode: dblock.ModeOptimistic, TTL: time.Minute, Metadata: md})
	if err != nil || !r.Acquired {
		t.Fatalf("acquire with metadata %q: %+v, %v", md, r, err)
	}
	var got string
	if err := iso.Store().GetContext(ctx, &got, "SELECT metadata FROM dblock_locks WHERE name = 'job'"); err != nil || got != md {
		t.Fatalf("stored metadata %q, %v; want %q", got, err, md)
	}
}
