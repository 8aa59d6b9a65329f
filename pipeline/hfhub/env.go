package hfhub

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
)

// DefaultEndpoint is the public Hub (huggingface_hub constants.py ENDPOINT).
const DefaultEndpoint = "https://huggingface.co"

// Environment variables read by this package, for the CLI's environment table.
var EnvVars = []struct{ Name, Doc string }{
	{"HF_ENDPOINT", "Hub base URL (default " + DefaultEndpoint + ")"},
	{"HF_HOME", "Hugging Face home (default $XDG_CACHE_HOME/huggingface or ~/.cache/huggingface)"},
	{"HF_HUB_CACHE", "download cache (default $HF_HOME/hub)"},
	{"HF_TOKEN", "access token (alias HUGGING_FACE_HUB_TOKEN); else read from HF_TOKEN_PATH"},
	{"HF_TOKEN_PATH", "token file (default $HF_HOME/token)"},
}

// Endpoint returns HF_ENDPOINT without trailing slashes, or DefaultEndpoint.
func Endpoint() string {
	if e := strings.TrimRight(strings.TrimSpace(os.Getenv("HF_ENDPOINT")), "/"); e != "" {
		return e
	}
	return DefaultEndpoint
}

// Home returns HF_HOME, else $XDG_CACHE_HOME/huggingface, else
// ~/.cache/huggingface.
func Home() string {
	if h := os.Getenv("HF_HOME"); h != "" {
		return h
	}
	if x := os.Getenv("XDG_CACHE_HOME"); x != "" {
		return filepath.Join(x, "huggingface")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		home = os.TempDir()
	}
	return filepath.Join(home, ".cache", "huggingface")
}

// CacheDir returns HF_HUB_CACHE, else $HF_HOME/hub.
func CacheDir() string {
	if c := os.Getenv("HF_HUB_CACHE"); c != "" {
		return c
	}
	return filepath.Join(Home(), "hub")
}

// Token returns HF_TOKEN (or HUGGING_FACE_HUB_TOKEN), else the first line of
// the token file HF_TOKEN_PATH (default $HF_HOME/token), else "".
func Token() string {
	for _, k := range []string{"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"} {
		if t := strings.TrimSpace(os.Getenv(k)); t != "" {
			return t
		}
	}
	p := os.Getenv("HF_TOKEN_PATH")
	if p == "" {
		p = filepath.Join(Home(), "token")
	}
	b, err := os.ReadFile(p)
	if err != nil || len(b) > 4096 {
		return ""
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return strings.TrimSpace(line)
}

// ValidateRepoID checks an "org/name" model id: two non-empty segments of
// letters, digits, '-', '_' and '.', not starting with '.' or '-', at most 96
// characters per segment (the Hub's limit).
func ValidateRepoID(repo string) error {
	ns, name, ok := strings.Cut(repo, "/")
	if !ok || strings.Contains(name, "/") {
		return fmt.Errorf("hfhub: repo id %q: want namespace/name", repo)
	}
	for _, seg := range []string{ns, name} {
		if seg == "" || len(seg) > 96 || seg[0] == '.' || seg[0] == '-' || strings.Contains(seg, "..") {
			return fmt.Errorf("hfhub: repo id %q: bad segment %q", repo, seg)
		}
		for _, r := range seg {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
				return fmt.Errorf("hfhub: repo id %q: character %q not allowed", repo, r)
			}
		}
	}
	return nil
}

// ValidatePath checks a file path inside a repo: relative, slash-separated,
// no empty, "." or ".." segments, no NUL.
func ValidatePath(p string) error {
	if p == "" || strings.HasPrefix(p, "/") || strings.ContainsRune(p, 0) || strings.Contains(p, "\\") {
		return fmt.Errorf("hfhub: file path %q: want a relative slash-separated path", p)
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("hfhub: file path %q: bad segment %q", p, seg)
		}
	}
	return nil
}

// EscapePath escapes each segment of a repo file path for use in a URL.
func EscapePath(p string) string {
	segs := strings.Split(p, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return strings.Join(segs, "/")
}

// ResolveURL builds {endpoint}/{repo}/resolve/{revision}/{file} for a model
// repo. The revision is escaped whole ("refs/pr/1" → "refs%2Fpr%2F1", as
// huggingface_hub quote(revision, safe="")), the file per segment.
func ResolveURL(endpoint, repo, revision, file string) string {
	if revision == "" {
		revision = "main"
	}
	return strings.TrimRight(endpoint, "/") + "/" + repo + "/resolve/" + url.PathEscape(revision) + "/" + EscapePath(file)
}

// RepoFolderName is the cache folder of a model repo: "models--org--name".
func RepoFolderName(repo string) string {
	return "models--" + strings.ReplaceAll(repo, "/", "--")
}

// Ref names one file of a model repo: hf://org/name[@revision]/path/to/file.
type Ref struct {
	Repo, Revision, File string
}

// ParseRef parses "hf://org/name/file.gguf" or "hf://org/name@rev/dir/file".
// The revision defaults to "main".
func ParseRef(s string) (Ref, error) {
	rest, ok := strings.CutPrefix(s, "hf://")
	if !ok {
		return Ref{}, fmt.Errorf("hfhub: %q: want hf://org/name[@revision]/file", s)
	}
	parts := strings.SplitN(rest, "/", 3)
	if len(parts) != 3 {
		return Ref{}, fmt.Errorf("hfhub: %q: want hf://org/name[@revision]/file", s)
	}
	name, rev, hasRev := strings.Cut(parts[1], "@")
	if !hasRev {
		rev = "main"
	} else if rev == "" {
		return Ref{}, fmt.Errorf("hfhub: %q: empty revision after @", s)
	}
	r := Ref{Repo: parts[0] + "/" + name, Revision: rev, File: parts[2]}
	if err := ValidateRepoID(r.Repo); err != nil {
		return Ref{}, err
	}
	if err := ValidatePath(r.File); err != nil {
		return Ref{}, err
	}
	return r, nil
}

// String formats the reference back to hf://org/name@rev/file.
func (r Ref) String() string {
	return "hf://" + r.Repo + "@" + r.Revision + "/" + r.File
}
