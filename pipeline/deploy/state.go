package deploy

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/phonellm/phonellm/internal/fsx"
)

// ErrNotFound is returned by [Store.Load] for an unknown deployment ID.
var ErrNotFound = errors.New("deploy: no such deployment")

// SecretError is returned when a state file would contain a forbidden value.
type SecretError struct{ Path string }

func (e *SecretError) Error() string {
	return fmt.Sprintf("deploy: refusing to write %s: it would contain a secret value", e.Path)
}

// Store keeps one JSON file per deployment under Dir/deployments (Dir is typically
// $PHONELLM_HOME/fleet). Writes are atomic (temp file, fsync, rename). The zero value is not usable; use
// [NewStore].
type Store struct {
	Dir string

	mu     sync.Mutex
	forbid []string
}

// NewStore returns a Store rooted at dir (created on first write).
func NewStore(dir string) *Store { return &Store{Dir: dir} }

// Forbid registers secret values (API keys, tokens, mnemonics) that must never reach a state file. Save fails
// with a [SecretError] if the encoded deployment contains one, raw or hex- or base64-encoded. Values shorter
// than 8 bytes are ignored (they would match by accident).
func (s *Store) Forbid(values ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, v := range values {
		if len(v) >= 8 {
			s.forbid = append(s.forbid, v)
		}
	}
}

// ContainsSecret reports whether b contains any of values, raw, JSON-escaped, hex or base64 encoded (values
// shorter than 8 bytes are ignored).
func ContainsSecret(b []byte, values ...string) bool {
	for _, v := range values {
		if len(v) < 8 {
			continue
		}
		esc, _ := json.Marshal(v)
		forms := [][]byte{
			[]byte(v), esc[1 : len(esc)-1],
			[]byte(hex.EncodeToString([]byte(v))),
			[]byte(base64.StdEncoding.EncodeToString([]byte(v))),
			[]byte(base64.RawURLEncoding.EncodeToString([]byte(v))),
		}
		for _, f := range forms {
			if bytes.Contains(b, f) {
				return true
			}
		}
		if bytes.Contains(bytes.ToLower(b), forms[2]) {
			return true
		}
	}
	return false
}

var idRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,127}$`)

// ValidID reports whether id can name a deployment (and its state file).
func ValidID(id string) bool { return idRE.MatchString(id) && !strings.Contains(id, "..") }

func (s *Store) path(id string) (string, error) {
	if !ValidID(id) {
		return "", fmt.Errorf("deploy: invalid deployment id %q (want [a-z0-9._-], at most 128)", id)
	}
	return filepath.Join(s.Dir, "deployments", id+".json"), nil
}

// Save writes d atomically to Dir/deployments/<id>.json.
func (s *Store) Save(d Deployment) error {
	p, err := s.path(d.ID)
	if err != nil {
		return err
	}
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return fmt.Errorf("deploy: encode deployment %s: %w", d.ID, err)
	}
	b = append(b, '\n')
	s.mu.Lock()
	forbid := slices.Clone(s.forbid)
	s.mu.Unlock()
	if ContainsSecret(b, forbid...) {
		return &SecretError{Path: p}
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return fmt.Errorf("deploy: state folder: %w", err)
	}
	if _, err := fsx.WriteFile(p, b); err != nil {
		return fmt.Errorf("deploy: save deployment %s: %w", d.ID, err)
	}
	return nil
}

// maxStateFile bounds a state file read back from disk.
const maxStateFile = 4 << 20

// Load reads a deployment; it returns an error wrapping [ErrNotFound] when there is none.
func (s *Store) Load(id string) (Deployment, error) {
	p, err := s.path(id)
	if err != nil {
		return Deployment{}, err
	}
	return readState(p, id)
}

func readState(p, id string) (Deployment, error) {
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return Deployment{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err != nil {
		return Deployment{}, fmt.Errorf("deploy: %w", err)
	}
	defer f.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(io.LimitReader(f, maxStateFile+1)); err != nil {
		return Deployment{}, fmt.Errorf("deploy: read %s: %w", p, err)
	}
	if buf.Len() > maxStateFile {
		return Deployment{}, fmt.Errorf("deploy: %s: larger than %d bytes", p, maxStateFile)
	}
	var d Deployment
	if err := json.Unmarshal(buf.Bytes(), &d); err != nil {
		return Deployment{}, fmt.Errorf("deploy: %s: %w", p, err)
	}
	if d.ID != id {
		return Deployment{}, fmt.Errorf("deploy: %s: holds deployment %q, want %q", p, d.ID, id)
	}
	return d, nil
}

// List returns every recorded deployment, sorted by creation time then ID. Unreadable files are reported in
// the error but do not hide the others.
func (s *Store) List() ([]Deployment, error) {
	dir := filepath.Join(s.Dir, "deployments")
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("deploy: %w", err)
	}
	var out []Deployment
	var errs []error
	for _, e := range ents {
		name := e.Name()
		id, ok := strings.CutSuffix(name, ".json")
		if !ok || e.IsDir() || !ValidID(id) {
			continue
		}
		d, err := readState(filepath.Join(dir, name), id)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, d)
	}
	slices.SortFunc(out, func(a, b Deployment) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out, errors.Join(errs...)
}

// Delete removes a deployment's state file (not an error when there is none).
func (s *Store) Delete(id string) error {
	p, err := s.path(id)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("deploy: %w", err)
	}
	return fsx.SyncDir(filepath.Dir(p))
}

// NewID derives a deployment ID from a name and a unique suffix (for example a timestamp): lowercase, with
// characters outside [a-z0-9._-] replaced by '-'.
func NewID(name, suffix string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(name) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	id := strings.Trim(b.String(), "-.")
	if len(id) > 100 {
		id = id[:100]
	}
	if id == "" {
		id = "deployment"
	}
	if suffix != "" {
		id += "-" + NewID(suffix, "")
	}
	return id
}
