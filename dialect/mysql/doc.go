// Package mysql brings MySQL 8 and MariaDB 10.6+ to dblock through
// go-sql-driver/mysql: import it for its side effect and dialect.Open
// accepts mysql:// DSNs (the part after the scheme is a go-sql-driver DSN).
//
//	import _ "github.com/dblock-go/dblock/dialect/mysql"
package mysql
