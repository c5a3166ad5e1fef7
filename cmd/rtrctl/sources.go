package main

import (
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/rtrctl/rtrctl/internal/hint"
	"github.com/rtrctl/rtrctl/pkg/frontier"
	"github.com/rtrctl/rtrctl/pkg/frontier/probe"
	"github.com/rtrctl/rtrctl/pkg/ingest"
	"github.com/rtrctl/rtrctl/pkg/store"
)

// sourceKind is how the command line knows one kind of upstream. Each kind
// registers itself once, in its own file (source_pg.go, source_mysql.go,
// source_kafka.go); every command that talks to an upstream asks the
// registry for the kind named by --source instead of switching on it.
// A stage a kind does not have is nil.
type sourceKind struct {
	// name is the --source value; aliases are accepted too.
	name    string
	aliases []string
	// flags are the kind's own flags, per command (frontier, snapshot,
	// replicate, ingest, wait-recent); flags shared by several kinds are
	// in sourceFlags or the command.
	flags map[string][]cli.Flag
	// upstream parses the upstream from the flags (with environment
	// defaults), the one place a kind's DSN is parsed: the typed
	// configuration every stage of the kind uses.
	upstream func(c *cli.Context) (sourceUpstream, error)
	// snapshot and replicate run those commands.
	snapshot  func(c *cli.Context, u sourceUpstream) error
	replicate func(c *cli.Context, u sourceUpstream) error
	// ingest makes the kind's ingest.Source from the flags.
	ingest func(c *cli.Context, u sourceUpstream) (ingest.Source, error)
	// recorded makes a prober of the upstream an ingest recorded in the
	// store (its masked DSN with password put back), for wait-recent and
	// status without a running ingest.
	recorded func(info store.SourceInfo, password string) (probe.Prober, error)
	// upstreamFlag is the flag upstream reads the kind's upstream from
	// ("dsn", "brokers"): status measures a source of the kind against the
	// command line only when it is given.
	upstreamFlag string
	// upstreamOf is upstream for one source of a store, which the store
	// recorded as info (status): the same flags, completed from info where
	// one command line cannot name every source (a Kafka source's topic).
	// Nil: upstream as it is.
	upstreamOf func(c *cli.Context, info store.SourceInfo) (sourceUpstream, error)
	// passwordEnv is the environment variable a password of the kind's
	// upstream comes from when the DSN (or the upstream recorded in a
	// store) has none; "" when the driver reads its own (PGPASSWORD).
	passwordEnv string
	// domains are the time domains of the kind's frontiers: the kind of a
	// source no ingest recorded (a store the stages wrote by hand).
	domains []frontier.Domain
}

// sourceUpstream is a kind's parsed upstream (pkg/upstream), which its
// stages take as it is (each kind asserts its own type); every upstream
// can be probed.
type sourceUpstream interface {
	// Prober reads the upstream frontier.
	Prober() (probe.Prober, error)
}

var sourceKinds []*sourceKind

// registerSource adds k to the registry (from the kind file's init).
func registerSource(k *sourceKind) { sourceKinds = append(sourceKinds, k) }

// sourceNames lists the kinds, for usage messages.
func sourceNames() string {
	var names []string
	for _, k := range sourceKinds {
		names = append(names, "--source "+k.name)
	}
	return strings.Join(names, ", ")
}

// kindNamed returns the registered kind name (or an alias of it) names.
func kindNamed(name string) *sourceKind {
	for _, k := range sourceKinds {
		if k.name == name || slices.Contains(k.aliases, name) {
			return k
		}
	}
	return nil
}

// kindOfDomain returns the kind whose frontiers are of domain d, or nil.
func kindOfDomain(d frontier.Domain) *sourceKind {
	for _, k := range sourceKinds {
		if slices.Contains(k.domains, d) {
			return k
		}
	}
	return nil
}

// upstreamFor is k's upstream, as the flags name it, for source info of a
// store.
func (k *sourceKind) upstreamFor(c *cli.Context, info store.SourceInfo) (sourceUpstream, error) {
	if k.upstreamOf != nil {
		return k.upstreamOf(c, info)
	}
	return k.upstream(c)
}

// lookupSource returns the kind of --source, with its parsed upstream.
func lookupSource(c *cli.Context) (*sourceKind, sourceUpstream, error) {
	name := c.String("source")
	if name == "" {
		return nil, nil, usagef("use "+sourceNames(), "no --source given")
	}
	k := kindNamed(name)
	if k == nil {
		return nil, nil, usagef("use "+sourceNames(), "unknown source %q", name)
	}
	u, err := k.upstream(c)
	if err != nil {
		return nil, nil, err
	}
	return k, u, nil
}

// stageUnsupported is the error for a kind without a command's stage.
func stageUnsupported(cmd string) error {
	var have []string
	for _, k := range sourceKinds {
		if cmd == "snapshot" && k.snapshot != nil || cmd == "replicate" && k.replicate != nil || cmd == "ingest" && k.ingest != nil {
			have = append(have, "--source "+k.name)
		}
	}
	return usagef("use "+strings.Join(have, " or "), "%s does not support this --source", cmd)
}

// sourceFlags are the flags that name an upstream, shared by every command
// that talks to one, then every kind's own flags for cmd.
func sourceFlags(cmd string) []cli.Flag {
	flags := []cli.Flag{
		&cli.StringFlag{Name: "source", Usage: "source kind: " + strings.ReplaceAll(sourceNames(), "--source ", "") + " (required)"},
		&cli.StringFlag{Name: "dsn", Usage: "connection string for pg (URL or key=value; default: $RTR_PG_DSN, else the PG* environment) or mysql (user:pass@tcp(host:port)/db or mysql://...; default: $RTR_MYSQL_DSN)"},
		dsnFileFlag(),
		&cli.StringFlag{Name: "brokers", Usage: "kafka bootstrap brokers, host:port[,host:port] (default: $RTR_KAFKA_BROKERS)"},
	}
	seen := map[string]bool{}
	for _, f := range flags {
		seen[f.Names()[0]] = true
	}
	for _, k := range sourceKinds {
		for _, f := range k.flags[cmd] {
			if n := f.Names()[0]; !seen[n] {
				seen[n] = true
				flags = append(flags, f)
			}
		}
	}
	return flags
}

// envDefault is the flag's value, or else the environment variable's.
func envDefault(c *cli.Context, flag, env string) string {
	if v := c.String(flag); v != "" {
		return v
	}
	return os.Getenv(env)
}

// dsnFileFlag is --dsn-file, which keeps a DSN (and its password) out of
// the process list.
func dsnFileFlag() cli.Flag {
	return &cli.StringFlag{Name: "dsn-file", Usage: "read --dsn from this file (its first line), keeping the password out of the process list"}
}

// dsnOf is the kind's DSN: --dsn, else the first line of --dsn-file, else
// the environment variable env.
func dsnOf(c *cli.Context, env string) (string, error) {
	if v := c.String("dsn"); v != "" {
		if c.String("dsn-file") != "" {
			return "", usagef("pass one of --dsn and --dsn-file", "--dsn and --dsn-file exclude each other")
		}
		return v, nil
	}
	if f := c.String("dsn-file"); f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", hint.Wrap(fmt.Errorf("read --dsn-file: %w", err), "name a readable file that holds the DSN on its first line")
		}
		line, _, _ := strings.Cut(string(b), "\n")
		if line = strings.TrimSpace(line); line == "" {
			return "", hint.Wrap(fmt.Errorf("read --dsn-file %s: the file is empty", f), "write the DSN on its first line")
		}
		return line, nil
	}
	return os.Getenv(env), nil
}

// recordedProber is the wait-recent and status path's prober for an
// upstream an ingest recorded: the kind that recorded it knows how. The
// store holds no password: without one given, the kind's passwordEnv
// (MYSQL_PWD) or its driver's own (PGPASSWORD, PGPASSFILE) applies.
func recordedProber(info store.SourceInfo, password string) (probe.Prober, error) {
	k := kindNamed(info.Kind)
	if k == nil || k.recorded == nil {
		return nil, fmt.Errorf("probe %s: the store records source kind %q, which this rtrctl cannot probe: %w", info.Source, info.Kind, store.ErrInvalid)
	}
	if password == "" && k.passwordEnv != "" {
		password = os.Getenv(k.passwordEnv)
	}
	return k.recorded(info, password)
}

// recordedVia is a sourceKind.recorded for kinds that record a URL DSN:
// newProber of the recorded DSN, parsed with parse, with the password put
// back.
func recordedVia[U any, P probe.Prober](parse func(dsn string) (U, error), newProber func(U) P) func(store.SourceInfo, string) (probe.Prober, error) {
	return func(info store.SourceInfo, password string) (probe.Prober, error) {
		d, err := recordedDSN(info, password)
		if err != nil {
			return nil, err
		}
		u, err := parse(d)
		if err != nil {
			return nil, err
		}
		return newProber(u), nil
	}
}

// recordedDSN is the URL DSN an ingest recorded (masked), with password
// put back (empty: none, so the driver's defaults apply, e.g. PGPASSWORD
// or ~/.pgpass for PostgreSQL).
func recordedDSN(info store.SourceInfo, password string) (string, error) {
	u, err := url.Parse(info.Upstream["dsn"])
	if err != nil || u.Scheme == "" {
		return "", fmt.Errorf("probe %s: the recorded upstream DSN is not a URL: %w", info.Source, store.ErrInvalid)
	}
	if u.User != nil {
		if password != "" {
			u.User = url.UserPassword(u.User.Username(), password)
		} else {
			u.User = url.User(u.User.Username())
		}
	}
	return u.String(), nil
}
