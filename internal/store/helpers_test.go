package store_test

import (
	"database/sql"
	"strings"
)

var sqlTxSerializable = sql.TxOptions{Isolation: sql.LevelSerializable}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
