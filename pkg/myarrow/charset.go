package myarrow

import (
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"

	"golang.org/x/text/encoding"
	"golang.org/x/text/encoding/charmap"
	"golang.org/x/text/encoding/japanese"
	"golang.org/x/text/encoding/korean"
	"golang.org/x/text/encoding/simplifiedchinese"
	"golang.org/x/text/encoding/traditionalchinese"
	"golang.org/x/text/encoding/unicode"
	"golang.org/x/text/encoding/unicode/utf32"

	"github.com/rtrctl/rtrctl/internal/hint"
)

// Charset decodes the bytes of one MySQL/MariaDB character set into
// UTF-8 the way the server converts them for a utf8mb4 connection: a
// snapshot reads text through such a connection, the binlog carries the
// column's own bytes, and both must give the same string. Bytes the
// character set does not map become '?', as the server makes them
// (single-byte sets), or U+FFFD (malformed multi-byte sequences).
type Charset struct {
	// Name is the MySQL name (information_schema CHARACTER_SET_NAME).
	Name string
	// Decoder names the golang.org/x/text decoder used, for the docs.
	Decoder string
	// utf8: the bytes are UTF-8 already.
	utf8 bool
	// single-byte character sets: each byte through cm; the bytes cm
	// leaves unmapped in 0x80..0x9F are the C1 controls of the same value
	// (as the ISO-8859 standards and the server have them).
	cm *charmap.Charmap
	// bytes, when set, is the server's own mapping of each byte
	// (ServerBytes), which replaces cm where the two differ.
	bytes *[256]rune
	// ascii: bytes below 0x80 as they are, the others '?'.
	ascii bool
	// multi-byte character sets.
	enc encoding.Encoding
	// probe: a double-byte set whose codes ServerCodes compares with the
	// server's; fix then replaces the characters where they differ.
	probe bool
	fix   *strings.Replacer
}

// charsets are the character sets rtrctl decodes, by MySQL name.
var charsets = func() map[string]*Charset {
	m := map[string]*Charset{}
	add := func(c *Charset, names ...string) {
		for _, n := range names {
			cc := *c
			cc.Name = n
			m[n] = &cc
		}
	}
	add(&Charset{Decoder: "none (UTF-8 as it is)", utf8: true}, "utf8mb4", "utf8mb3", "utf8")
	add(&Charset{Decoder: "none (bytes below 0x80; others '?')", ascii: true}, "ascii")
	// MySQL's latin1 is Windows-1252 with the five bytes that code page
	// leaves undefined (0x81, 0x8D, 0x8F, 0x90, 0x9D) mapped to the C1
	// controls of the same value, as in ISO-8859-1.
	add(&Charset{Decoder: "charmap.Windows1252", cm: charmap.Windows1252}, "latin1")
	for _, s := range []struct {
		name, dec string
		cm        *charmap.Charmap
	}{
		{"latin2", "charmap.ISO8859_2", charmap.ISO8859_2},
		{"latin5", "charmap.ISO8859_9", charmap.ISO8859_9},
		{"latin7", "charmap.ISO8859_13", charmap.ISO8859_13},
		{"greek", "charmap.ISO8859_7", charmap.ISO8859_7},
		{"hebrew", "charmap.ISO8859_8", charmap.ISO8859_8},
		{"cp1250", "charmap.Windows1250", charmap.Windows1250},
		{"cp1251", "charmap.Windows1251", charmap.Windows1251},
		{"cp1256", "charmap.Windows1256", charmap.Windows1256},
		{"cp1257", "charmap.Windows1257", charmap.Windows1257},
		{"cp850", "charmap.CodePage850", charmap.CodePage850},
		{"cp852", "charmap.CodePage852", charmap.CodePage852},
		{"cp866", "charmap.CodePage866", charmap.CodePage866},
		{"koi8r", "charmap.KOI8R", charmap.KOI8R},
		{"koi8u", "charmap.KOI8U", charmap.KOI8U},
		{"macroman", "charmap.Macintosh", charmap.Macintosh},
		{"tis620", "charmap.Windows874", charmap.Windows874},
	} {
		add(&Charset{Decoder: s.dec, cm: s.cm}, s.name)
	}
	for _, s := range []struct {
		names []string
		dec   string
		enc   encoding.Encoding
	}{
		{[]string{"ucs2", "utf16"}, "unicode.UTF16(BigEndian, IgnoreBOM)", unicode.UTF16(unicode.BigEndian, unicode.IgnoreBOM)},
		{[]string{"utf16le"}, "unicode.UTF16(LittleEndian, IgnoreBOM)", unicode.UTF16(unicode.LittleEndian, unicode.IgnoreBOM)},
		{[]string{"utf32"}, "utf32.UTF32(BigEndian, IgnoreBOM)", utf32.UTF32(utf32.BigEndian, utf32.IgnoreBOM)},
		{[]string{"gbk", "gb2312"}, "simplifiedchinese.GBK", simplifiedchinese.GBK},
		{[]string{"gb18030"}, "simplifiedchinese.GB18030", simplifiedchinese.GB18030},
		{[]string{"big5"}, "traditionalchinese.Big5", traditionalchinese.Big5},
		{[]string{"euckr"}, "korean.EUCKR", korean.EUCKR},
		{[]string{"sjis", "cp932"}, "japanese.ShiftJIS", japanese.ShiftJIS},
		{[]string{"ujis", "eucjpms"}, "japanese.EUCJP", japanese.EUCJP},
	} {
		add(&Charset{Decoder: s.dec, enc: s.enc, probe: !strings.HasPrefix(s.dec, "u")}, s.names...)
	}
	return m
}()

// ErrCharset is wrapped when a column's character set has no decoder.
var ErrCharset = fmt.Errorf("unsupported character set")

// LookupCharset returns the decoder of a MySQL character set name.
func LookupCharset(name string) (*Charset, error) {
	if c := charsets[strings.ToLower(name)]; c != nil {
		return c, nil
	}
	return nil, fmt.Errorf("%w %s", ErrCharset, name)
}

// Charsets lists the decoded character sets, sorted by name.
func Charsets() []*Charset {
	out := make([]*Charset, 0, len(charsets))
	for _, c := range charsets {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// charsetError is the error of a column whose character set has no
// decoder, with how to change it.
func charsetError(col, charset, columnType string) error {
	return hint.Wrap(fmt.Errorf("column %s: %w %s: rtrctl cannot decode its bytes from the binlog (docs/types-mysql.md lists the character sets it decodes)", col, ErrCharset, charset),
		fmt.Sprintf("convert the column, e.g. ALTER TABLE ... MODIFY %s %s CHARACTER SET utf8mb4;", QuoteIdent(col), columnType))
}

// Decode turns b, text in this character set, into UTF-8.
func (c *Charset) Decode(b []byte) string {
	switch {
	case c.utf8:
		return string(b)
	case c.ascii:
		return strings.Map(func(r rune) rune {
			if r >= utf8.RuneSelf {
				return '?'
			}
			return r
		}, string(b))
	case c.bytes != nil:
		var sb strings.Builder
		sb.Grow(len(b))
		for _, x := range b {
			sb.WriteRune(c.bytes[x])
		}
		return sb.String()
	case c.cm != nil:
		var sb strings.Builder
		sb.Grow(len(b))
		for _, x := range b {
			sb.WriteRune(c.decodeByte(x))
		}
		return sb.String()
	}
	// A multi-byte decoder makes a malformed sequence U+FFFD (the server
	// would print '?'; a real U+FFFD cannot be told from it afterwards).
	out, err := c.enc.NewDecoder().Bytes(b)
	if err != nil {
		return strings.ToValidUTF8(string(b), "\uFFFD")
	}
	if c.fix != nil {
		return c.fix.Replace(string(out))
	}
	return string(out)
}

// decodeByte maps one byte of a single-byte character set.
func (c *Charset) decodeByte(x byte) rune {
	r := c.cm.DecodeByte(x)
	if r == utf8.RuneError {
		if x >= 0x80 && x <= 0x9f {
			return rune(x) // a C1 control
		}
		return '?'
	}
	return r
}

// SingleByte tells a character set of one byte per character.
func (c *Charset) SingleByte() bool { return c.cm != nil }

// WithServerBytes returns c with the server's mapping of every byte
// (got[i] is what the server makes of byte i, '?' when unmapped) taking
// the place of the decoder's where they differ, and the bytes that
// differed. MariaDB's tables of some code pages predate the ones
// golang.org/x/text follows (cp1256, cp866, koi8u, tis620 in 10.11).
func (c *Charset) WithServerBytes(got [256]rune) (*Charset, []byte) {
	var diff []byte
	for i := range 256 {
		if c.decodeByte(byte(i)) != got[i] {
			diff = append(diff, byte(i))
		}
	}
	if len(diff) == 0 {
		return c, nil
	}
	cc := *c
	cc.bytes = &got
	return &cc, diff
}

// Probed tells a double-byte character set that ServerCodes checks.
func (c *Charset) Probed() bool { return c.probe }

// ProbeCodes are the two-byte codes ServerCodes compares, each followed
// by a newline: every lead byte 0x81..0xFE with every trail byte
// 0x40..0xFE.
func ProbeCodes() []byte {
	var b []byte
	for lead := 0x81; lead <= 0xfe; lead++ {
		for trail := 0x40; trail <= 0xfe; trail++ {
			b = append(b, byte(lead), byte(trail), '\n')
		}
	}
	return b
}

// WithServerCodes returns c corrected by the server's conversion of
// ProbeCodes (got, split at the newlines): where the server makes a code
// one character and the decoder another, and the decoder's character
// comes from that code alone, it is replaced by the server's. MariaDB's
// sjis and ujis map a few codes as JIS X 0208 does (0x815F is \), where
// golang.org/x/text follows Windows-31J (U+FF3C). It also returns the
// codes that differ.
func (c *Charset) WithServerCodes(got []string) (*Charset, [][2]byte) {
	codes := ProbeCodes()
	n := len(codes) / 3
	if len(got) < n {
		return c, nil
	}
	mine := make([]string, n)
	from := map[string]int{}    // decoder's character -> how many codes make it
	server := map[string]bool{} // characters the server makes
	for i := range n {
		out, _ := c.enc.NewDecoder().Bytes(codes[3*i : 3*i+2])
		mine[i] = string(out)
		from[mine[i]]++
		server[got[i]] = true
	}
	var pairs []string
	var diff [][2]byte
	for i := range n {
		m, g := mine[i], got[i]
		if m == g || utf8.RuneCountInString(m) != 1 || utf8.RuneCountInString(g) != 1 || m == "\uFFFD" || from[m] != 1 || server[m] {
			continue
		}
		pairs = append(pairs, m, g)
		diff = append(diff, [2]byte{codes[3*i], codes[3*i+1]})
	}
	if len(pairs) == 0 {
		return c, nil
	}
	cc := *c
	cc.fix = strings.NewReplacer(pairs...)
	return &cc, diff
}
