package httpx

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// SameOrigin reports whether a and b are the same origin (RFC 6454): same scheme, same host (compared
// case-insensitively, a trailing dot ignored) and same port, the scheme's default port made explicit. This,
// not net/http's host-name rule, decides whether credentials may go to b: net/http forwards Authorization to
// another port of the same host and to any subdomain.
func SameOrigin(a, b *url.URL) bool {
	if a == nil || b == nil {
		return false
	}
	sa, sb := strings.ToLower(a.Scheme), strings.ToLower(b.Scheme)
	if sa != sb || sa == "" {
		return false
	}
	ha, hb := canonicalHost(a.Hostname()), canonicalHost(b.Hostname())
	return ha != "" && ha == hb && port(a) == port(b)
}

func canonicalHost(h string) string {
	return strings.TrimSuffix(strings.ToLower(h), ".")
}

func port(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	switch strings.ToLower(u.Scheme) {
	case "http":
		return "80"
	case "https":
		return "443"
	}
	return ""
}

// SameOriginString is SameOrigin for URL strings; unparsable URLs are never the same origin.
func SameOriginString(a, b string) bool {
	ua, err1 := url.Parse(a)
	ub, err2 := url.Parse(b)
	return err1 == nil && err2 == nil && SameOrigin(ua, ub)
}

// MaxRedirects is how many redirects CheckRedirect follows (net/http's default).
const MaxRedirects = 10

// credentialHeaders are dropped when a redirect leaves the first request's origin. Referer goes too: it
// would tell the other origin the URL (query included) that was being fetched.
var credentialHeaders = []string{"Authorization", "Proxy-Authorization", "Cookie", "Referer"}

// CheckRedirect is the redirect policy of every client that sends credentials (the Hub clients): it follows
// at most MaxRedirects redirects, and once the chain has left the origin of the first request (another
// scheme, host or port, see SameOrigin) it drops the credentials for the rest of the chain, even if a later
// hop comes back. Use it as http.Client.CheckRedirect; it relies on net/http calling it after copying the
// first request's headers onto the next one.
func CheckRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= MaxRedirects {
		return fmt.Errorf("stopped after %d redirects", MaxRedirects)
	}
	if len(via) == 0 {
		return nil
	}
	origin := via[0].URL
	left := !SameOrigin(req.URL, origin)
	for _, v := range via[1:] {
		left = left || !SameOrigin(v.URL, origin)
	}
	if left {
		for _, h := range credentialHeaders {
			req.Header.Del(h)
		}
	}
	return nil
}

// WithRedirectPolicy returns a copy of c (http.DefaultClient when nil) that follows redirects with
// CheckRedirect. Other fields (Transport, Jar, Timeout) are kept.
func WithRedirectPolicy(c *http.Client) *http.Client {
	if c == nil {
		c = http.DefaultClient
	}
	cl := *c
	cl.CheckRedirect = CheckRedirect
	return &cl
}

// WithoutRedirects returns a copy of c (http.DefaultClient when nil) that hands every redirect back to the
// caller (http.ErrUseLastResponse), for callers that decide per hop, and without an overall timeout.
func WithoutRedirects(c *http.Client) *http.Client {
	if c == nil {
		c = http.DefaultClient
	}
	cl := *c
	cl.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	cl.Timeout = 0
	return &cl
}
