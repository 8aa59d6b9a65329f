package hashcache

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/phonellm/phonellm/internal/fsx"
)

// Identity is what must stay equal for a cached hash to be used.
type Identity struct {
	Size    int64  `json:"size"`
	MtimeNs int64  `json:"mtime_ns"`
	CtimeNs int64  `json:"ctime_ns"`
	Inode   uint64 `json:"inode"`
	Device  uint64 `json:"device"`
}

// entry is one cached hash, stored as <dir>/<sha256 of the absolute path>.json.
type entry struct {
	Path   string   `json:"path"`
	ID     Identity `json:"identity"`
	SHA256 string   `json:"sha256"`
}

// Cache is a hash cache in a folder. The nil *Cache is valid and never hits.
type Cache struct {
	dir string
	// RacyMargin is how much older than the start of its hashing a file's
	// last change must be for its hash to be stored (see the package doc);
	// Open sets DefaultRacyMargin. Tests that hash files they have just
	// written set 0 on their cache.
	RacyMargin time.Duration
}

// DefaultRacyMargin is the RacyMargin of an opened cache.
const DefaultRacyMargin = 2 * time.Second

// Open returns the cache kept in dir (created on the first Put). An empty dir
// gives the nil cache.
func Open(dir string) *Cache {
	if dir == "" {
		return nil
	}
	return &Cache{dir: dir, RacyMargin: DefaultRacyMargin}
}

// Stat returns the identity of the file at path (following symlinks). ok is
// false where the platform does not give inode and change time.
func Stat(path string) (Identity, bool, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return Identity{}, false, err
	}
	id, ok := identity(fi)
	return id, ok, nil
}

// Get returns the cached sha256 of the file at path if its identity is the
// one recorded with it.
func (c *Cache) Get(path string) (size int64, sum string, ok bool) {
	if c == nil {
		return 0, "", false
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return 0, "", false
	}
	id, ok, err := Stat(abs)
	if err != nil || !ok {
		return 0, "", false
	}
	b, err := os.ReadFile(c.file(abs))
	if err != nil {
		return 0, "", false
	}
	var e entry
	if json.Unmarshal(b, &e) != nil || e.Path != abs || e.ID != id || !fsx.IsSHA256Hex(e.SHA256) {
		return 0, "", false
	}
	return id.Size, e.SHA256, true
}

// Put records sum as the sha256 of the file at path, whose identity was
// before when hashing started at started. Nothing is stored (and nil is
// returned) when the file changed meanwhile, when its change time is less
// than c.RacyMargin older than started, or on a platform without identities.
func (c *Cache) Put(path string, before Identity, started time.Time, sum string) error {
	if c == nil || !fsx.IsSHA256Hex(sum) {
		return nil
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil
	}
	now, ok, err := Stat(abs)
	if err != nil || !ok || now != before || before.CtimeNs > started.Add(-c.RacyMargin).UnixNano() {
		return nil
	}
	if err := os.MkdirAll(c.dir, 0o755); err != nil {
		return fmt.Errorf("hash cache: %w", err)
	}
	b, err := json.Marshal(entry{Path: abs, ID: before, SHA256: sum})
	if err != nil {
		return err
	}
	f, err := fsx.Create(c.file(abs))
	if err != nil {
		return fmt.Errorf("hash cache: %w", err)
	}
	defer f.Abort()
	if _, err := f.Write(b); err != nil {
		return fmt.Errorf("hash cache: %w", err)
	}
	return f.Commit()
}

func (c *Cache) file(abs string) string {
	h := sha256.Sum256([]byte(abs))
	return filepath.Join(c.dir, hex.EncodeToString(h[:16])+".json")
}
