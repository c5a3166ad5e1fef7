package retry

import (
	"errors"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
)

// MySQL/MariaDB error codes.
var (
	mysqlTransientCodes = map[uint16]bool{
		1040: true, // ER_CON_COUNT_ERROR: too many connections
		1053: true, // ER_SERVER_SHUTDOWN: server shutdown in progress
		1152: true, // ER_ABORTING_CONNECTION
		1158: true, // ER_NET_READ_ERROR
		1159: true, // ER_NET_READ_INTERRUPTED
		1160: true, // ER_NET_ERROR_ON_WRITE
		1161: true, // ER_NET_WRITE_INTERRUPTED
		1927: true, // ER_CONNECTION_KILLED (MariaDB)
		2002: true, // CR_CONNECTION_ERROR
		2003: true, // CR_CONN_HOST_ERROR
		2006: true, // CR_SERVER_GONE_ERROR
		2013: true, // CR_SERVER_LOST
		4031: true, // ER_CLIENT_INTERACTION_TIMEOUT (MariaDB: disconnected for inactivity)
	}
	mysqlPermanentCodes = map[uint16]bool{
		1044: true, // ER_DBACCESS_DENIED_ERROR
		1045: true, // ER_ACCESS_DENIED_ERROR
		1049: true, // ER_BAD_DB_ERROR: unknown database
		1227: true, // ER_SPECIFIC_ACCESS_DENIED_ERROR (missing REPLICATION privileges)
		1236: true, // ER_MASTER_FATAL_ERROR_READING_BINLOG: binlog purged, GTID missing
		1251: true, // ER_NOT_SUPPORTED_AUTH_MODE
	}
)

func mysqlPermanent(err error) bool {
	my, ok := errors.AsType[*mysql.MyError](err)
	return ok && mysqlPermanentCodes[my.Code]
}

// mysqlTransient: connection and server-shutdown codes, go-mysql's "bad
// connection" (its wrapper of every read/write failure) and a binlog
// stream that has to be synced again.
func mysqlTransient(err error) bool {
	if my, ok := errors.AsType[*mysql.MyError](err); ok {
		return mysqlTransientCodes[my.Code]
	}
	return errors.Is(err, mysql.ErrBadConn) || errors.Is(err, replication.ErrNeedSyncAgain)
}
