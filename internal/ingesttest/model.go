// Package ingesttest is the conformance suite of rtrctl's sources: one set
// of checks of the ingest guarantees (definite snapshots, changes at their
// source time, definite errors per collection, identical reads after
// SIGKILL, ownership, upstream restarts, acknowledgement no further than
// the store) run against every source through a Harness, the way restic's
// internal/backend/test runs one suite against every backend.
//
// The upstream is a bank: every collection maps an account id to a
// balance, and every transaction moves an amount between two accounts
// (possibly of two collections), opens an account with money from
// another or closes one into another, so the sum of balances is constant
// while rows are updated, inserted and deleted. The
// suite's writer keeps a Log of the committed transactions, with where
// each sits in source time; the checks compare a store with the Log and
// return an error describing what is wrong, so that a test can also
// assert that a broken source fails them.
//
// The package imports "testing": it is for tests only, and cmd/rtrctl's
// shipped binary must not link it (TestBinaryLinksNoTestCode).
package ingesttest

import (
	"fmt"
	"hash/fnv"
	"sort"
	"strings"
	"sync"

	"github.com/rtrctl/rtrctl/pkg/frontier"
)

// State is an upstream's bank contents: collection -> account id ->
// balance.
type State map[string]map[string]int64

// Clone returns a deep copy of s.
func (s State) Clone() State {
	out := State{}
	for c, rows := range s {
		out[c] = map[string]int64{}
		for k, v := range rows {
			out[c][k] = v
		}
	}
	return out
}

// Sum is the sum of every balance.
func (s State) Sum() int64 {
	var n int64
	for _, rows := range s {
		for _, v := range rows {
			n += v
		}
	}
	return n
}

// Diff describes up to five differences between got and want ("" when
// they are equal): states, or Rows.
func Diff[S ~map[string]map[string]int64](got, want S) string {
	var d []string
	colls := map[string]bool{}
	for c := range got {
		colls[c] = true
	}
	for c := range want {
		colls[c] = true
	}
	for c := range colls {
		for k, v := range got[c] {
			if w, ok := want[c][k]; !ok {
				d = append(d, fmt.Sprintf("%s[%s] = %d, want absent", c, k, v))
			} else if w != v {
				d = append(d, fmt.Sprintf("%s[%s] = %d, want %d", c, k, v, w))
			}
		}
		for k, w := range want[c] {
			if _, ok := got[c][k]; !ok {
				d = append(d, fmt.Sprintf("%s[%s] absent, want %d", c, k, w))
			}
		}
	}
	sort.Strings(d)
	if n := len(d); n > 5 {
		d = append(d[:5], fmt.Sprintf("... %d differences", n))
	}
	return strings.Join(d, "; ")
}

// Set is one account's new balance, or its removal.
type Set struct {
	Coll, ID string
	Balance  int64
	// Op is the write: an update of an existing account (the zero
	// value), the insert of a new one, or its delete (Balance unused).
	Op Op
}

// Op is what a Set does to its account's row.
type Op int

// The writes of a Set.
const (
	Update Op = iota
	Insert
	Delete
)

func (o Op) String() string {
	switch o {
	case Insert:
		return "insert"
	case Delete:
		return "delete"
	}
	return "update"
}

// apply makes set's write in s.
func (s State) apply(set Set) {
	if set.Op == Delete {
		delete(s[set.Coll], set.ID)
		return
	}
	s[set.Coll][set.ID] = set.Balance
}

// Txn is a committed upstream transaction: the balances it set, in the
// order it wrote them, and where it sits in source time.
type Txn struct {
	Sets []Set
	// Pos places the transaction in source time, one per Set for a
	// source whose writes are not atomic (Kafka: each record's offset),
	// else one for the whole transaction.
	Pos []Pos
}

// Pos brackets a source time: the write's time T (in Partition) is
// known to satisfy Lo <= T <= Hi. A frontier F contains the write surely
// when F is beyond Hi, possibly when it is beyond Lo.
type Pos struct {
	Partition string
	Lo, Hi    uint64
}

func (p Pos) surely(f frontier.Frontier) bool {
	return f.Beyond(frontier.Time{Partition: p.Partition, Pos: p.Hi})
}

func (p Pos) maybe(f frontier.Frontier) bool {
	return f.Beyond(frontier.Time{Partition: p.Partition, Pos: p.Lo})
}

// Log is the fixture's record of the upstream: its contents before the
// first logged transaction and every committed transaction since, in
// commit order. It is safe for concurrent use.
type Log struct {
	mu      sync.Mutex
	initial State
	txns    []Txn
}

// NewLog returns a log starting at initial.
func NewLog(initial State) *Log { return &Log{initial: initial.Clone()} }

// Append records a committed transaction.
func (l *Log) Append(tx Txn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.txns = append(l.txns, tx)
}

// Read returns the initial state and the transactions so far.
func (l *Log) Read() (State, []Txn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.initial.Clone(), append([]Txn(nil), l.txns...)
}

// Len is the number of committed transactions.
func (l *Log) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.txns)
}

// Current is the state after every logged transaction.
func (l *Log) Current() State {
	s, txns := l.Read()
	for _, tx := range txns {
		for _, set := range tx.Sets {
			s.apply(set)
		}
	}
	return s
}

// step is one unit of the model that a store may show a prefix of: a
// whole transaction (atomic sources) or one write (the others).
type step struct {
	sets []Set
	pos  []Pos
}

// steps flattens the log into the units of collection coll ("" for every
// collection, whole transactions).
func steps(txns []Txn, coll string) []step {
	var out []step
	for _, tx := range txns {
		if coll == "" {
			out = append(out, step{sets: tx.Sets, pos: tx.Pos})
			continue
		}
		for i, s := range tx.Sets {
			if s.Coll != coll {
				continue
			}
			st := step{sets: []Set{s}}
			if len(tx.Pos) == len(tx.Sets) {
				st.pos = []Pos{tx.Pos[i]}
			} else {
				st.pos = tx.Pos
			}
			out = append(out, st)
		}
	}
	return out
}

// hashState is an order-independent hash of a state's rows (or of Rows
// with their multiplicities).
func hashState[S ~map[string]map[string]int64](s S) uint64 {
	var h uint64
	for c, rows := range s {
		for k, v := range rows {
			h += rowHash(c, k, v)
		}
	}
	return h
}

func rowHash(c, k string, v int64) uint64 {
	f := fnv.New64a()
	fmt.Fprintf(f, "%s\x00%s\x00%d", c, k, v)
	return f.Sum64()
}
