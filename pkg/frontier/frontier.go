// Package frontier defines source times and frontiers for every source kind
// rtrctl reads from (PostgreSQL LSNs, MySQL and MariaDB GTIDs, Kafka offsets)
// and for the store's system clock.
//
// A Frontier is an upper: for each partition, the first position that is not
// yet complete. A stream whose upper is F promises no more updates at source
// times below F. Partitions a frontier does not mention are at position 0,
// i.e. nothing in them is complete yet; this is the rule for partitions not
// yet seen (a new Kafka partition, a new MySQL server UUID, a new MariaDB
// domain).
//
// Frontiers are values: every operation returns a new Frontier and never
// changes its arguments.
package frontier

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Domain names a time domain: which clock a Time or Frontier is measured in.
// Its string value is what the pipe format carries in `rtr.time`.
type Domain string

// The time domains.
const (
	// DomainLSN is PostgreSQL's clock: commit LSNs. One partition ("").
	DomainLSN Domain = "lsn"
	// DomainMySQL is MySQL's clock: GTID transaction numbers, partitioned by
	// server UUID.
	DomainMySQL Domain = "mysql"
	// DomainMariaDB is MariaDB's clock: GTID sequence numbers, partitioned by
	// GTID domain id.
	DomainMariaDB Domain = "mariadb"
	// DomainKafka is Kafka's clock: record offsets, partitioned by topic
	// partition.
	DomainKafka Domain = "kafka"
	// DomainSystem is the store's clock: milliseconds since the Unix epoch.
	// One partition ("").
	DomainSystem Domain = "system_ms"
)

// Domains lists every domain, in a fixed order.
var Domains = []Domain{DomainLSN, DomainMySQL, DomainMariaDB, DomainKafka, DomainSystem}

// ParseDomain checks that s names a known domain.
func ParseDomain(s string) (Domain, error) {
	for _, d := range Domains {
		if string(d) == s {
			return d, nil
		}
	}
	return "", fmt.Errorf("parse domain: unknown time domain %q (want one of lsn, mysql, mariadb, kafka, system_ms)", s)
}

// Partitioned reports whether times of this domain carry a partition. The
// unpartitioned domains (lsn, system_ms) use the single partition "".
func (d Domain) Partitioned() bool {
	switch d {
	case DomainMySQL, DomainMariaDB, DomainKafka:
		return true
	}
	return false
}

// Time is one source time: a position within a partition. For the
// unpartitioned domains Partition is "".
type Time struct {
	Partition string
	Pos       uint64
}

// Frontier is an upper in one domain: per partition, the first position not
// yet complete. The zero Frontier has no domain and is at 0 everywhere; use
// Empty or New to make one with a domain.
type Frontier struct {
	domain Domain
	parts  map[string]uint64 // never holds a zero value
}

// Empty returns the frontier of domain d at which nothing is complete.
func Empty(d Domain) Frontier { return Frontier{domain: d} }

// New returns the frontier of domain d with the given per-partition uppers.
// The map is copied; zero entries are dropped (absent means 0). For an
// unpartitioned domain only the partition "" may be given. An unknown
// domain is an error.
func New(d Domain, parts map[string]uint64) (Frontier, error) {
	if _, err := ParseDomain(string(d)); err != nil {
		return Frontier{}, fmt.Errorf("new frontier: %w", err)
	}
	f := Frontier{domain: d}
	for p, v := range parts {
		if err := checkPartition(d, p); err != nil {
			return Frontier{}, fmt.Errorf("new frontier: %w", err)
		}
		if v != 0 {
			if f.parts == nil {
				f.parts = make(map[string]uint64, len(parts))
			}
			f.parts[p] = v
		}
	}
	return f, nil
}

// Single returns the frontier of an unpartitioned domain at pos.
func Single(d Domain, pos uint64) Frontier {
	f := Frontier{domain: d}
	if pos != 0 {
		f.parts = map[string]uint64{"": pos}
	}
	return f
}

func checkPartition(d Domain, p string) error {
	if !d.Partitioned() {
		if p != "" {
			return fmt.Errorf("domain %s has no partitions, got partition %q", d, p)
		}
		return nil
	}
	if p == "" {
		return fmt.Errorf("domain %s needs a partition name, got an empty one", d)
	}
	if !utf8.ValidString(p) {
		return fmt.Errorf("partition %q of domain %s is not valid UTF-8", p, d)
	}
	// The text form splits on ',' and ':' (and '=' for mysql) and trims
	// Unicode white space around items, and the JSON form must round-trip,
	// so partition names hold no separators, no white space (of any kind
	// strings.TrimSpace removes) and no control characters.
	if strings.ContainsAny(p, ",:\"") || strings.IndexFunc(p, func(r rune) bool {
		return unicode.IsSpace(r) || unicode.IsControl(r)
	}) >= 0 {
		return fmt.Errorf("partition %q of domain %s contains a reserved character (one of `,:\"`, white space or a control character)", p, d)
	}
	switch d {
	case DomainMariaDB:
		n, err := strconv.ParseUint(p, 10, 32)
		if err != nil {
			return fmt.Errorf("mariadb partition %q is not a GTID domain id (a number below 2^32)", p)
		}
		if strconv.FormatUint(n, 10) != p {
			// "007" and "7" would be two partitions for one GTID domain.
			return fmt.Errorf("mariadb partition %q is not in canonical decimal form (want %d)", p, n)
		}
	case DomainMySQL:
		if _, err := parseUUID(p); err != nil {
			return fmt.Errorf("mysql partition %q: %w", p, err)
		}
		if strings.ToLower(p) != p {
			return fmt.Errorf("mysql partition %q must be a lowercase server UUID", p)
		}
	}
	return nil
}

// Domain returns the frontier's time domain.
func (f Frontier) Domain() Domain { return f.domain }

// Get returns the upper of partition p (0 when p is absent).
func (f Frontier) Get(p string) uint64 { return f.parts[p] }

// Pos returns the upper of the single partition of an unpartitioned domain.
func (f Frontier) Pos() uint64 { return f.parts[""] }

// IsEmpty reports whether nothing is complete in any partition.
func (f Frontier) IsEmpty() bool { return len(f.parts) == 0 }

// Len returns the number of partitions with a non-zero upper.
func (f Frontier) Len() int { return len(f.parts) }

// Partitions returns the partitions with a non-zero upper, in natural order
// (numbers numerically, then everything else lexically).
func (f Frontier) Partitions() []string {
	ps := make([]string, 0, len(f.parts))
	for p := range f.parts {
		ps = append(ps, p)
	}
	sortNatural(ps)
	return ps
}

// Map returns a copy of the per-partition uppers (absent partitions are 0).
func (f Frontier) Map() map[string]uint64 {
	m := make(map[string]uint64, len(f.parts))
	for p, v := range f.parts {
		m[p] = v
	}
	return m
}

// With returns a copy of f with partition p's upper set to pos. It panics
// if p is not a valid partition of f's domain; validate input with New.
func (f Frontier) With(p string, pos uint64) Frontier {
	if err := checkPartition(f.domain, p); err != nil {
		panic("frontier.With: " + err.Error())
	}
	g := Frontier{domain: f.domain, parts: f.Map()}
	if pos == 0 {
		delete(g.parts, p)
	} else {
		g.parts[p] = pos
	}
	if len(g.parts) == 0 {
		g.parts = nil
	}
	return g
}

// Beyond reports whether t is not in advance of f, i.e. f is strictly beyond
// t: f[t.Partition] > t.Pos. An update at t is complete once its stream's
// upper is beyond t.
func (f Frontier) Beyond(t Time) bool { return f.parts[t.Partition] > t.Pos }

// Equal reports whether f and g are the same frontier of the same domain.
func (f Frontier) Equal(g Frontier) bool {
	if f.domain != g.domain || len(f.parts) != len(g.parts) {
		return false
	}
	for p, v := range f.parts {
		if g.parts[p] != v {
			return false
		}
	}
	return true
}

// Covers reports whether upper covers target: upper[p] >= target[p] for every
// partition p. It is the partial order of frontiers (reflexive, antisymmetric,
// transitive). Frontiers of different domains never cover each other.
func Covers(upper, target Frontier) bool {
	if upper.domain != target.domain {
		return false
	}
	for p, v := range target.parts {
		if upper.parts[p] < v {
			return false
		}
	}
	return true
}

// Covers reports whether f covers target; see the function Covers.
func (f Frontier) Covers(target Frontier) bool { return Covers(f, target) }

// ErrDomainMismatch is returned when two frontiers of different domains are
// combined.
var ErrDomainMismatch = errors.New("frontiers of different time domains")

// Lag is how far have is behind upper, in positions: upper minus have,
// summed over the partitions where upper is ahead (a partition have does
// not mention is at 0). Its unit is upper's domain's (Domain.Unit): WAL
// bytes, transactions or records. It is 0 exactly when have covers upper.
// Frontiers of different domains are not comparable: ErrDomainMismatch.
func Lag(upper, have Frontier) (uint64, error) {
	if upper.domain != have.domain {
		return 0, fmt.Errorf("lag of %s behind %s: %w", have.domain, upper.domain, ErrDomainMismatch)
	}
	var lag uint64
	for p, u := range upper.parts {
		if h := have.parts[p]; u > h {
			lag += u - h
		}
	}
	return lag, nil
}

// Unit names what the positions of d count, in lags (Lag): "WAL bytes"
// (lsn), "transactions" (mysql, mariadb), "records" (kafka), "ms"
// (system_ms).
func (d Domain) Unit() string {
	switch d {
	case DomainLSN:
		return "WAL bytes"
	case DomainMySQL, DomainMariaDB:
		return "transactions"
	case DomainKafka:
		return "records"
	case DomainSystem:
		return "ms"
	}
	return "positions"
}

// Join returns the least upper bound of a and b: the per-partition maximum.
func Join(a, b Frontier) (Frontier, error) {
	if a.domain != b.domain {
		return Frontier{}, fmt.Errorf("join %s with %s: %w", a.domain, b.domain, ErrDomainMismatch)
	}
	out := Frontier{domain: a.domain, parts: a.Map()}
	for p, v := range b.parts {
		if v > out.parts[p] {
			out.parts[p] = v
		}
	}
	if len(out.parts) == 0 {
		out.parts = nil
	}
	return out, nil
}

// Meet returns the greatest lower bound of a and b: the per-partition
// minimum (absent partitions are 0, so they drop out).
func Meet(a, b Frontier) (Frontier, error) {
	if a.domain != b.domain {
		return Frontier{}, fmt.Errorf("meet %s with %s: %w", a.domain, b.domain, ErrDomainMismatch)
	}
	out := Frontier{domain: a.domain}
	for p, v := range a.parts {
		if w := b.parts[p]; w != 0 {
			if out.parts == nil {
				out.parts = make(map[string]uint64)
			}
			out.parts[p] = min(v, w)
		}
	}
	return out, nil
}

// String prints f in its domain's notation:
//
//	lsn        0/16B3748                 (the upper LSN)
//	system_ms  1732900000000
//	mysql      3e11fa47-...-000000000001:1-5,...   (the GTID set below the upper)
//	mariadb    0:43,1:8                  (domain:next_seq)
//	kafka      0:15,1:7                  (partition:next_offset)
//
// An empty partitioned frontier prints as "" (nothing complete anywhere).
// Parse(f.Domain(), f.String()) returns f.
func (f Frontier) String() string {
	switch f.domain {
	case DomainLSN:
		return LSN(f.Pos()).String()
	case DomainSystem:
		return strconv.FormatUint(f.Pos(), 10)
	case DomainMySQL:
		var b strings.Builder
		for i, p := range f.Partitions() {
			if i > 0 {
				b.WriteByte(',')
			}
			next := f.parts[p]
			b.WriteString(p)
			switch next {
			case 1:
				// Nothing complete, but partition is known: "uuid:1-0" is not
				// valid GTID syntax, so use the frontier form.
				b.WriteString("=1")
			default:
				fmt.Fprintf(&b, ":1-%d", next-1)
			}
		}
		return b.String()
	default:
		var b strings.Builder
		for i, p := range f.Partitions() {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(p)
			b.WriteByte(':')
			b.WriteString(strconv.FormatUint(f.parts[p], 10))
		}
		return b.String()
	}
}

// Parse reads a frontier of domain d from its String form.
func Parse(d Domain, s string) (Frontier, error) {
	s = strings.TrimSpace(s)
	switch d {
	case DomainLSN:
		l, err := ParseLSN(s)
		if err != nil {
			return Frontier{}, fmt.Errorf("parse frontier: %w", err)
		}
		return Single(d, uint64(l)), nil
	case DomainSystem:
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return Frontier{}, fmt.Errorf("parse frontier: system time %q is not milliseconds since the Unix epoch", s)
		}
		return Single(d, v), nil
	case DomainMySQL:
		parts := map[string]uint64{}
		if s == "" {
			return Empty(d), nil
		}
		for _, item := range strings.Split(s, ",") {
			item = strings.TrimSpace(item)
			if item == "" {
				return Frontier{}, fmt.Errorf("parse frontier: empty mysql item in %q", s)
			}
			if u, next, ok := strings.Cut(item, "="); ok {
				v, err := strconv.ParseUint(next, 10, 64)
				if err != nil || v != 1 {
					return Frontier{}, fmt.Errorf("parse frontier: mysql item %q: only \"uuid=1\" is allowed in this form", item)
				}
				id, err := parseUUID(u)
				if err != nil {
					return Frontier{}, fmt.Errorf("parse frontier: %w", err)
				}
				if _, dup := parts[id]; dup {
					return Frontier{}, fmt.Errorf("parse frontier: mysql server uuid %s appears twice", id)
				}
				parts[id] = 1
				continue
			}
			set, err := ParseGTIDSet(item)
			if err != nil {
				return Frontier{}, fmt.Errorf("parse frontier: %w", err)
			}
			for id, ivs := range set.m {
				if len(ivs) != 1 || ivs[0].Start != 1 {
					return Frontier{}, fmt.Errorf("parse frontier: mysql item %q is not a prefix 1-N (a frontier has no gaps)", item)
				}
				if _, dup := parts[id]; dup {
					return Frontier{}, fmt.Errorf("parse frontier: mysql server uuid %s appears twice", id)
				}
				parts[id] = ivs[0].End + 1
			}
		}
		return New(d, parts)
	case DomainMariaDB, DomainKafka:
		parts := map[string]uint64{}
		if s == "" {
			return Empty(d), nil
		}
		for _, item := range strings.Split(s, ",") {
			p, v, ok := strings.Cut(strings.TrimSpace(item), ":")
			if !ok {
				return Frontier{}, fmt.Errorf("parse frontier: %s item %q is not partition:next", d, item)
			}
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return Frontier{}, fmt.Errorf("parse frontier: %s item %q: position is not a number", d, item)
			}
			if _, dup := parts[p]; dup {
				return Frontier{}, fmt.Errorf("parse frontier: %s partition %q appears twice", d, p)
			}
			parts[p] = n
		}
		return New(d, parts)
	}
	return Frontier{}, fmt.Errorf("parse frontier: unknown time domain %q", d)
}

// jsonFrontier is the stable JSON form of a Frontier.
type jsonFrontier struct {
	Domain Domain            `json:"domain"`
	Text   string            `json:"text"`
	Upper  map[string]uint64 `json:"upper"`
}

// MarshalJSON writes the stable JSON form:
//
//	{"domain":"kafka","text":"0:15,1:7","upper":{"0":15,"1":7}}
//
// "upper" is authoritative (partition -> first incomplete position; absent
// partitions are 0); "text" is the String form, for people.
func (f Frontier) MarshalJSON() ([]byte, error) {
	return json.Marshal(jsonFrontier{Domain: f.domain, Text: f.String(), Upper: f.Map()})
}

// UnmarshalJSON reads the form MarshalJSON writes. "text" is ignored. As
// encoding/json's convention asks, a JSON null leaves f unchanged.
func (f *Frontier) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	var j jsonFrontier
	if err := json.Unmarshal(b, &j); err != nil {
		return fmt.Errorf("decode frontier: %w", err)
	}
	d, err := ParseDomain(string(j.Domain))
	if err != nil {
		return fmt.Errorf("decode frontier: %w", err)
	}
	g, err := New(d, j.Upper)
	if err != nil {
		return fmt.Errorf("decode frontier: %w", err)
	}
	*f = g
	return nil
}

// sortNatural sorts partition names: decimal numbers first in numeric order,
// then the rest lexically.
func sortNatural(ps []string) {
	sort.Slice(ps, func(i, j int) bool {
		a, aerr := strconv.ParseUint(ps[i], 10, 64)
		b, berr := strconv.ParseUint(ps[j], 10, 64)
		switch {
		case aerr == nil && berr == nil:
			if a != b {
				return a < b
			}
			return ps[i] < ps[j]
		case aerr == nil:
			return true
		case berr == nil:
			return false
		}
		return ps[i] < ps[j]
	})
}

// Binding says that by system time Time (milliseconds since the Unix epoch)
// a source had reached Frontier. Bindings of one source only grow: a later
// binding's frontier covers every earlier one's.
type Binding struct {
	Time     uint64
	Frontier Frontier
}
