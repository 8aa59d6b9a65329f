package gateway

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/phonellm/phonellm/runtime/api"
	"github.com/phonellm/phonellm/runtime/enginetest"
)

// The reviewer's contract (issue 18) through the gateway: the request
// fields that constrain the answer, ask for log-probabilities or offer
// tools reach the replica byte for byte (a phone's llama-server reads them
// itself), and the answers come back unchanged, streamed or not.

// outputRequests exercise every field of the contract.
var outputRequests = []string{
	`{"model":"tiny","messages":[{"role":"user","content":"risk?"}],"response_format":{"type":"json_schema","json_schema":{"name":"r","strict":true,"schema":{"type":"object","properties":{"risk_level":{"type":"integer","minimum":1,"maximum":5}},"required":["risk_level"]}}},"temperature":0}`,
	`{"model":"tiny","messages":[{"role":"user","content":"risk?"}],"choices":["RISK_LEVEL: 1","RISK_LEVEL: 2","RISK_LEVEL: 3","RISK_LEVEL: 4","RISK_LEVEL: 5"],"logprobs":true,"top_logprobs":5,"temperature":0}`,
	`{"model":"tiny","messages":[{"role":"user","content":"risk?"}],"grammar":"root ::= \"RISK_LEVEL: \" [1-5]","temperature":0,"logprobs":true}`,
	`{"model":"tiny","messages":[{"role":"user","content":"risk?"}],"tools":[{"type":"function","function":{"name":"score","parameters":{"type":"object","properties":{"level":{"type":"integer","minimum":1,"maximum":5},"why":{"type":"string","maxLength":8}},"required":["level","why"]}}}],"tool_choice":{"type":"function","function":{"name":"score"}},"temperature":0}`,
	`{"model":"tiny","messages":[{"role":"user","content":"risk?"},{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"score","arguments":"{\"level\":2,\"why\":\"x\"}"}}]},{"role":"tool","tool_call_id":"call_1","content":"ok"}],"tools":[{"type":"function","function":{"name":"score"}}],"temperature":0}`,
}

// TestContractPassesThrough: a recording replica sees each request body
// exactly as the client sent it, and the client gets the replica's answer
// exactly, streamed (event by event) or not.
func TestContractPassesThrough(t *testing.T) {
	var mu sync.Mutex
	var got [][]byte
	answer := `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"tiny","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_9","type":"function","function":{"name":"score","arguments":"{\"level\":4}"}}]},"logprobs":{"content":[{"token":"<tool_call>","logprob":-0.5,"bytes":[60],"top_logprobs":[{"token":"<tool_call>","logprob":-0.5,"bytes":[60]}]}],"refusal":null},"finish_reason":"tool_calls"}]}` + "\n"
	events := "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_9\",\"type\":\"function\",\"function\":{\"name\":\"score\",\"arguments\":\"\"}}]},\"logprobs\":{\"content\":[]},\"finish_reason\":null}]}\n\n" +
		"data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"level\\\":4}\"}}]},\"logprobs\":{\"content\":[{\"token\":\"4\",\"logprob\":-0.1,\"bytes\":[52],\"top_logprobs\":[]}]},\"finish_reason\":null}]}\n\n" +
		"data: {\"choices\":[{\"index\":0,\"delta\":{},\"logprobs\":null,\"finish_reason\":\"tool_calls\"}]}\n\ndata: [DONE]\n\n"
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"status":"ok","slots_idle":1,"slots_processing":0}`)
	})
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, b)
		mu.Unlock()
		if bytes.Contains(b, []byte(`"stream":true`)) {
			w.Header().Set("Content-Type", "text/event-stream")
			for _, ev := range strings.SplitAfter(events, "\n\n") {
				io.WriteString(w, ev)
				w.(http.Flusher).Flush()
			}
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, answer)
	})
	rep := startFake(t, mux)
	g, ts := newGateway(t, Options{}, Replica{URL: rep.URL()})
	waitLive(t, g, 1)
	for i, body := range outputRequests {
		for _, stream := range []bool{false, true} {
			b := body
			want := answer
			if stream {
				b = strings.TrimSuffix(body, "}") + `,"stream":true}`
				want = events
			}
			resp, err := http.Post(ts.URL+"/v1/chat/completions", "application/json", strings.NewReader(b))
			if err != nil {
				t.Fatal(err)
			}
			out, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || string(out) != want {
				t.Fatalf("request %d (stream %v): %d\n%s\nwant\n%s", i, stream, resp.StatusCode, out, want)
			}
			mu.Lock()
			last := got[len(got)-1]
			mu.Unlock()
			if string(last) != b {
				t.Fatalf("request %d reached the replica as\n%s\nnot\n%s", i, last, b)
			}
		}
	}
}

// TestContractThroughGateway: phonellm's API behind the gateway answers
// the contract's requests as it does directly (greedy, so the same).
func TestContractThroughGateway(t *testing.T) {
	tmpl, err := os.ReadFile("../../internal/jinja/testdata/templates/Qwen-Qwen3-0.6B.jinja")
	if err != nil {
		t.Fatal(err)
	}
	eo := enginetest.Options{ID: "tiny", ContextLength: 4096, ChatTemplate: string(tmpl), Reply: func(string) string { return "RISK_LEVEL: 3" }}
	rep := engineReplica(t, eo, api.Options{})
	g, ts := newGateway(t, Options{}, Replica{URL: rep.URL()})
	waitLive(t, g, 1)
	// The answer without what differs per response (ids, times, timings).
	strip := func(b []byte) any {
		var v map[string]any
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		delete(v, "id")
		delete(v, "created")
		delete(v, "timings")
		delete(v, "usage")
		for _, c := range v["choices"].([]any) {
			c := c.(map[string]any)
			for _, k := range []string{"message", "delta"} {
				m, _ := c[k].(map[string]any)
				calls, _ := m["tool_calls"].([]any)
				for _, tc := range calls {
					delete(tc.(map[string]any), "id")
				}
			}
		}
		return v
	}
	for i, body := range outputRequests {
		for _, stream := range []bool{false, true} {
			b := body
			if stream {
				b = strings.TrimSuffix(body, "}") + `,"stream":true}`
			}
			var answers [2][]any
			for j, base := range []string{rep.URL(), ts.URL} {
				resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(b))
				if err != nil {
					t.Fatal(err)
				}
				out, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					t.Fatalf("request %d via %s: %d %s", i, base, resp.StatusCode, out)
				}
				if !stream {
					answers[j] = []any{strip(out)}
					continue
				}
				for _, ev := range strings.Split(string(out), "\n\n") {
					if d, ok := strings.CutPrefix(ev, "data: "); ok && d != "[DONE]" {
						answers[j] = append(answers[j], strip([]byte(d)))
					}
				}
			}
			if !reflect.DeepEqual(answers[0], answers[1]) {
				t.Fatalf("request %d (stream %v): direct\n%v\nthrough the gateway\n%v", i, stream, answers[0], answers[1])
			}
		}
	}
}
