package httpx

import (
	"errors"
	"net/http"
	"strings"
	"testing"
)

func TestKeys(t *testing.T) {
	for _, bad := range []string{"", "  ", "key\n", " key"} {
		if _, err := NewKeys("good-key", bad); err == nil {
			t.Errorf("NewKeys accepted %q", bad)
		}
	}
	k, err := NewKeys("alpha-key", "beta-key")
	if err != nil {
		t.Fatal(err)
	}
	req := func(h string) *http.Request {
		r, _ := http.NewRequest("GET", "http://x/", nil)
		if h != "" {
			r.Header.Set("Authorization", h)
		}
		return r
	}
	for h, want := range map[string]int{
		"Bearer alpha-key": 0, "bearer beta-key": 1, "BEARER  beta-key ": 1, "Bearer alpha-ke": -1,
		"Bearer alpha-key2": -1, "alpha-key": -1, "Basic alpha-key": -1, "": -1, "Bearer ": -1,
	} {
		if got := k.Match(req(h)); got != want {
			t.Errorf("Match(%q) = %d, want %d", h, got, want)
		}
	}
	var none *Keys
	if none.Enabled() || none.Authorized(req("Bearer x")) {
		t.Error("nil Keys authorizes")
	}
	empty, _ := NewKeys()
	if empty.Enabled() || empty.Authorized(req("Bearer ")) {
		t.Error("empty Keys authorizes")
	}
}

func TestAPIKeyFromEnvFailsClosed(t *testing.T) {
	t.Setenv("PHONELLM_TEST_KEY_EMPTY", "")
	t.Setenv("PHONELLM_TEST_KEY_SPACES", " \t")
	t.Setenv("PHONELLM_TEST_KEY_PADDED", "k3y\n")
	t.Setenv("PHONELLM_TEST_KEY_OK", "s3cret")
	for name, want := range map[string]string{
		"PHONELLM_TEST_KEY_UNSET":  "PHONELLM_TEST_KEY_UNSET is not set",
		"PHONELLM_TEST_KEY_EMPTY":  "PHONELLM_TEST_KEY_EMPTY is empty",
		"PHONELLM_TEST_KEY_SPACES": "PHONELLM_TEST_KEY_SPACES is empty",
		"PHONELLM_TEST_KEY_PADDED": "PHONELLM_TEST_KEY_PADDED has leading or trailing whitespace",
		"":                         "name is empty",
	} {
		key, err := APIKeyFromEnv(name)
		var ke *KeyEnvError
		if key != "" || !errors.As(err, &ke) || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%q: key %q, err %v; want an error containing %q", name, key, err, want)
		}
	}
	if key, err := APIKeyFromEnv("PHONELLM_TEST_KEY_OK"); err != nil || key != "s3cret" {
		t.Errorf("set variable: %q %v", key, err)
	}
}
