package ingesttest

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
)

// copyStoreWithout copies the store directory src to dst, leaving out the
// shards of collections (so that an ingest into dst finds the source's
// bindings and none of its collections).
func copyStoreWithout(src, dst string, collections []string) error {
	found := 0
	err := filepath.Walk(src, func(path string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		if dir, name := filepath.Split(rel); fi.IsDir() && filepath.Clean(dir) == "shards" && slices.Contains(collections, name) {
			found++
			return filepath.SkipDir
		}
		out := filepath.Join(dst, rel)
		if fi.IsDir() {
			return os.MkdirAll(out, 0o755)
		}
		if !fi.Mode().IsRegular() {
			return nil // sockets
		}
		in, err := os.Open(path)
		if err != nil {
			return err
		}
		defer in.Close()
		f, err := os.Create(out)
		if err != nil {
			return err
		}
		if _, err := io.Copy(f, in); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	})
	if err != nil {
		return fmt.Errorf("copy store: %w", err)
	}
	if found != len(collections) {
		return fmt.Errorf("copy store: found %d of the shards of %v in %s/shards", found, collections, src)
	}
	return nil
}
