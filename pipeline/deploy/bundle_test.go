package deploy

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/phonellm/phonellm/pipeline"
)

func testPhoneConfig() PhoneConfig {
	spec := Spec{
		Name: "tiny", Replicas: 2, Ctx: 2048, Slots: 2,
		Model:     ModelRef{ID: "tester/tiny", URL: "https://huggingface.co/tester/tiny/resolve/main/tiny.gguf", Size: 1234, SHA256: strings.Repeat("ab", 32)},
		APIKeyEnv: "PHONELLM_API_KEY", HFTokenEnv: "HF_TOKEN",
	}
	return NewPhoneConfig(spec, "0.0.0-test")
}

func TestBundleDeterministic(t *testing.T) {
	dir := t.TempDir()
	cfg := testPhoneConfig()
	a, err := BuildBundle(context.Background(), BundleOptions{Out: filepath.Join(dir, "a.zip"), Name: "tiny", Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	b, err := BuildBundle(context.Background(), BundleOptions{Out: filepath.Join(dir, "b.zip"), Name: "tiny", Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	ab, _ := os.ReadFile(a.Path)
	bb, _ := os.ReadFile(b.Path)
	if !bytes.Equal(ab, bb) || a.SHA256 != b.SHA256 {
		t.Fatalf("two builds differ: %s vs %s", a.SHA256, b.SHA256)
	}
	s := sha256.Sum256(ab)
	if hex.EncodeToString(s[:]) != a.SHA256 || int64(len(ab)) != a.Size {
		t.Fatalf("BundleRef %+v does not describe the file (%d bytes)", a, len(ab))
	}
	// A different config gives a different bundle.
	cfg.Slots = 3
	c, err := BuildBundle(context.Background(), BundleOptions{Out: filepath.Join(dir, "c.zip"), Name: "tiny", Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	if c.SHA256 == a.SHA256 {
		t.Fatal("changing the config did not change the bundle")
	}

	zr, err := zip.NewReader(bytes.NewReader(ab), int64(len(ab)))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range zr.File {
		names = append(names, f.Name)
		if !f.Modified.Equal(zipTime) || f.Method != zip.Store {
			t.Errorf("%s: modified %v method %d, want %v stored", f.Name, f.Modified, f.Method, zipTime)
		}
	}
	if got := strings.Join(names, ","); got != "config.json,index.js,manifest.json" {
		t.Errorf("entries %s, want sorted config.json,index.js,manifest.json", got)
	}
	m, rc, err := ReadBundle(ab)
	if err != nil {
		t.Fatal(err)
	}
	if m.Entrypoint != "index.js" || m.Version != 1 || m.Name != "tiny" || m.RestartPolicy != "onFailure" || m.Phonellm.Version != "0.0.0-test" || len(m.Phonellm.Files) != 2 {
		t.Errorf("manifest %+v", m)
	}
	if rc.Model != cfg.Model || rc.Ctx != 2048 || rc.APIKeyEnv != "PHONELLM_API_KEY" || len(rc.Candidates) != len(DefaultCandidates) {
		t.Errorf("config read back %+v", rc)
	}
}

func TestReadBundleRejectsTampering(t *testing.T) {
	b, err := BundleBytes("tiny", testPhoneConfig())
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(b, []byte("phonellm phone entrypoint"))
	if i < 0 {
		t.Fatal("entrypoint text not found in the stored zip")
	}
	bad := bytes.Clone(b)
	bad[i] = 'P'
	if _, _, err := ReadBundle(bad); err == nil {
		t.Fatal("a modified entrypoint was accepted")
	}
}

func TestBundleNeverHoldsSecrets(t *testing.T) {
	const key, token = "sk-phonellm-SECRET-1234567890", "hf_SECRETtokenVALUE0987"
	t.Setenv("PHONELLM_API_KEY", key)
	t.Setenv("HF_TOKEN", token)
	b, err := BundleBytes("tiny", testPhoneConfig())
	if err != nil {
		t.Fatal(err)
	}
	if ContainsSecret(b, key, token) {
		t.Fatal("bundle contains a secret value")
	}
	if !bytes.Contains(b, []byte(`"api_key_env": "PHONELLM_API_KEY"`)) {
		t.Fatal("bundle does not name the API-key variable")
	}
	if !ContainsSecret([]byte("x"+hex.EncodeToString([]byte(key))), key) {
		t.Fatal("ContainsSecret misses a hex-encoded secret")
	}
}

func TestPhoneConfigValidate(t *testing.T) {
	for name, mut := range map[string]func(*PhoneConfig){
		"http url":        func(c *PhoneConfig) { c.Model.URL = "http://example.com/m.gguf" },
		"creds in url":    func(c *PhoneConfig) { c.Model.URL = "https://u:p@example.com/m.gguf" },
		"short sha":       func(c *PhoneConfig) { c.Model.SHA256 = "abc" },
		"zero size":       func(c *PhoneConfig) { c.Model.Size = 0 },
		"no candidates":   func(c *PhoneConfig) { c.Candidates = nil },
		"zero threads":    func(c *PhoneConfig) { c.Candidates = []Settings{{Threads: 0}} },
		"bad env name":    func(c *PhoneConfig) { c.APIKeyEnv = "sk-live-123" },
		"bad listen":      func(c *PhoneConfig) { c.Listen = "127.0.0.1:99999" },
		"no tunnel relay": func(c *PhoneConfig) { c.Tunnel.ServerAddrs = nil },
	} {
		c := testPhoneConfig()
		mut(&c)
		if _, err := BundleBytes("tiny", c); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	c := testPhoneConfig()
	c.Model.URL = "http://127.0.0.1:9/m.gguf"
	if err := c.Validate(); err != nil {
		t.Errorf("loopback http refused: %v", err)
	}
}

// craftBundle zips files with a manifest that lists them with their true sizes and hashes, so that a test
// can make any one field hostile while every integrity check still passes.
func craftBundle(t testing.TB, name, entrypoint string, files map[string][]byte) []byte {
	t.Helper()
	m := Manifest{Name: name, Version: 1, Entrypoint: entrypoint, RestartPolicy: "onFailure"}
	var names []string
	for p := range files {
		names = append(names, p)
	}
	slices.Sort(names)
	for _, p := range names {
		s := sha256.Sum256(files[p])
		m.Phonellm.Files = append(m.Phonellm.Files, ManifestFile{Path: p, Size: int64(len(files[p])), SHA256: hex.EncodeToString(s[:])})
	}
	mj, _ := json.Marshal(m)
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, p := range append(names, "manifest.json") {
		w, err := zw.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		if p == "manifest.json" {
			w.Write(mj)
		} else {
			w.Write(files[p])
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestReadBundleRejectsPaths is issue 14's bundle item: every name that becomes a path on the phone or where
// the bundle is unpacked must be a plain file name. model.file of "../../../../x.gguf" was accepted before.
func TestReadBundleRejectsPaths(t *testing.T) {
	entry := []byte("// entrypoint")
	config := func(file string) []byte {
		c := testPhoneConfig()
		c.Model.File = file
		b, _ := json.Marshal(c)
		return b
	}
	good := craftBundle(t, "tiny", "index.js", map[string][]byte{"index.js": entry, "config.json": config("model.gguf")})
	if _, c, err := ReadBundle(good); err != nil || c.Model.File != "model.gguf" {
		t.Fatalf("a well-formed crafted bundle: %v", err)
	}
	for name, b := range map[string][]byte{
		"model.file ..":        craftBundle(t, "tiny", "index.js", map[string][]byte{"index.js": entry, "config.json": config("../../../../x.gguf")}),
		"model.file absolute":  craftBundle(t, "tiny", "index.js", map[string][]byte{"index.js": entry, "config.json": config("/etc/passwd")}),
		"model.file separator": craftBundle(t, "tiny", "index.js", map[string][]byte{"index.js": entry, "config.json": config("sub/model.gguf")}),
		"model.file backslash": craftBundle(t, "tiny", "index.js", map[string][]byte{"index.js": entry, "config.json": config(`..\model.gguf`)}),
		"model.file dotdot":    craftBundle(t, "tiny", "index.js", map[string][]byte{"index.js": entry, "config.json": config("..")}),
		"model.file hidden":    craftBundle(t, "tiny", "index.js", map[string][]byte{"index.js": entry, "config.json": config(".bashrc")}),
		"entry with folder":    craftBundle(t, "tiny", "index.js", map[string][]byte{"index.js": entry, "config.json": config(""), "../evil.js": entry}),
		"entrypoint path":      craftBundle(t, "tiny", "../index.js", map[string][]byte{"index.js": entry, "config.json": config("")}),
		"name with separator":  craftBundle(t, "../tiny", "index.js", map[string][]byte{"index.js": entry, "config.json": config("")}),
	} {
		_, _, err := ReadBundle(b)
		var be *BundleError
		var se *SpecError
		if err == nil || !(errors.As(err, &be) || errors.As(err, &se)) || !pipeline.IsInputError(err) {
			t.Errorf("%s: accepted or unclassified: %v", name, err)
		}
	}
	// The builder refuses such a config before writing anything.
	c := testPhoneConfig()
	c.Model.File = "../x.gguf"
	if _, err := BundleBytes("tiny", c); err == nil || !strings.Contains(err.Error(), "plain file name") {
		t.Errorf("BundleBytes with model.file ../x.gguf: %v", err)
	}
}

func TestValidFileName(t *testing.T) {
	for s, want := range map[string]bool{"model.gguf": true, "model-abc_1.gguf": true, "Q": true, "": false, ".": false,
		"..": false, "a..b": false, ".hidden": false, "a/b": false, `a\b`: false, "a b": false, "a\x00b": false,
		strings.Repeat("a", 200): true, strings.Repeat("a", 201): false} {
		if got := ValidFileName(s); got != want {
			t.Errorf("ValidFileName(%q) = %v, want %v", s, got, want)
		}
	}
}

func FuzzReadBundle(f *testing.F) {
	b, _ := BundleBytes("tiny", testPhoneConfig())
	f.Add(b)
	f.Add([]byte("PK\x03\x04"))
	cfg, _ := json.Marshal(testPhoneConfig())
	f.Add(craftBundle(f, "tiny", "index.js", map[string][]byte{"index.js": []byte("x"), "config.json": cfg, "../up.js": []byte("y")}))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, c, err := ReadBundle(data)
		if err != nil {
			return
		}
		// Whatever is accepted names only plain files.
		if !ValidFileName(m.Entrypoint) || (c.Model.File != "" && !ValidFileName(c.Model.File)) {
			t.Fatalf("accepted entrypoint %q, model.file %q", m.Entrypoint, c.Model.File)
		}
		for _, f := range m.Phonellm.Files {
			if !ValidFileName(f.Path) {
				t.Fatalf("accepted manifest path %q", f.Path)
			}
		}
	})
}
