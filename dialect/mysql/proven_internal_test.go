package mysql

import (
	"testing"

	"github.com/dblock-go/dblock/internal/store"
)

// TestPlainData: the statements whose success proves the transaction still
// open, and a sample of those that do not (they may end it, or hide a
// statement in a comment); then dblock's own statements among them.
func TestPlainData(t *testing.T) {
	for q, want := range map[string]bool{
		"SELECT 1":                             true,
		"  select name FROM dblock_locks":      true,
		"\nINSERT INTO t (id) VALUES (1)":      true,
		"UPDATE t SET n = n + 1":               true,
		"DELETE FROM t":                        true,
		"REPLACE INTO t VALUES (1)":            true,
		"WITH x AS (SELECT 1) SELECT * FROM x": true,
		"DO 1":                                 true,
		"CREATE TABLE t (id INT)":              false,
		"COMMIT":                               false,
		"SET autocommit = 1":                   false,
		"SET STATEMENT max_statement_time=1 FOR SELECT 1": false,
		"/*!50000 COMMIT */ SELECT 1":                     false,
		"(SELECT 1) UNION (SELECT 2)":                     false,
		"SELECT":                                          false,
		"SELECTED":                                        false,
		"CALL p()":                                        false,
		store.MariaDBCheckedCommitCall:                    false,
		"LOCK TABLES t WRITE":                             false,
		"SAVEPOINT s":                                     false,
	} {
		if got := plainData(q); got != want {
			t.Errorf("plainData(%q) = %v, want %v", q, got, want)
		}
	}
	for q, want := range map[string]bool{
		store.MariaDBLockBegin:                           true,
		store.MariaDBHoldBoundSet + "30":                 true,
		store.MariaDBHoldBoundSet:                        false,
		store.MariaDBHoldBoundSet + "30, autocommit = 1": false,
		"SET SESSION wait_timeout = 30":                  false,
	} {
		if got := ownStatement(q); got != want {
			t.Errorf("ownStatement(%q) = %v, want %v", q, got, want)
		}
	}
}
