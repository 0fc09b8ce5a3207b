package store

// What the row-lock engines of PostgreSQL and MySQL/MariaDB do alike.

// lockManySuffix is the lock clause suffix of the LockMany statements:
// NOWAIT when the caller does not wait.
func (server) lockManySuffix(noWait bool) string {
	if noWait {
		return " NOWAIT"
	}
	return ""
}
