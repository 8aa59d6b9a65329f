//go:build linux

package hashcache

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func sum(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// put hashes path as a caller would and records it, as if hashing had
// started at started.
func put(t *testing.T, c *Cache, path string, started time.Time) string {
	t.Helper()
	id, ok, err := Stat(path)
	if err != nil || !ok {
		t.Fatalf("stat %s: %v %v", path, ok, err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := sum(b)
	if err := c.Put(path, id, started, s); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestHitAndMisses(t *testing.T) {
	dir := t.TempDir()
	c := Open(filepath.Join(dir, "cache"))
	path := filepath.Join(dir, "model.safetensors")
	if err := os.WriteFile(path, []byte("weights v1"), 0o644); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(5 * time.Second) // hashing "started" well after the file's last change

	// A file changed less than two seconds before hashing started is not cached.
	put(t, c, path, time.Now())
	if _, _, ok := c.Get(path); ok {
		t.Fatal("a file changed just before hashing was cached")
	}

	want := put(t, c, path, later)
	if n, got, ok := c.Get(path); !ok || got != want || n != int64(len("weights v1")) {
		t.Fatalf("Get = %d %q %v, want %q", n, got, ok, want)
	}
	if _, _, ok := c.Get(filepath.Join(dir, ".", "model.safetensors")); !ok {
		t.Fatal("the same file under an unclean path missed")
	}

	// Rewritten in place, same size, modification time set back: the change time moved.
	fi, _ := os.Stat(path)
	if err := os.WriteFile(path, []byte("weights v2"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := c.Get(path); ok {
		t.Fatal("a rewritten file with its old modification time hit the cache")
	}

	// Replaced by rename: new inode.
	want = put(t, c, path, later.Add(time.Second))
	tmp := filepath.Join(dir, "new")
	if err := os.WriteFile(tmp, []byte("weights v2"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := c.Get(path); ok {
		t.Fatal("a file replaced by rename hit the cache")
	}

	// A file that changes while it is hashed is not recorded.
	id, _, _ := Stat(path)
	if err := os.WriteFile(path, []byte("weights v3"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := c.Put(path, id, later.Add(time.Hour), want); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := c.Get(path); ok {
		t.Fatal("a file changed during hashing was cached")
	}

	// Damaged entries are misses.
	put(t, c, path, later.Add(time.Hour))
	ents, _ := os.ReadDir(filepath.Join(dir, "cache"))
	if len(ents) != 1 {
		t.Fatalf("cache holds %d files, want 1", len(ents))
	}
	if err := os.WriteFile(filepath.Join(dir, "cache", ents[0].Name()), []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := c.Get(path); ok {
		t.Fatal("a damaged entry hit")
	}
}

func TestNilCache(t *testing.T) {
	var c *Cache
	if _, _, ok := c.Get("/etc/hostname"); ok {
		t.Fatal("nil cache hit")
	}
	if err := c.Put("/etc/hostname", Identity{}, time.Now(), sum(nil)); err != nil {
		t.Fatal(err)
	}
	if Open("") != nil {
		t.Fatal(`Open("") is not the nil cache`)
	}
}
