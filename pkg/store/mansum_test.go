package store

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestManifestChecksum: every manifest carries a checksum; an edit that
// keeps valid JSON (a batch entry duplicated, which would resurrect its
// rows) is refused as corrupt, and a manifest without a checksum (written
// before it existed) is still read.
func TestManifestChecksum(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	sh := createTest(t, openTest(t, dir, Options{}), "db.t", testFields)
	appendKeys(t, sh, 0, 2)
	path := filepath.Join(sh.dir, manifestName(3))
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(`"checksum": "crc32c:`)) {
		t.Fatalf("manifest without a checksum:\n%s", b)
	}
	m, err := decodeManifest(b)
	if err != nil {
		t.Fatal(err)
	}
	// Duplicate the last batch entry: still a valid manifest by shape.
	m.Batches = append(m.Batches, m.Batches[len(m.Batches)-1])
	enc, _ := encodeManifest(m)
	forged := append(enc[:bytes.LastIndex(enc, []byte(checksumKey))], b[bytes.LastIndex(b, []byte(checksumKey)):]...)
	if err := os.WriteFile(path, forged, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = openTest(t, dir, Options{}).Shard(ctx, "db.t")
	var ce *CorruptError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "checksum mismatch") {
		t.Fatalf("open with an edited manifest: %v, want a checksum mismatch", err)
	}
	// Without the field: read unchecked, as before.
	legacy := append(enc[:bytes.LastIndex(enc, []byte(checksumKey))], "\n}\n"...)
	if err := os.WriteFile(path, legacy, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := openTest(t, dir, Options{}).Shard(ctx, "db.t"); err != nil {
		t.Fatalf("open with a manifest without checksum: %v", err)
	}
}
