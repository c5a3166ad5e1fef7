package snapshot

import (
	"errors"
	"slices"
	"testing"
)

func TestCopyRowSplit(t *testing.T) {
	tests := []struct {
		name  string
		line  string
		ncols int
		vals  []string // "<NULL>" for SQL NULL
		err   bool
	}{
		{"plain", "1\tone\t2.5", 3, []string{"1", "one", "2.5"}, false},
		{"null", "1\t\\N\t3", 3, []string{"1", "<NULL>", "3"}, false},
		{"empty string is not null", "1\t\t3", 3, []string{"1", "", "3"}, false},
		{"trailing empty", "1\t", 2, []string{"1", ""}, false},
		{"escaped controls", `a\tb\nc\\d\re\bf\fg\vh`, 1, []string{"a\tb\nc\\d\re\bf\fg\vh"}, false},
		{"escaped backslash then N is text", `\\N`, 1, []string{`\N`}, false},
		{"N with more is text", `\Nx`, 1, []string{`Nx`}, false},
		{"octal", `\101\0\7x`, 1, []string{"A\x00\x07x"}, false},
		{"hex", `\x41\x4a\xz`, 1, []string{"AJxz"}, false},
		{"other escaped char is itself", `\a\"`, 1, []string{`a"`}, false},
		{"escaped tab is not a separator", `a\	b`, 1, []string{"a\tb"}, false},
		{"bytea hex output", `\\x0aff`, 1, []string{`\x0aff`}, false},
		{"utf8", "ü\tß", 2, []string{"ü", "ß"}, false},
		{"too few columns", "1\t2", 3, nil, true},
		{"too many columns", "1\t2\t3", 2, nil, true},
		{"trailing backslash", `abc\`, 1, nil, true},
		{"no columns", "", 0, []string{}, false},
		{"no columns but data", "x", 0, nil, true},
	}
	var r copyRow
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := r.split([]byte(tc.line), tc.ncols)
			if tc.err {
				if !errors.Is(err, errCopyFormat) {
					t.Fatalf("split(%q) = %v, want errCopyFormat", tc.line, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("split(%q): %v", tc.line, err)
			}
			got := []string{}
			for i, v := range r.vals {
				if r.nulls[i] {
					got = append(got, "<NULL>")
				} else {
					got = append(got, string(v))
				}
			}
			if !slices.Equal(got, tc.vals) {
				t.Errorf("split(%q) = %q, want %q", tc.line, got, tc.vals)
			}
		})
	}
}

// FuzzCopyRow checks that split never panics, that values stay stable
// while later fields are decoded, and that escaping a row's values and
// splitting it again gives them back.
func FuzzCopyRow(f *testing.F) {
	for _, s := range []string{"", "\t", `\N`, `a\tb`, `\`, "1\t\\N\t\\\\x", `\x4`, `\777`, "a\tb\tc"} {
		f.Add([]byte(s), 2)
	}
	f.Fuzz(func(t *testing.T, line []byte, ncols int) {
		if ncols < 0 || ncols > 64 {
			return
		}
		var r copyRow
		if err := r.split(line, ncols); err != nil {
			return
		}
		vals := make([][]byte, len(r.vals))
		for i, v := range r.vals {
			vals[i] = append([]byte(nil), v...)
		}
		// Re-encode the way COPY does and split again.
		var enc []byte
		for i, v := range vals {
			if i > 0 {
				enc = append(enc, '\t')
			}
			if r.nulls[i] {
				enc = append(enc, `\N`...)
				continue
			}
			for _, c := range v {
				switch c {
				case '\\':
					enc = append(enc, `\\`...)
				case '\t':
					enc = append(enc, `\t`...)
				case '\n':
					enc = append(enc, `\n`...)
				case '\r':
					enc = append(enc, `\r`...)
				default:
					enc = append(enc, c)
				}
			}
		}
		nulls := slices.Clone(r.nulls)
		var r2 copyRow
		if err := r2.split(enc, ncols); err != nil {
			t.Fatalf("re-encoded row %q does not split: %v", enc, err)
		}
		for i := range vals {
			if r2.nulls[i] != nulls[i] || string(r2.vals[i]) != string(vals[i]) {
				t.Fatalf("column %d: %q (null %v) became %q (null %v)", i, vals[i], nulls[i], r2.vals[i], r2.nulls[i])
			}
		}
	})
}

func TestSplitPages(t *testing.T) {
	tests := []struct {
		relpages, size int64
		want           [][2]int64
	}{
		{0, 10, nil},
		{10, 10, nil},
		{10, 0, nil},
		{11, 10, [][2]int64{{0, 10}, {10, -1}}},
		{25, 10, [][2]int64{{0, 10}, {10, 20}, {20, -1}}},
		{30, 10, [][2]int64{{0, 10}, {10, 20}, {20, -1}}},
	}
	for _, tc := range tests {
		got := splitPages(tc.relpages, tc.size)
		if !slices.Equal(got, tc.want) {
			t.Errorf("splitPages(%d, %d) = %v, want %v", tc.relpages, tc.size, got, tc.want)
		}
	}
}

func TestInSnapshot(t *testing.T) {
	// A transaction whose commit record starts at the consistent point is
	// not in the snapshot; one just below it is.
	if !inSnapshot(99, 100) || inSnapshot(100, 100) || inSnapshot(101, 100) {
		t.Fatal("inSnapshot must be commit LSN < consistent point")
	}
}
