package store

import "context"

// A checked commit (MariaDB, on a pool Open opened): the COMMIT of a
// pessimistic hold also checks, in the same statement, that the server
// still has the transaction open, so a hold commits in the round trips of a
// hand-written transaction instead of sending EndHold's check first. The
// pool's driver (dialect/mysql) sends MariaDBCheckedCommit in place of
// COMMIT for a transaction begun with a context from WithCheckedCommit,
// unless it saw every statement of the transaction succeed as one that
// cannot end it (then a plain COMMIT).

// MariaDBCheckedCommitCall is the checked commit where the schema has the
// procedure (MySQL migration 00018): the server compiles it once per
// session, and MariaDBCheckedCommit, an anonymous block, on every commit.
const MariaDBCheckedCommitCall = "CALL dblock_commit_checked()"

// MariaDBCheckedCommit commits the transaction in progress or, when the
// server has ended it (a deadlock victim's rollback, an implicit commit),
// commits nothing and fails with error 1644 and CheckedCommitRefusal. It is
// sent where MariaDBCheckedCommitCall's procedure is missing.
const MariaDBCheckedCommit = `BEGIN NOT ATOMIC
    IF @@in_transaction = 1 THEN COMMIT;
    ELSE SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = '` + CheckedCommitRefusal + `';
    END IF;
END`

// CheckedCommitRefusal is the message of a checked commit that found no
// transaction open.
const CheckedCommitRefusal = "dblock: the transaction is not open on the server"

type checkedCommitKey struct{}

// WithCheckedCommit returns ctx marked for BeginTx: the transaction's
// Commit is a checked commit (see ChecksCommit).
func WithCheckedCommit(ctx context.Context) context.Context {
	return context.WithValue(ctx, checkedCommitKey{}, true)
}

// CheckedCommit reports whether ctx was marked by WithCheckedCommit.
func CheckedCommit(ctx context.Context) bool {
	v, _ := ctx.Value(checkedCommitKey{}).(bool)
	return v
}

// ChecksCommit reports whether a transaction begun on db with a context
// from WithCheckedCommit commits with the check (MariaDB, on a pool Open
// opened with a driver that supports it): EndHold then has nothing to do
// before a COMMIT.
func (db *DB) ChecksCommit() bool {
	d, ok := drivers[db.Dialect.Kind()]
	return db.owned && ok && d.CheckedCommit && db.Dialect.checksCommit()
}

// TxEndedAtCommit reports whether err is a checked commit's refusal: the
// server had ended the transaction, and nothing was committed.
func TxEndedAtCommit(err error) bool {
	se, ok := serverError(MySQL, err)
	return ok && se.Code == 1644 && se.Message == CheckedCommitRefusal
}

// ProcedureRefused reports whether err is MySQL's refusal to run a
// procedure of a later migration: missing (error 1305, a schema migrated
// before it) or not executable by the account (1370, grants written before
// it). Such a CALL did nothing, so the caller may send what the procedure
// replaces (the checked commit's block, a release of 00015's procedure).
func ProcedureRefused(err error) bool {
	se, ok := serverError(MySQL, err)
	return ok && (se.Code == 1305 || se.Code == 1370)
}
