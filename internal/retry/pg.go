package retry

import (
	"errors"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// pgPermanentCodes are SQLSTATEs that retrying does not fix.
var pgPermanentCodes = map[string]bool{
	"28P01": true, // invalid_password
	"28000": true, // invalid_authorization_specification (no pg_hba entry, ...)
	"3D000": true, // invalid_catalog_name: the database does not exist
	"42704": true, // undefined_object: slot or publication missing
	"42501": true, // insufficient_privilege
}

// pgPermanent: authentication, a missing database, slot or publication, an
// invalidated slot.
func pgPermanent(err error) bool {
	pgErr, ok := errors.AsType[*pgconn.PgError](err)
	if !ok {
		return false
	}
	if pgPermanentCodes[pgErr.Code] {
		return true
	}
	// object_not_in_prerequisite_state: "can no longer get changes from
	// replication slot ... This slot has been invalidated".
	return pgErr.Code == "55000" && (strings.Contains(pgErr.Message, "invalidated") || strings.Contains(pgErr.Detail, "invalidated"))
}

// pgTransient: class 08 (connection exception), class 57 (operator
// intervention: admin shutdown 57P01, crash shutdown 57P02, cannot connect
// now 57P03 while the server starts or shuts down), 53300 (too many
// connections); pgconn's own "nothing was sent" and timeout errors and a
// closed connection.
func pgTransient(err error) bool {
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok {
		c := pgErr.Code
		return strings.HasPrefix(c, "08") || strings.HasPrefix(c, "57") || c == "53300"
	}
	return pgconn.SafeToRetry(err) || pgTimeout(err) || errors.Is(err, pgconn.ErrConnClosed)
}

// pgTimeout: a timeout inside pgconn (connect_timeout, a network deadline),
// not the caller's context.
func pgTimeout(err error) bool { return pgconn.Timeout(err) }
