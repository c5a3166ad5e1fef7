package probe

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/rtrctl/rtrctl/internal/hint"
	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/upstream"
)

// MySQL probes @@global.gtid_executed (MySQL) or @@global.gtid_binlog_pos
// (MariaDB); the flavor is detected from the server version.
type MySQL struct {
	up *upstream.MySQL

	mu      sync.Mutex
	conn    *client.Conn
	mariadb bool
}

// NewMySQL probes the upstream u without connecting yet; the flavor is
// detected on connecting.
func NewMySQL(u *upstream.MySQL) *MySQL {
	return &MySQL{up: u}
}

// Probe returns the upstream GTID frontier.
func (m *MySQL) Probe(ctx context.Context) (Result, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.connect(ctx); err != nil {
		return Result{}, err
	}
	res, err := m.probe(ctx)
	if err != nil && hint.Of(err) == "" {
		// A broken connection: reconnect next time.
		m.conn.Close()
		m.conn = nil
	}
	return res, err
}

// connect opens the connection unless it is open; m.mu is held.
func (m *MySQL) connect(ctx context.Context) error {
	if m.conn != nil {
		return nil
	}
	conn, err := m.up.Connect(ctx)
	if err != nil {
		return fmt.Errorf("probe mysql: %w", err)
	}
	maria, err := upstream.IsMariaDB(ctx, conn)
	if err != nil {
		conn.Close()
		return fmt.Errorf("probe mysql %s: %w", m.up, err)
	}
	m.conn, m.mariadb = conn, maria
	return nil
}

// execute runs a query on the connection, dropping it when it fails for
// another reason than the server's refusal of the query.
func (m *MySQL) execute(ctx context.Context, query string) (*mysql.Result, error) {
	r, err := upstream.Execute(ctx, m.conn, query)
	var serr *mysql.MyError
	if err != nil && !errors.As(err, &serr) {
		m.conn.Close()
		m.conn = nil
	}
	return r, err
}

func (m *MySQL) probe(ctx context.Context) (Result, error) {
	if m.mariadb {
		r, err := upstream.Execute(ctx, m.conn, "SELECT @@global.log_bin, @@global.gtid_binlog_pos")
		if err != nil {
			return Result{}, fmt.Errorf("probe mariadb %s: %w", m.up, err)
		}
		logBin, _ := r.GetInt(0, 0)
		if logBin == 0 {
			return Result{}, hint.Wrap(fmt.Errorf("probe mariadb %s: the binary log is off (log_bin=0), so there are no GTIDs to follow", m.up),
				"start mariadbd with --log-bin --binlog-format=ROW --binlog-row-image=FULL and a --server-id (or set them in my.cnf) and restart")
		}
		s, _ := r.GetString(0, 1)
		pos, err := frontier.ParseMariaDBPos(s)
		if err != nil {
			return Result{}, fmt.Errorf("probe mariadb %s: %w", m.up, err)
		}
		return Result{Frontier: pos.Upper(), Native: pos.String(), Flavor: "mariadb"}, nil
	}
	r, err := upstream.Execute(ctx, m.conn, "SELECT @@global.log_bin, @@global.gtid_mode, @@global.gtid_executed")
	if err != nil {
		return Result{}, fmt.Errorf("probe mysql %s: %w", m.up, err)
	}
	logBin, _ := r.GetInt(0, 0)
	if logBin == 0 {
		return Result{}, hint.Wrap(fmt.Errorf("probe mysql %s: the binary log is off (log_bin=0)", m.up),
			"start mysqld with --log-bin --binlog-format=ROW --binlog-row-image=FULL --gtid-mode=ON --enforce-gtid-consistency=ON")
	}
	mode, _ := r.GetString(0, 1)
	if !strings.EqualFold(mode, "ON") {
		return Result{}, hint.Wrap(fmt.Errorf("probe mysql %s: gtid_mode is %s, but rtrctl needs GTIDs", m.up, mode),
			"run SET GLOBAL enforce_gtid_consistency=ON and step SET GLOBAL gtid_mode through OFF_PERMISSIVE, ON_PERMISSIVE to ON (or start with --gtid-mode=ON --enforce-gtid-consistency=ON)")
	}
	s, _ := r.GetString(0, 2)
	set, err := frontier.ParseGTIDSet(s)
	if err != nil {
		return Result{}, fmt.Errorf("probe mysql %s: %w", m.up, err)
	}
	return Result{Frontier: set.Upper(), Native: set.String(), Flavor: "mysql"}, nil
}

// Close closes the connection, if any.
func (m *MySQL) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.conn != nil {
		err := m.conn.Close()
		m.conn = nil
		return err
	}
	return nil
}
