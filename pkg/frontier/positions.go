package frontier

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// LSN is a PostgreSQL log sequence number. It prints as two hexadecimal
// halves, "0/16B3748".
type LSN uint64

// String prints the LSN in PostgreSQL's notation.
func (l LSN) String() string { return fmt.Sprintf("%X/%X", uint32(l>>32), uint32(l)) }

// ParseLSN reads "X/Y" (hexadecimal, upper or lower case).
func ParseLSN(s string) (LSN, error) {
	hi, lo, ok := strings.Cut(s, "/")
	if !ok || hi == "" || lo == "" || len(hi) > 8 || len(lo) > 8 {
		return 0, fmt.Errorf("parse lsn: %q is not of the form X/Y (e.g. 0/16B3748)", s)
	}
	h, err1 := strconv.ParseUint(hi, 16, 32)
	l, err2 := strconv.ParseUint(lo, 16, 32)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("parse lsn: %q is not of the form X/Y with hexadecimal halves", s)
	}
	return LSN(h<<32 | l), nil
}

// Interval is a closed range [Start, End] of GTID transaction numbers.
type Interval struct{ Start, End uint64 }

// GTIDSet is a MySQL GTID set: per server UUID, the transaction numbers
// executed, as sorted, disjoint, non-adjacent intervals. It prints as
// "uuid:1-5:7-9,uuid2:1-3" with UUIDs in lowercase, sorted.
type GTIDSet struct {
	m map[string][]Interval
}

// ParseGTIDSet reads MySQL's GTID set notation ("uuid:1-5:7-9,uuid2:3"),
// as @@global.gtid_executed prints it (newlines after commas allowed). The
// empty string is the empty set. Overlapping or adjacent intervals are merged.
func ParseGTIDSet(s string) (GTIDSet, error) {
	set := GTIDSet{m: map[string][]Interval{}}
	s = strings.TrimSpace(s)
	if s == "" {
		return set, nil
	}
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		fields := strings.Split(item, ":")
		if len(fields) < 2 {
			return GTIDSet{}, fmt.Errorf("parse gtid set: %q is not uuid:interval[:interval...]", item)
		}
		id, err := parseUUID(fields[0])
		if err != nil {
			return GTIDSet{}, fmt.Errorf("parse gtid set: %w", err)
		}
		for _, iv := range fields[1:] {
			a, b, hasRange := strings.Cut(iv, "-")
			start, err := strconv.ParseUint(a, 10, 64)
			// 2^64-1 is refused as an end (and so as a start) so that
			// End+1, the upper, cannot overflow to 0.
			if err != nil || start == 0 || start == ^uint64(0) {
				return GTIDSet{}, fmt.Errorf("parse gtid set: interval %q of %s: want N or N-M with 1 <= N <= M", iv, id)
			}
			end := start
			if hasRange {
				end, err = strconv.ParseUint(b, 10, 64)
				if err != nil || end < start || end == ^uint64(0) {
					return GTIDSet{}, fmt.Errorf("parse gtid set: interval %q of %s: want N or N-M with 1 <= N <= M", iv, id)
				}
			}
			set.m[id] = append(set.m[id], Interval{start, end})
		}
	}
	for id := range set.m {
		set.m[id] = normalize(set.m[id])
	}
	return set, nil
}

func normalize(ivs []Interval) []Interval {
	sort.Slice(ivs, func(i, j int) bool { return ivs[i].Start < ivs[j].Start })
	out := ivs[:0:0]
	for _, iv := range ivs {
		if n := len(out); n > 0 && iv.Start <= out[n-1].End+1 {
			if iv.End > out[n-1].End {
				out[n-1].End = iv.End
			}
			continue
		}
		out = append(out, iv)
	}
	return out
}

// Intervals returns the intervals of server uuid (nil when absent).
func (s GTIDSet) Intervals(uuid string) []Interval {
	return append([]Interval(nil), s.m[strings.ToLower(uuid)]...)
}

// UUIDs returns the server UUIDs in the set, sorted.
func (s GTIDSet) UUIDs() []string {
	ids := make([]string, 0, len(s.m))
	for id := range s.m {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// Contains reports whether transaction n of server uuid is in the set.
func (s GTIDSet) Contains(uuid string, n uint64) bool {
	for _, iv := range s.m[strings.ToLower(uuid)] {
		if iv.Start <= n && n <= iv.End {
			return true
		}
	}
	return false
}

// String prints the set canonically.
func (s GTIDSet) String() string {
	var b strings.Builder
	for i, id := range s.UUIDs() {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(id)
		for _, iv := range s.m[id] {
			if iv.Start == iv.End {
				fmt.Fprintf(&b, ":%d", iv.Start)
			} else {
				fmt.Fprintf(&b, ":%d-%d", iv.Start, iv.End)
			}
		}
	}
	return b.String()
}

// Equal reports whether both sets hold the same transactions.
func (s GTIDSet) Equal(o GTIDSet) bool { return s.String() == o.String() }

// Upper returns the frontier of everything in the set: per server UUID, one
// past the highest transaction number. This is the upstream (visible)
// frontier: a gap below the highest number does not lower it, because every
// transaction up to it may be visible.
func (s GTIDSet) Upper() Frontier {
	f := Frontier{domain: DomainMySQL}
	for id, ivs := range s.m {
		if len(ivs) == 0 {
			continue
		}
		if f.parts == nil {
			f.parts = map[string]uint64{}
		}
		f.parts[id] = ivs[len(ivs)-1].End + 1
	}
	return f
}

// Prefix returns the frontier of the complete prefix of the set: per server
// UUID, the first transaction number not in the set when counting from 1.
// This is how far a consumer that applied the set in order has got.
func (s GTIDSet) Prefix() Frontier {
	f := Frontier{domain: DomainMySQL}
	for id, ivs := range s.m {
		if len(ivs) == 0 {
			continue
		}
		if f.parts == nil {
			f.parts = map[string]uint64{}
		}
		if ivs[0].Start != 1 {
			// Transaction 1 is missing: the first number not in the set
			// is 1 (nothing complete, but the server UUID is known).
			f.parts[id] = 1
			continue
		}
		f.parts[id] = ivs[0].End + 1
	}
	return f
}

// GTIDSetOf returns the GTID set of everything below the mysql frontier f:
// per server UUID, 1-(upper-1).
func GTIDSetOf(f Frontier) GTIDSet {
	set := GTIDSet{m: map[string][]Interval{}}
	for p, v := range f.parts {
		if v > 1 {
			set.m[p] = []Interval{{1, v - 1}}
		}
	}
	return set
}

// parseUUID checks a server UUID (8-4-4-4-12 hex digits) and lowercases it.
func parseUUID(s string) (string, error) {
	if len(s) != 36 {
		return "", fmt.Errorf("%q is not a server UUID (8-4-4-4-12 hexadecimal digits)", s)
	}
	for i, c := range s {
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return "", fmt.Errorf("%q is not a server UUID (8-4-4-4-12 hexadecimal digits)", s)
			}
		default:
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
				return "", fmt.Errorf("%q is not a server UUID (8-4-4-4-12 hexadecimal digits)", s)
			}
		}
	}
	return strings.ToLower(s), nil
}

// MariaDBGTID is one MariaDB GTID, domain-server-seq.
type MariaDBGTID struct {
	Domain uint32
	Server uint32
	Seq    uint64
}

// String prints "domain-server-seq".
func (g MariaDBGTID) String() string { return fmt.Sprintf("%d-%d-%d", g.Domain, g.Server, g.Seq) }

// MariaDBPos is a MariaDB GTID position: at most one GTID per domain, as
// @@global.gtid_binlog_pos prints it ("0-1-42,1-2-7"). It is kept sorted by
// domain.
type MariaDBPos []MariaDBGTID

// ParseMariaDBPos reads a GTID position. The empty string is the empty
// position. A domain may appear only once.
func ParseMariaDBPos(s string) (MariaDBPos, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return MariaDBPos{}, nil
	}
	var pos MariaDBPos
	seen := map[uint32]bool{}
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		f := strings.Split(item, "-")
		if len(f) != 3 {
			return nil, fmt.Errorf("parse mariadb gtid position: %q is not domain-server-seq", item)
		}
		d, err1 := strconv.ParseUint(f[0], 10, 32)
		sv, err2 := strconv.ParseUint(f[1], 10, 32)
		seq, err3 := strconv.ParseUint(f[2], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil || seq == ^uint64(0) {
			return nil, fmt.Errorf("parse mariadb gtid position: %q is not domain-server-seq with decimal numbers", item)
		}
		if seen[uint32(d)] {
			return nil, fmt.Errorf("parse mariadb gtid position: domain %d appears twice in %q", d, s)
		}
		seen[uint32(d)] = true
		pos = append(pos, MariaDBGTID{uint32(d), uint32(sv), seq})
	}
	sort.Slice(pos, func(i, j int) bool { return pos[i].Domain < pos[j].Domain })
	return pos, nil
}

// String prints the position as MariaDB does, sorted by domain.
func (p MariaDBPos) String() string {
	parts := make([]string, len(p))
	for i, g := range p {
		parts[i] = g.String()
	}
	return strings.Join(parts, ",")
}

// Upper returns the frontier of the position: per domain, seq+1.
func (p MariaDBPos) Upper() Frontier {
	f := Frontier{domain: DomainMariaDB}
	for _, g := range p {
		if f.parts == nil {
			f.parts = map[string]uint64{}
		}
		f.parts[strconv.FormatUint(uint64(g.Domain), 10)] = g.Seq + 1
	}
	return f
}

// KafkaOffsets returns the kafka frontier of per-partition next offsets
// (negative offsets, Kafka's "unknown", count as 0).
func KafkaOffsets(next map[int32]int64) Frontier {
	f := Frontier{domain: DomainKafka}
	for p, off := range next {
		if off <= 0 {
			continue
		}
		if f.parts == nil {
			f.parts = map[string]uint64{}
		}
		f.parts[strconv.FormatInt(int64(p), 10)] = uint64(off)
	}
	return f
}
