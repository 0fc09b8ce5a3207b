#!/usr/bin/env bash
# dbup.sh makes sure the databases the tests need are reachable:
#
#   PostgreSQL       $DBLOCK_TEST_POSTGRES, else postgres://postgres@127.0.0.1:5432/test (trust auth)
#   MySQL/MariaDB    $DBLOCK_TEST_MYSQL,    else mysql://root@tcp(127.0.0.1:3306)/test (empty password)
#
# A database that already answers is left alone, and the script prints nothing.
# Otherwise, for the local defaults only, it starts one:
#
#   1. with `docker compose up -d --wait` when a Docker engine answers;
#   2. else, as root, from Debian's packages: starts the installed PostgreSQL cluster and
#      MariaDB server, or installs them first (postgresql, mariadb-server), then grants what
#      the tests need (trust for postgres over loopback, root with an empty password over
#      TCP, database test).
#
# It waits up to $DBUP_WAIT seconds (default 60) for each, says what it did, and exits
# non-zero with the reason when a database cannot be had. Safe to run again and again.
set -euo pipefail

readonly PG_DEFAULT='postgres://postgres@127.0.0.1:5432/test?sslmode=disable'
readonly MY_DEFAULT='mysql://root@tcp(127.0.0.1:3306)/test'
readonly WAIT=${DBUP_WAIT:-60}

ROOT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
readonly ROOT_DIR

log() { printf 'dbup: %s\n' "$*"; }
die() {
	printf 'dbup: error: %s\n' "$*" >&2
	exit 1
}
have() { command -v "$1" >/dev/null 2>&1; }
is_root() { [[ $(id -u) == 0 ]]; }
has_systemd() { [[ -d /run/systemd/system ]] && have systemctl; }

# tcp_open HOST PORT: something accepts TCP connections at HOST:PORT.
tcp_open() {
	local host=${1#\[} port=$2
	host=${host%]}
	# shellcheck disable=SC2016 # $0 and $1 are expanded by the inner bash.
	if have timeout; then
		timeout 3 bash -c ': >"/dev/tcp/$0/$1"' "$host" "$port" 2>/dev/null
	else
		# shellcheck disable=SC2016
		bash -c ': >"/dev/tcp/$0/$1"' "$host" "$port" 2>/dev/null
	fi
}

# docker_engine: a Docker engine answers (bounded: a DOCKER_HOST that does not answer must
# not hang the script).
docker_engine() {
	have docker || return 1
	if have timeout; then
		timeout 15 docker info >/dev/null 2>&1
	else
		docker info >/dev/null 2>&1
	fi
}

# is_loopback HOST: HOST is this machine (an empty host means a Unix socket).
is_loopback() {
	case $1 in
	'' | /* | localhost | 127.0.0.1 | ::1 | '[::1]') return 0 ;;
	*) return 1 ;;
	esac
}

# wait_until SECONDS COMMAND...: runs COMMAND once a second until it succeeds or time runs out.
wait_until() {
	local deadline=$((SECONDS + $1))
	shift
	until "$@"; do
		((SECONDS < deadline)) || return 1
		sleep 1
	done
}

# ---------------------------------------------------------------------------------------
# PostgreSQL

PG_CONN='' PG_HOST='' PG_PORT='' PG_USER='' PG_DB='' PG_ERR=''

# pg_parse URL: fills PG_*. pgx accepts parameters libpq does not (pool_max_conns, ...);
# PG_CONN keeps only those psql understands, so the check sees the same server and database.
pg_parse() {
	local url=$1
	PG_HOST='' PG_PORT=5432 PG_USER=${PGUSER:-$(id -un)} PG_DB=''
	case $url in
	postgres://* | postgresql://*)
		local scheme=${url%%://*} rest=${url#*://} query='' kept='' kv
		if [[ $rest == *\?* ]]; then
			query=${rest#*\?}
			rest=${rest%%\?*}
		fi
		local hostport=${rest%%/*}
		[[ $rest == */* ]] && PG_DB=${rest#*/}
		if [[ $hostport == *@* ]]; then
			local auth=${hostport%@*}
			hostport=${hostport##*@}
			[[ -n ${auth%%:*} ]] && PG_USER=${auth%%:*}
		fi
		hostport=${hostport%%,*} # several hosts: the first one decides
		if [[ $hostport =~ ^(\[[^]]*\]|[^:]*)(:([0-9]+))?$ ]]; then
			PG_HOST=${BASH_REMATCH[1]}
			[[ -n ${BASH_REMATCH[3]} ]] && PG_PORT=${BASH_REMATCH[3]}
		fi
		local IFS='&'
		for kv in $query; do
			case ${kv%%=*} in
			host) PG_HOST=${kv#*=} ;;
			port) PG_PORT=${kv#*=} ;;
			user) PG_USER=${kv#*=} ;;
			dbname) PG_DB=${kv#*=} ;;
			esac
			case ${kv%%=*} in
			host | hostaddr | port | dbname | user | password | passfile | connect_timeout | \
				client_encoding | options | application_name | sslmode | sslcert | sslkey | \
				sslrootcert | sslcrl | sslpassword | gssencmode | channel_binding | \
				target_session_attrs | service | keepalives | keepalives_idle | \
				keepalives_interval | keepalives_count | tcp_user_timeout)
				kept+=${kept:+&}$kv
				;;
			esac
		done
		PG_CONN="$scheme://$rest${kept:+?$kept}"
		;;
	*) # keyword=value form: libpq reads it as is
		PG_CONN=$url
		[[ $url =~ (^|[[:space:]])host=([^[:space:]]*) ]] && PG_HOST=${BASH_REMATCH[2]}
		[[ $url =~ (^|[[:space:]])port=([0-9]+) ]] && PG_PORT=${BASH_REMATCH[2]}
		[[ $url =~ (^|[[:space:]])user=([^[:space:]]*) ]] && PG_USER=${BASH_REMATCH[2]}
		[[ $url =~ (^|[[:space:]])dbname=([^[:space:]]*) ]] && PG_DB=${BASH_REMATCH[2]}
		;;
	esac
	PG_HOST=${PG_HOST#\[}
	PG_HOST=${PG_HOST%]}
	PG_DB=${PG_DB:-$PG_USER}
}

# pg_ok: the target accepts a query (or, without psql, accepts TCP connections).
pg_ok() {
	if have psql; then
		PG_ERR=$(PGCONNECT_TIMEOUT=5 psql "$PG_CONN" -wXAtqc 'select 1' 2>&1 >/dev/null) && return 0
		PG_ERR=${PG_ERR//[$'\n\t']/ }
		return 1
	fi
	PG_ERR="nothing accepts connections at $PG_HOST:$PG_PORT"
	[[ -n $PG_HOST && $PG_HOST != /* ]] && tcp_open "$PG_HOST" "$PG_PORT"
}

# pg_server_up: a server answers at the target's address, whatever it thinks of our login.
pg_server_up() {
	if have pg_isready; then
		local rc=0
		pg_isready -q -t 3 ${PG_HOST:+-h "$PG_HOST"} -p "$PG_PORT" || rc=$?
		((rc == 0))
		return
	fi
	[[ -n $PG_HOST && $PG_HOST != /* ]] && tcp_open "$PG_HOST" "$PG_PORT"
}

# pg_version: the newest PostgreSQL major version installed from Debian's packages.
pg_version() {
	local v
	# shellcheck disable=SC2012 # version directories: 15, 16, ...
	v=$(ls /etc/postgresql 2>/dev/null | sort -V | tail -1)
	if [[ -z $v || ! -x /usr/lib/postgresql/$v/bin/postgres ]]; then
		# shellcheck disable=SC2012
		v=$(ls /usr/lib/postgresql 2>/dev/null | sort -V | tail -1)
	fi
	[[ -n $v && -x /usr/lib/postgresql/$v/bin/postgres ]] && printf '%s\n' "$v"
}

pg_installed() { [[ -n $(pg_version) ]] && have pg_ctlcluster; }

# as_postgres SQL: runs SQL as the postgres superuser over the local socket (peer auth).
as_postgres() {
	(cd / && runuser -u postgres -- psql -XAtq -v ON_ERROR_STOP=1 -d postgres -c "$1")
}

pg_start() {
	local v
	v=$(pg_version)
	if [[ ! -d /etc/postgresql/$v/main ]]; then
		log "creating PostgreSQL $v cluster main"
		pg_createcluster "$v" main >/dev/null || die "pg_createcluster $v main failed"
	fi
	if has_systemd; then
		log "starting PostgreSQL (systemctl start postgresql@$v-main)"
		systemctl start "postgresql@$v-main" || die "systemctl start postgresql@$v-main failed"
	elif pg_ctlcluster "$v" main status >/dev/null 2>&1; then
		log "PostgreSQL $v/main is running but not answering yet; waiting"
	else
		log "starting PostgreSQL $v/main (pg_ctlcluster start)"
		pg_ctlcluster --skip-systemctl-redirect "$v" main start ||
			die "could not start PostgreSQL $v/main; see /var/log/postgresql/postgresql-$v-main.log"
	fi
}

# pg_provision: trust the postgres role over loopback and create the target database.
# Only for the local Debian cluster, as root, when the check already failed.
pg_provision() {
	is_root && pg_installed && have runuser || return 1
	local hba marker='# dblock tests: trust the postgres role over loopback'
	hba=$(as_postgres 'show hba_file') || return 1
	if ! grep -qxF "$marker" "$hba"; then
		log "PostgreSQL: trusting the postgres role over 127.0.0.1 and ::1 ($hba)"
		local tmp
		tmp=$(mktemp)
		{
			printf '%s\n' "$marker" \
				'host all postgres 127.0.0.1/32 trust' \
				'host all postgres ::1/128 trust' ''
			cat "$hba"
		} >"$tmp"
		cat "$tmp" >"$hba" # keeps the file's owner and mode
		rm -f "$tmp"
		as_postgres 'select pg_reload_conf()' >/dev/null
	fi
	local db
	for db in test "$PG_DB"; do
		[[ $db =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || continue
		if [[ -z $(as_postgres "select 1 from pg_database where datname = '$db'") ]]; then
			log "PostgreSQL: creating database $db"
			as_postgres "create database $db" >/dev/null
		fi
	done
}

# ---------------------------------------------------------------------------------------
# MySQL / MariaDB

MY_USER='' MY_PASS='' MY_HOST='' MY_PORT='' MY_SOCK='' MY_DB='' MY_ERR=''
MY_CLIENT='' MY_ADMIN=''
have mariadb && MY_CLIENT=mariadb || { have mysql && MY_CLIENT=mysql; } || true
have mariadb-admin && MY_ADMIN=mariadb-admin || { have mysqladmin && MY_ADMIN=mysqladmin; } || true

# my_parse DSN: fills MY_*. Takes go-sql-driver DSNs (user:pass@tcp(host:port)/db?params),
# with or without a mysql:// prefix, and plain user:pass@host:port/db.
my_parse() {
	MY_USER=root MY_PASS='' MY_HOST=127.0.0.1 MY_PORT=3306 MY_SOCK='' MY_DB=''
	local dsn=${1#mysql://} auth='' net='' addr=''
	dsn=${dsn#mariadb://}
	if [[ $dsn =~ ^((.*)@)?([A-Za-z0-9]*)(\(([^\)]*)\))?/([^?]*)(\?.*)?$ ]]; then
		auth=${BASH_REMATCH[2]} net=${BASH_REMATCH[3]} addr=${BASH_REMATCH[5]} MY_DB=${BASH_REMATCH[6]}
	elif [[ $dsn =~ ^((.*)@)?([^/]*)(/([^?]*))?(\?.*)?$ ]]; then
		auth=${BASH_REMATCH[2]} net=tcp addr=${BASH_REMATCH[3]} MY_DB=${BASH_REMATCH[5]}
	else
		die "cannot parse MySQL DSN: $1"
	fi
	if [[ -n ${BASH_REMATCH[1]} ]]; then
		MY_USER=${auth%%:*}
		[[ $auth == *:* ]] && MY_PASS=${auth#*:}
	fi
	if [[ $net == unix ]]; then
		MY_SOCK=${addr:-/tmp/mysql.sock} MY_HOST=''
	elif [[ -n $addr ]]; then
		if [[ $addr =~ ^(\[[^]]*\]|[^:]*)(:([0-9]+))?$ ]]; then
			MY_HOST=${BASH_REMATCH[1]:-127.0.0.1}
			[[ -n ${BASH_REMATCH[3]} ]] && MY_PORT=${BASH_REMATCH[3]}
		fi
	fi
	MY_HOST=${MY_HOST#[}
	MY_HOST=${MY_HOST%]}
	return 0
}

# my_args: client arguments that reach the target and nothing else (no option files).
my_args() {
	local -n _args=$1
	_args=(--no-defaults --connect-timeout=5 -u "$MY_USER")
	if [[ -n $MY_SOCK ]]; then
		_args+=(--protocol=SOCKET -S "$MY_SOCK")
	else
		_args+=(--protocol=TCP -h "$MY_HOST" -P "$MY_PORT")
	fi
}

# my_ok: the target accepts a query (or, without a client, accepts TCP connections).
my_ok() {
	if [[ -n $MY_CLIENT ]]; then
		local args
		my_args args
		MY_ERR=$(MYSQL_PWD=$MY_PASS "$MY_CLIENT" "${args[@]}" ${MY_DB:+-D "$MY_DB"} -Nse 'select 1' 2>&1 >/dev/null) && return 0
		MY_ERR=${MY_ERR//[$'\n\t']/ }
		return 1
	fi
	MY_ERR="nothing accepts connections at $MY_HOST:$MY_PORT"
	[[ -z $MY_SOCK ]] && tcp_open "$MY_HOST" "$MY_PORT"
}

# my_server_up: a server answers at the target's address, whatever it thinks of our login.
my_server_up() {
	if [[ -n $MY_ADMIN ]]; then
		local args
		my_args args
		MYSQL_PWD=$MY_PASS "$MY_ADMIN" "${args[@]}" ping >/dev/null 2>&1
		return
	fi
	[[ -z $MY_SOCK ]] && tcp_open "$MY_HOST" "$MY_PORT"
}

my_installed() { [[ -x /usr/sbin/mariadbd ]]; }

# my_running_or_gone: the local mariadbd answers, or no mariadbd process is left.
my_running_or_gone() {
	my_server_up || ! start-stop-daemon --status --exec /usr/sbin/mariadbd
}

# as_mysql_root SQL: runs SQL as root over the local socket (unix_socket auth on a fresh
# Debian install, an empty password once provisioned).
as_mysql_root() {
	"$MY_CLIENT" -uroot --protocol=SOCKET -Nse "$1"
}

my_start() {
	if has_systemd; then
		log "starting MariaDB (systemctl start mariadb)"
		systemctl start mariadb || die "systemctl start mariadb failed"
		return
	fi
	# A server still shutting down (or recovering) holds the data directory: let it finish.
	if start-stop-daemon --status --exec /usr/sbin/mariadbd; then
		log "MariaDB is running but not answering yet; waiting"
		wait_until "$WAIT" my_running_or_gone ||
			die "mariadbd runs but has not answered for ${WAIT}s; see its error log"
		my_server_up && return
	fi
	log "starting MariaDB (start-stop-daemon --exec /usr/sbin/mariadbd)"
	# mariadbd keeps its pid file and socket in /run/mysqld and refuses to run as root
	# unless told which user to become; Debian's stock configuration leaves that to systemd.
	install -d -o mysql -g mysql -m 0755 /run/mysqld
	local logf=/var/log/mysql/dbup-mariadbd.log
	[[ -d ${logf%/*} ]] || logf=/dev/null
	start-stop-daemon --start --oknodo --background --output "$logf" \
		--exec /usr/sbin/mariadbd -- --user=mysql >/dev/null ||
		die "could not start /usr/sbin/mariadbd"
}

# my_provision: root with an empty password over TCP, and the target database.
# Only for the local Debian server, as root, when the check already failed.
my_provision() {
	is_root && my_installed && [[ -n $MY_CLIENT ]] || return 1
	local dbs=test
	[[ $MY_DB =~ ^[A-Za-z_][A-Za-z0-9_]*$ && $MY_DB != test ]] && dbs+=" $MY_DB"
	log "MariaDB: allowing root with an empty password over 127.0.0.1; ensuring databases: $dbs"
	local sql="
		ALTER USER 'root'@'localhost' IDENTIFIED VIA unix_socket OR mysql_native_password USING PASSWORD('');
		CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED VIA mysql_native_password USING PASSWORD('');
		GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;
"
	local db
	for db in $dbs; do
		sql+="CREATE DATABASE IF NOT EXISTS \`$db\`;"
	done
	as_mysql_root "$sql"
}

# ---------------------------------------------------------------------------------------
# Main

pg_parse "${DBLOCK_TEST_POSTGRES:-$PG_DEFAULT}"
my_parse "${DBLOCK_TEST_MYSQL:-$MY_DEFAULT}"

need_pg=false need_my=false
if ! pg_ok; then
	need_pg=true
	if [[ -n ${DBLOCK_TEST_POSTGRES:-} ]] && ! { is_loopback "$PG_HOST" && [[ $PG_PORT == 5432 ]]; }; then
		die "DBLOCK_TEST_POSTGRES is set but that server cannot be used ($PG_ERR); start it, or unset DBLOCK_TEST_POSTGRES to use a local PostgreSQL on 127.0.0.1:5432"
	fi
fi
if ! my_ok; then
	need_my=true
	if [[ -n ${DBLOCK_TEST_MYSQL:-} ]] && ! { is_loopback "${MY_HOST:-localhost}" && [[ -n $MY_SOCK || $MY_PORT == 3306 ]]; }; then
		die "DBLOCK_TEST_MYSQL is set but that server cannot be used ($MY_ERR); start it, or unset DBLOCK_TEST_MYSQL to use a local MySQL/MariaDB on 127.0.0.1:3306"
	fi
fi
$need_pg || $need_my || exit 0

# Start what does not answer at all. A server that answers but refuses us is handled below.
services=()
$need_pg && ! pg_server_up && services+=(postgres)
$need_my && ! my_server_up && services+=(mysql)

if ((${#services[@]} > 0)); then
	if docker_engine; then
		cd "$ROOT_DIR"
		if docker compose version >/dev/null 2>&1; then
			log "starting ${services[*]} with docker compose"
			docker compose up -d --wait "${services[@]}"
		elif have docker-compose; then
			log "starting ${services[*]} with docker-compose"
			docker-compose up -d "${services[@]}"
		else
			die "a Docker engine answers but neither 'docker compose' nor 'docker-compose' is installed"
		fi
	elif is_root; then
		missing=()
		[[ " ${services[*]} " == *' postgres '* ]] && ! pg_installed && missing+=(postgresql)
		[[ " ${services[*]} " == *' mysql '* ]] && ! my_installed && missing+=(mariadb-server)
		if ((${#missing[@]} > 0)); then
			have apt-get || die "no Docker engine, and ${missing[*]} cannot be installed without apt-get"
			log "installing ${missing[*]} from Debian's packages"
			apt_log=$(mktemp)
			if ! {
				apt-get update -q &&
					DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"
			} </dev/null >"$apt_log" 2>&1; then
				tail -n 30 "$apt_log" >&2
				die "apt-get could not install ${missing[*]}"
			fi
			rm -f "$apt_log"
			# A fresh install brings the client tools too.
			have mariadb && MY_CLIENT=mariadb
			have mariadb-admin && MY_ADMIN=mariadb-admin
		fi
		# Package scripts may have started the servers already.
		for s in "${services[@]}"; do
			case $s in
			postgres) pg_server_up || pg_start ;;
			mysql) my_server_up || my_start ;;
			esac
		done
	else
		die "PostgreSQL or MySQL is not running, no Docker engine answers, and only root can start Debian's packages; run 'make up' on a machine with Docker, run this script as root, or point DBLOCK_TEST_POSTGRES / DBLOCK_TEST_MYSQL at running servers"
	fi
fi

# Wait for each server, grant what the tests need if it refuses us, and check again.
if $need_pg; then
	wait_until "$WAIT" pg_server_up ||
		die "PostgreSQL at ${PG_HOST:-local socket}:$PG_PORT did not answer within ${WAIT}s"
	if ! pg_ok; then
		pg_provision || true
		wait_until 10 pg_ok || die "PostgreSQL answers but refuses the tests: $PG_ERR"
	fi
	log "PostgreSQL ready: ${PG_HOST:-local socket}:$PG_PORT, database $PG_DB"
fi
if $need_my; then
	if ! wait_until "$WAIT" my_server_up; then
		[[ -s /var/log/mysql/dbup-mariadbd.log ]] && tail -n 20 /var/log/mysql/dbup-mariadbd.log >&2
		die "MySQL/MariaDB at ${MY_SOCK:-$MY_HOST:$MY_PORT} did not answer within ${WAIT}s"
	fi
	if ! my_ok; then
		my_provision || true
		wait_until 10 my_ok || die "MySQL/MariaDB answers but refuses the tests: $MY_ERR"
	fi
	log "MySQL/MariaDB ready: ${MY_SOCK:-$MY_HOST:$MY_PORT}, database ${MY_DB:-(none)}"
fi
