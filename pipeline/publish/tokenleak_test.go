package publish

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/phonellm/phonellm/internal/retry"
	"github.com/phonellm/phonellm/pipeline/hfhub"
	"github.com/phonellm/phonellm/pipeline/publish/hubtest"
)

// loopbackHTTP is an HTTP client whose dialer sends every host name to 127.0.0.1 (keeping the port), so the
// fake Hub's listeners can have distinct names: hub.test for the API, a subdomain of it, or hub.test on
// another port, as a real Hub, CDN or attacker would.
func loopbackHTTP() *http.Client {
	d := &net.Dialer{Timeout: 5 * time.Second}
	return &http.Client{Transport: &http.Transport{Proxy: nil,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			_, port, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			return d.DialContext(ctx, network, net.JoinHostPort("127.0.0.1", port))
		}}}
}

// withHost replaces the host name of rawURL, keeping its port.
func withHost(rawURL, host string) string {
	u, _ := url.Parse(rawURL)
	u.Host = net.JoinHostPort(host, u.Port())
	return u.String()
}

func port(rawURL string) string {
	u, _ := url.Parse(rawURL)
	return u.Port()
}

// checkNoLeak fails when a request carrying Authorization reached anything but the Hub's API origin, and
// returns how many requests the other origin (AltURL's port) received.
func checkNoLeak(t *testing.T, h *hubtest.Hub, what string) int {
	t.Helper()
	apiPort, altPort := port(h.URL), port(h.AltURL)
	elsewhere := 0
	for _, r := range h.Requests() {
		if r.Port == altPort {
			elsewhere++
		}
		if r.Auth && (r.Port != apiPort || r.Host != "hub.test:"+apiPort) {
			t.Errorf("%s: the token reached %s (port %s) on %s %s %s", what, r.Host, r.Port, r.Op, r.Method, r.Path)
		}
	}
	return elsewhere
}

// TestPublishTokenNeverLeavesTheHubOrigin is issue 14's token-leak acceptance for uploads: a Hub answer that
// redirects an authenticated call (307/308 keep the method and body) to another port of the same host or to
// a subdomain used to carry Authorization: Bearer hf_… along (net/http compares host names only). Every call
// of a publish is redirected in turn; the other origin must never see the token, and a redirect within the
// Hub's own origin keeps working.
func TestPublishTokenNeverLeavesTheHubOrigin(t *testing.T) {
	ops := []hubtest.Op{hubtest.OpWhoAmI, hubtest.OpCreate, hubtest.OpRevision, hubtest.OpPreupload,
		hubtest.OpBatch, hubtest.OpVerify, hubtest.OpCommit}
	targets := []struct {
		name   string
		status int
		to     func(h *hubtest.Hub) string
	}{
		{"same origin", 307, func(h *hubtest.Hub) string { return h.URL }},
		{"other port", 307, func(h *hubtest.Hub) string { return h.AltURL }},
		{"subdomain", 308, func(h *hubtest.Hub) string { return withHost(h.AltURL, "evil.hub.test") }},
		{"other host", 307, func(h *hubtest.Hub) string { return withHost(h.AltURL, "elsewhere.test") }},
	}
	for _, op := range ops {
		for _, tg := range targets {
			what := fmt.Sprintf("%s redirected to %s", op, tg.name)
			cfg := smallHub
			cfg.APIHost, cfg.StorageHost = "hub.test", "cdn.hub.test"
			h := hubtest.Start(t, cfg)
			h.Inject(hubtest.Fault{Op: op, Kind: hubtest.FaultRedirect, Status: tg.status, Location: tg.to(h)})
			model, _ := writeRandom(t, t.TempDir(), "m-Q4_K_M.gguf", 300<<10, 9)
			opts := testOptions(h, t.TempDir(), File{Local: model})
			opts.Repo = "fraud-GGUF" // no namespace: the publish asks whoami first
			opts.HTTPClient = loopbackHTTP()
			opts.Retry = retry.Policy{Attempts: 1}
			_, err := Run(context.Background(), opts, nil)
			if h.PendingFaults() != 0 {
				t.Errorf("%s: the publish never made that call", what)
				continue
			}
			elsewhere := checkNoLeak(t, h, what)
			switch tg.name {
			case "same origin":
				if err != nil {
					t.Errorf("%s: %v", what, err)
				}
			case "other port":
				if elsewhere == 0 {
					t.Errorf("%s: the redirect was not followed, so the test showed nothing", what)
				}
			}
		}
	}
}

// TestDownloadTokenNeverLeavesTheHubOrigin is the download half: storage on another port of the Hub's host
// or on a subdomain of it (net/http would forward the token to both), and Hub answers redirected to another
// origin, for public and private repos. Downloads succeed where they can, and no request that reached
// anything but the Hub's API origin carried the token.
func TestDownloadTokenNeverLeavesTheHubOrigin(t *testing.T) {
	for _, storage := range []string{"hub.test", "cdn.hub.test"} {
		for _, redirect := range []hubtest.Op{"", hubtest.OpRevision, hubtest.OpTree, hubtest.OpResolve} {
			for _, private := range []bool{false, true} {
				what := fmt.Sprintf("storage %s, %q redirected, private %v", storage, redirect, private)
				cfg := smallHub
				cfg.APIHost, cfg.StorageHost = "hub.test", storage
				h := hubtest.Start(t, cfg)
				model := make([]byte, 200<<10)
				if _, err := h.Seed("tester/m", "main", map[string][]byte{"m-Q4_K_M.gguf": model, "README.md": []byte("# m\n")}); err != nil {
					t.Fatal(err)
				}
				h.SetPrivate("tester/m", private)
				if redirect != "" {
					h.Inject(hubtest.Fault{Op: redirect, Kind: hubtest.FaultRedirect, Location: withHost(h.AltURL, "evil.hub.test")})
				}
				c := &hfhub.Client{Endpoint: h.URL, Token: h.Token(), CacheDir: t.TempDir(), HTTP: loopbackHTTP(),
					Retry: retry.Policy{Attempts: 1}, RequestTimeout: 5 * time.Second}
				_, files, err := c.Snapshot(context.Background(), "tester/m", "main", func(string) bool { return true }, nil)
				checkNoLeak(t, h, what)
				// Without a redirect, or with public metadata served by the other origin, the download
				// completes (.gitattributes, README.md and the model); otherwise it fails rather than send
				// the token.
				served := redirect == "" || (redirect == hubtest.OpTree || redirect == hubtest.OpRevision) && !private
				if served && (err != nil || len(files) != 3) {
					t.Errorf("%s: %d files, %v", what, len(files), err)
				}
				if redirect == hubtest.OpResolve && err == nil {
					t.Errorf("%s: a resolve answered by a bare redirect to another origin was accepted", what)
				}
				for _, f := range files {
					if b, _ := os.ReadFile(f.Path); f.Info.Path == "m-Q4_K_M.gguf" && len(b) != len(model) {
						t.Errorf("%s: model has %d bytes", what, len(b))
					}
				}
				if err != nil && strings.Contains(err.Error(), h.Token()) {
					t.Errorf("%s: the error names the token: %v", what, err)
				}
			}
		}
	}
}
