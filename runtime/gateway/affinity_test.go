package gateway

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

func chat(model string, msgs ...string) string {
	var parts []string
	for i := 0; i+1 < len(msgs); i += 2 {
		parts = append(parts, fmt.Sprintf(`{"role":%q,"content":%q}`, msgs[i], msgs[i+1]))
	}
	return fmt.Sprintf(`{"model":%q,"messages":[%s]}`, model, strings.Join(parts, ","))
}

func TestKeyOf(t *testing.T) {
	auto := AffinityOptions{}
	auto.defaults()
	sys := AffinityOptions{Mode: AffinitySystem}
	sys.defaults()
	pre := AffinityOptions{Mode: AffinityPrefix, KeyBytes: 16}
	pre.defaults()
	off := AffinityOptions{Mode: AffinityOff}
	off.defaults()
	const cc = "/v1/chat/completions"
	key := func(body, path string, o *AffinityOptions) (uint64, bool) {
		t.Helper()
		k, err := keyOf([]byte(body), path, o)
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		return k.key, k.ok
	}
	rubricA := chat("m", "system", "Rubric A: score fraud 1-5.", "user", "case one")
	rubricA2 := chat("m", "system", "Rubric A: score fraud 1-5.", "user", "a different case")
	rubricB := chat("m", "system", "Rubric B: score fraud 1-5.", "user", "case one")
	devA := chat("m", "developer", "Rubric A: score fraud 1-5.", "user", "case two")
	otherModel := chat("n", "system", "Rubric A: score fraud 1-5.", "user", "case one")
	a1, ok1 := key(rubricA, cc, &auto)
	a2, ok2 := key(rubricA2, cc, &auto)
	b1, _ := key(rubricB, cc, &auto)
	d1, _ := key(devA, cc, &auto)
	m1, _ := key(otherModel, cc, &auto)
	switch {
	case !ok1 || !ok2 || a1 == 0:
		t.Fatal("a request with a system message has no key")
	case a1 != a2:
		t.Error("the same system message with different cases gives different keys")
	case a1 == b1:
		t.Error("different system messages give the same key")
	case a1 != d1:
		t.Error("a developer message keys differently from the same system message")
	case a1 == m1:
		t.Error("the same rubric for another model gives the same key")
	}
	// Two system messages in a row both count; a system message after the first user message does not.
	two := chat("m", "system", "Rubric A: score fraud 1-5.", "system", "extra", "user", "x")
	if k, _ := key(two, cc, &auto); k == a1 {
		t.Error("a second leading system message is not part of the key")
	}
	late := chat("m", "user", "hello", "system", "Rubric A: score fraud 1-5.")
	if k, ok := key(late, cc, &sys); ok {
		t.Errorf("system mode keyed a conversation without a leading system message: %d", k)
	}
	// Without a system message, auto keys by the first KeyBytes of the conversation.
	u1, ok := key(chat("m", "user", strings.Repeat("x", 5000)+"tail one"), cc, &auto)
	u2, _ := key(chat("m", "user", strings.Repeat("x", 5000)+"tail two"), cc, &auto)
	u3, _ := key(chat("m", "user", strings.Repeat("y", 5000)), cc, &auto)
	if !ok || u1 != u2 || u1 == u3 {
		t.Errorf("prefix keys: %d %d %d", u1, u2, u3)
	}
	// Prefix mode ignores the system/user distinction beyond KeyBytes (16 here).
	p1, _ := key(chat("m", "system", "0123456789abcdef-one", "user", "a"), cc, &pre)
	p2, _ := key(chat("m", "system", "0123456789abcdef-two", "user", "b"), cc, &pre)
	if p1 != p2 {
		t.Error("prefix mode looked past KeyBytes")
	}
	// A content given as text parts keys like the same text as a string.
	parts := `{"model":"m","messages":[{"role":"system","content":[{"type":"text","text":"Rubric A: "},{"type":"text","text":"score fraud 1-5."}]},{"role":"user","content":"q"}]}`
	if k, _ := key(parts, cc, &auto); k != a1 {
		t.Error("text parts key differently from the same string")
	}
	// prompt_cache_key wins over the messages, whatever the mode.
	ck1, _ := key(`{"model":"m","prompt_cache_key":"tenant-7","messages":[{"role":"user","content":"a"}]}`, cc, &sys)
	ck2, _ := key(`{"model":"m","prompt_cache_key":"tenant-7","messages":[{"role":"system","content":"zzz"}]}`, cc, &auto)
	if ck1 == 0 || ck1 != ck2 {
		t.Errorf("prompt_cache_key keys %d %d", ck1, ck2)
	}
	if _, ok := key(rubricA, cc, &off); ok {
		t.Error("affinity off keyed a request")
	}
	// Completions: the first KeyBytes of the prompt, string or tokens.
	c1, ok := key(`{"model":"m","prompt":"`+strings.Repeat("r", 4096)+`case 1"}`, "/v1/completions", &auto)
	c2, _ := key(`{"model":"m","prompt":["`+strings.Repeat("r", 4096)+`case 2"]}`, "/v1/completions", &auto)
	t1, tok := key(`{"model":"m","prompt":[1,2,3]}`, "/v1/completions", &auto)
	if !ok || c1 != c2 || !tok || t1 == 0 {
		t.Errorf("completion keys %d %d %d", c1, c2, t1)
	}
	huge := chat("m", "system", strings.Repeat("r", MaxKeyedBody), "user", "x")
	for _, b := range []string{`{"model":"m","input":"x"}`, `not json`, `{"model":"m","messages":[]}`, `{"model":"m","prompt":""}`, huge} {
		for _, path := range []string{cc, "/v1/completions", "/v1/embeddings"} {
			if k, ok := key(b, path, &auto); ok {
				t.Errorf("%s %s keyed %d", path, b, k)
			}
		}
	}
}

func TestKeyOfRefusesBadCacheKeys(t *testing.T) {
	o := AffinityOptions{}
	o.defaults()
	for _, c := range []struct{ body, want string }{
		{`{"prompt_cache_key":"` + strings.Repeat("k", MaxCacheKeyBytes+1) + `","messages":[{"role":"user","content":"a"}]}`, "string too long: 1025 bytes, at most 1024"},
		{`{"prompt_cache_key":42,"messages":[{"role":"user","content":"a"}]}`, "must be a string"},
		{`{"prompt_cache_key":{"a":1},"prompt":"x"}`, "must be a string"},
	} {
		_, err := keyOf([]byte(c.body), "/v1/chat/completions", &o)
		if err == nil || err.Status != 400 || err.Param == nil || *err.Param != "prompt_cache_key" || !strings.Contains(err.Message, c.want) ||
			strings.Contains(err.Message, "\n") {
			t.Errorf("%.60s: %+v, want a one-line 400 on prompt_cache_key with %q", c.body, err, c.want)
		}
	}
	if k, err := keyOf([]byte(`{"prompt_cache_key":"`+strings.Repeat("k", MaxCacheKeyBytes)+`","prompt":"x"}`), "/v1/completions", &o); err != nil || !k.ok {
		t.Errorf("a 1024-byte key: ok %v, %v", k.ok, err)
	}
	// What a key covers: the system messages' bytes (the shared part), and the request's content in all.
	k, _ := keyOf([]byte(chat("m", "system", "0123456789", "system", "abc", "user", "hello")), "/v1/chat/completions", &o)
	if !k.ok || k.shared != 13 || k.total != 18 {
		t.Errorf("system key covers %d of %d bytes, want 13 of 18", k.shared, k.total)
	}
	k, _ = keyOf([]byte(chat("m", "user", strings.Repeat("x", 5000))), "/v1/chat/completions", &o)
	if !k.ok || k.shared != 4096-5 || k.total != 5000 {
		t.Errorf("prefix key covers %d of %d bytes, want %d of 5000", k.shared, k.total, 4096-5)
	}
}

// TestGatewayRefusesLongCacheKey: the client gets the 400 from the gateway; no replica sees the request.
func TestGatewayRefusesLongCacheKey(t *testing.T) {
	f := startFake(t, chatOnly(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"object":"chat.completion","choices":[{"message":{"content":"x"}}]}`))
	}))
	g, ts := newGateway(t, Options{}, Replica{URL: f.URL()})
	waitLive(t, g, 1)
	body := `{"model":"tiny","prompt_cache_key":"` + strings.Repeat("k", 2000) + `","messages":[{"role":"user","content":"hi"}]}`
	code, b, err := post(context.Background(), http.DefaultClient, ts.URL, "", body)
	if err != nil || code != 400 || !strings.Contains(string(b), `"param":"prompt_cache_key"`) {
		t.Fatalf("%d %s %v", code, b, err)
	}
	if f.hits.Load() != 0 {
		t.Fatalf("the replica saw %d requests", f.hits.Load())
	}
}

func TestParseUsage(t *testing.T) {
	for _, c := range []struct {
		name string
		body string
		want usage
	}{
		{"phonellm serve", `{"usage":{"prompt_tokens":7000,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":6300}},"timings":{"prompt_n":700,"prompt_ms":812.5,"cache_n":6300}}`,
			usage{known: true, prompt: 7000, cached: 6300, promptSec: 0.8125}},
		{"llama-server timings only", `{"choices":[],"timings":{"prompt_n":12,"cache_n":30,"prompt_ms":100}}`,
			usage{known: true, prompt: 42, cached: 30, promptSec: 0.1}},
		{"OpenAI usage without details", `{"usage":{"prompt_tokens":99}}`, usage{}},
		{"OpenAI usage with timings cache_n", `{"usage":{"prompt_tokens":50},"timings":{"prompt_n":10,"cache_n":40}}`,
			usage{known: true, prompt: 50, cached: 40}},
		{"llama-server /completion", `{"content":"x","tokens_evaluated":80,"tokens_cached":64,"timings":{"prompt_ms":5}}`,
			usage{known: true, prompt: 80, cached: 64, promptSec: 0.005}},
		{"cached above prompt", `{"usage":{"prompt_tokens":10,"prompt_tokens_details":{"cached_tokens":99}}}`,
			usage{known: true, prompt: 10, cached: 10}},
		{"negative", `{"usage":{"prompt_tokens":-1,"prompt_tokens_details":{"cached_tokens":0}}}`, usage{}},
		{"nothing", `{"object":"chat.completion"}`, usage{}},
		{"not json", `data: x`, usage{}},
	} {
		if got := parseUsage([]byte(c.body)); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
	if !(usage{known: true, prompt: 10, cached: 5}).hit() || (usage{known: true, prompt: 10, cached: 4}).hit() || (usage{prompt: 10, cached: 10}).hit() {
		t.Error("hit() is not 'reused at least half of a reported prompt'")
	}
}

// TestSSEUsage: the usage of a stream is collected whatever the read boundaries are: timings in the last
// chunk, usage in the usage chunk.
func TestSSEUsage(t *testing.T) {
	stream := "data: {\"choices\":[{\"delta\":{\"content\":\"RISK\"}}]}\n\n" +
		"data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}],\"timings\":{\"prompt_n\":700,\"cache_n\":6300,\"prompt_ms\":250}}\r\n\r\n" +
		"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7000,\"prompt_tokens_details\":{\"cached_tokens\":6300}}}\n\n" +
		"data: [DONE]\n\n"
	want := usage{known: true, prompt: 7000, cached: 6300, promptSec: 0.25}
	for _, step := range []int{1, 2, 7, 64, len(stream)} {
		var s sseUsage
		for i := 0; i < len(stream); i += step {
			s.write([]byte(stream[i:min(i+step, len(stream))]))
		}
		s.endLine()
		if s.u != want {
			t.Errorf("reads of %d bytes: %+v, want %+v", step, s.u, want)
		}
	}
	// A line longer than the bound is skipped, not accumulated without end.
	var s sseUsage
	s.write([]byte("data: {\"timings\":" + strings.Repeat(" ", maxUsageBody+10)))
	s.write([]byte("}\n"))
	if s.u.known || len(s.line) != 0 || cap(s.line) > 2*maxUsageBody {
		t.Errorf("oversized line: %+v, buffer %d", s.u, cap(s.line))
	}
}

func TestParseReplicaMetrics(t *testing.T) {
	text := `# HELP phonellm_gateway_replica_requests_total x
phonellm_gateway_replica_requests_total{replica="replica-0",code="200"} 12
phonellm_gateway_replica_requests_total{replica="replica-0",code="500"} 3
phonellm_gateway_replica_requests_total{replica="a \"quoted\" \\ name",code="200"} 2
phonellm_gateway_replica_cache_hits_total{replica="replica-0"} 10
phonellm_gateway_replica_cache_misses_total{replica="replica-0"} 2
phonellm_gateway_replica_prompt_tokens_total{replica="replica-0"} 84000
phonellm_gateway_replica_cached_tokens_total{replica="replica-0"} 63000
phonellm_gateway_replica_time_to_first_byte_seconds_bucket{replica="replica-0",le="0.5"} 4
phonellm_gateway_requests_total{code="200"} 14
garbage{replica="x"} notanumber
`
	m := ParseReplicaMetrics(strings.NewReader(text))
	r := m["replica-0"]
	if r.Requests != 12 || r.Hits != 10 || r.Misses != 2 || r.PromptTokens != 84000 || r.CachedTokens != 63000 {
		t.Errorf("replica-0: %+v", r)
	}
	if q := m[`a "quoted" \ name`]; q.Requests != 2 {
		t.Errorf("escaped name: %+v (all %v)", q, m)
	}
	if len(m) != 2 {
		t.Errorf("%d replicas: %v", len(m), m)
	}
}
