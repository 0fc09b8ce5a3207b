package store

// PreparedCount is how many statements db holds prepared (see prepared.go).
func PreparedCount(db *DB) int {
	p := db.prepared
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, e := range p.m {
		if e.st != nil {
			n++
		}
	}
	return n
}

// PrepareAgain lets every statement of db that failed to prepare be
// prepared again at its next use.
func PrepareAgain(db *DB) {
	p := db.prepared
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, e := range p.m {
		e.failed = e.failed.AddDate(-1, 0, 0)
	}
}
