package mysql

import (
	"database/sql/driver"
	"errors"
	"strings"

	"github.com/dblock-go/dblock/internal/store"
)

// A checked commit proven unneeded. The checked commit (a CALL of
// dblock_commit_checked) exists for a transaction the server ended while
// its *sql.Tx believes it open: a deadlock victim's rollback (an error the
// caller's fn may have swallowed) or an implicit commit. Every statement of
// a checked transaction goes through this connection, so it sees them
// all: while each was one of dblock's own (the lock call, the setting of
// the hold's bound) or a plain data statement
// (SELECT, INSERT, UPDATE, DELETE, REPLACE, WITH, DO: none of them ends a
// transaction unless it fails) and none failed, the transaction is still
// open, and a plain COMMIT, which the server runs for less than the call,
// commits it. Any other statement, or any error (a statement's or a row's),
// leaves the call to check. Between statements the server ends a
// transaction only by ending the connection, or (Galera) by an abort it
// reports on the next statement, the COMMIT included.

// observe notes, in the connection's checked transaction, a statement
// query that was sent and answered err.
func (c *checkedConn) observe(query string, err error) {
	t := c.tx
	if t == nil || t.pending || t.unproven {
		return
	}
	if errors.Is(err, driver.ErrSkip) || errors.Is(err, store.ErrBegun) {
		return // Nothing was sent.
	}
	if err != nil || !ownStatement(query) && !plainData(query) {
		t.unproven = true
	}
}

// ownStatement reports whether query is one of the statements dblock sends
// in a hold that do not end its transaction: the lock call that begins it
// (store.MariaDBLockBegin) and the setting of the hold's bound
// (store.MariaDBHoldBoundSet and whole seconds).
func ownStatement(query string) bool {
	if query == store.MariaDBLockBegin {
		return true
	}
	secs, ok := strings.CutPrefix(query, store.MariaDBHoldBoundSet)
	return ok && secs != "" && strings.Trim(secs, "0123456789") == ""
}

// watched returns the checked transaction under way on c, for a query's
// rows to report their errors to (nil when there is none).
func (c *checkedConn) watched() *checkedTx {
	if c.tx == nil || c.tx.pending {
		return nil
	}
	return c.tx
}

// plainData reports whether query is one of the statements that cannot end
// the transaction it runs in unless they fail: it begins, after white
// space, with SELECT, INSERT, UPDATE, DELETE, REPLACE, WITH or DO, then a
// space or a line break. A comment first (which may hold any statement for
// the server, /*! ... */), or any other statement, is not one.
func plainData(query string) bool {
	q := strings.TrimLeft(query, " \t\r\n")
	i := strings.IndexAny(q, " \t\r\n")
	if i <= 0 {
		return false
	}
	switch strings.ToUpper(q[:i]) {
	case "SELECT", "INSERT", "UPDATE", "DELETE", "REPLACE", "WITH", "DO":
		return true
	}
	return false
}
