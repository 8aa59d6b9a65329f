package api

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

// parseChunks feeds text cut at the given offsets.
func parseChunks(text string, cuts []int, strs map[string]map[string]bool) parsed {
	var out parsed
	p := newToolParser(strs)
	prev := 0
	for _, c := range cuts {
		collect(p.Push(text[prev:c]), &out)
		prev = c
	}
	collect(p.Push(text[prev:]), &out)
	collect(p.Finish(), &out)
	return out
}

var weatherStrings = map[string]map[string]bool{"get_weather": {"city": true, "unit": true}}

func TestToolParser(t *testing.T) {
	call := func(name, args string) [2]string { return [2]string{name, args} }
	for _, c := range []struct {
		name, text string
		want       parsed
	}{
		{"plain text is unchanged", "Hello, <b>world</b>  \n\n", parsed{Content: "Hello, <b>world</b>  \n\n"}},
		{"a tag prefix at the end stays text", "a <tool_cal", parsed{Content: "a <tool_cal"}},
		{"json", "Sure.\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": [1, 2]}}\n</tool_call>",
			parsed{Content: "Sure.", Calls: [][2]string{call("get_weather", `{"city":"Paris","days":[1,2]}`)}}},
		{"json parallel", "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": \"b\", \"arguments\": {\"x\": \"}{\\\"\"}}\n</tool_call>\n",
			parsed{Calls: [][2]string{call("a", `{}`), call("b", `{"x":"}{\""}`)}}},
		{"json scalar and string arguments", "<tool_call>{\"name\":\"a\",\"arguments\":12}</tool_call><tool_call>{\"name\":\"b\",\"arguments\":\"x y\"}</tool_call>",
			parsed{Calls: [][2]string{call("a", `12`), call("b", `"x y"`)}}},
		{"json arguments before name", "<tool_call>\n{\"arguments\": {\"a\": 1}, \"name\": \"f\"}\n</tool_call>",
			parsed{Calls: [][2]string{call("f", `{"a":1}`)}}},
		{"text after a call", "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>\n  done \n",
			parsed{Content: "done \n", Calls: [][2]string{call("f", `{}`)}}},
		{"unreadable call stays text", "x <tool_call>not a call</tool_call> y",
			parsed{Content: "x<tool_call>not a call</tool_call> y"}},
		{"cut before the name", "ok <tool_call>\n{\"name\": \"get_wea", parsed{Content: "ok<tool_call>\n{\"name\": \"get_wea"}},
		{"cut in the arguments", "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": [1, ", parsed{Calls: [][2]string{call("f", `{"a":[1,`)}}},
		{"xml", "Let me check.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nNew York\n</parameter>\n<parameter=days>\n3\n</parameter>\n<parameter=unit>\n42\n</parameter>\n</function>\n</tool_call>",
			parsed{Content: "Let me check.", Calls: [][2]string{call("get_weather", `{"city":"New York","days":3,"unit":"42"}`)}}},
		{"xml parallel, no parameters, json values", "<tool_call>\n<function=now>\n</function>\n</tool_call>\n<tool_call>\n<function=f>\n<parameter=o>\n{\"a\": [1, 2]}\n</parameter>\n<parameter=s>\nnot json\n</parameter>\n</function>\n</tool_call>",
			parsed{Calls: [][2]string{call("now", `{}`), call("f", `{"o":{"a":[1,2]},"s":"not json"}`)}}},
		{"xml without </function>", "<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</tool_call>",
			parsed{Calls: [][2]string{call("f", `{"a":1}`)}}},
		{"cut in an xml parameter", "<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n<parameter=b>\nxx",
			parsed{Calls: [][2]string{call("f", `{"a":1`)}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := parseChunks(c.text, nil, weatherStrings)
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("got  %q\nwant %q", got, c.want)
			}
			// Every cut point, and random three-way cuts, give the same.
			for i := range len(c.text) {
				if g := parseChunks(c.text, []int{i}, weatherStrings); !reflect.DeepEqual(g, got) {
					t.Fatalf("cut at %d: %q, whole: %q", i, g, got)
				}
			}
			rng := rand.New(rand.NewPCG(1, 2))
			for range 200 {
				a, b := rng.IntN(len(c.text)+1), rng.IntN(len(c.text)+1)
				cuts := []int{min(a, b), max(a, b)}
				if g := parseChunks(c.text, cuts, weatherStrings); !reflect.DeepEqual(g, got) {
					t.Fatalf("cuts %v: %q, whole: %q", cuts, g, got)
				}
			}
			for _, call := range got.Calls {
				if strings.HasPrefix(c.name, "cut") {
					continue
				}
				if !json.Valid([]byte(call[1])) {
					t.Fatalf("arguments %q are not JSON", call[1])
				}
			}
		})
	}
}

func FuzzToolParser(f *testing.F) {
	f.Add("Sure.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>", 7, 40)
	f.Add("<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</function>\n</tool_call> x", 3, 30)
	f.Add("<tool_call>{\"arguments\":{},\"name\":\"x\"}</tool_call><tool_call>junk", 0, 12)
	f.Fuzz(func(t *testing.T, text string, a, b int) {
		if len(text) > 4096 {
			return
		}
		whole := parseChunks(text, nil, weatherStrings)
		n := len(text) + 1
		a, b = ((a%n)+n)%n, ((b%n)+n)%n
		cut := parseChunks(text, []int{min(a, b), max(a, b)}, weatherStrings)
		if !reflect.DeepEqual(whole, cut) {
			t.Fatalf("%q cut at %d,%d: %q, whole %q", text, min(a, b), max(a, b), cut, whole)
		}
		if len(whole.Calls) == 0 && whole.Content != text && !strings.Contains(text, tagOpen) {
			t.Fatalf("%q without calls came back as %q", text, whole.Content)
		}
	})
}

// TestToolParserBounds: a head longer than maxHead is read whole at its
// closing tag (not re-read as it streams), the same whether it arrives
// whole or in pieces, and long white space does not accumulate.
func TestToolParserBounds(t *testing.T) {
	long := "<tool_call>{\"name\": \"" + strings.Repeat("n", maxHead) + "\", \"arguments\": {}}</tool_call>"
	whole := parseChunks(long, nil, nil)
	if len(whole.Calls) != 1 || whole.Calls[0][1] != "{}" {
		t.Fatalf("a %d-byte head: %+v", len(long), whole.Calls)
	}
	for _, cut := range []int{30, maxHead / 2, maxHead + 20} {
		if got := parseChunks(long, []int{cut}, nil); !reflect.DeepEqual(got, whole) {
			t.Fatalf("cut at %d: %d calls", cut, len(got.Calls))
		}
	}
	p := newToolParser(nil)
	p.Push(tagOpen)
	for range 10000 {
		p.Push(" ")
	}
	if len(p.buf) != 0 {
		t.Fatalf("%d bytes of white space held in the buffer", len(p.buf))
	}
}
