package jinja

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// longConversation is a fraud-review chat of about 7,000 tokens (28 kB of
// text: a long system prompt and 24 turns), the size the motivating user
// sends to Qwen3.5.
func longConversation() []map[string]any {
	sys := "You are a fraud reviewer for card transactions. Answer with exactly one line: RISK_LEVEL: N, N from 1 to 5.\n" +
		strings.Repeat("Rule: weigh the amount against the customer's history, the merchant category, the device and the country; new devices at night in another country are high risk. ", 25)
	msgs := []map[string]any{{"role": "system", "content": sys}}
	for i := 0; i < 12; i++ {
		msgs = append(msgs,
			map[string]any{"role": "user", "content": fmt.Sprintf("Transaction %d: %d EUR at merchant %d, category electronics, device fingerprint %x, IP country DE, card country FR, time 03:%02d. ", i, 100+i*37, i, i*7919, i) + strings.Repeat("History: 12 purchases this month, average 54 EUR, no chargebacks. ", 30)},
			map[string]any{"role": "assistant", "content": fmt.Sprintf("<think>\nAmount and hour are unusual for this customer.\n</think>\n\nRISK_LEVEL: %d", 1+i%5)})
	}
	return msgs
}

func qwen35Source(b *testing.B) string {
	src, err := os.ReadFile(filepath.Join("testdata", "templates", "Qwen3.5-4B.jinja"))
	if err != nil {
		b.Fatal(err)
	}
	return string(src)
}

// BenchmarkRenderQwen35 renders Qwen3.5's template (the one phonellm's users
// serve) on a 7,000-token conversation. (Commit 5cdb1ca ran it against
// ardanlabs/jinja, the engine this package replaced, in the same run.)
func BenchmarkRenderQwen35(b *testing.B) {
	src := qwen35Source(b)
	msgs := longConversation()
	b.Run("engine=phonellm", func(b *testing.B) {
		tmpl, err := Parse(src)
		if err != nil {
			b.Fatal(err)
		}
		mv, err := FromGo(msgs)
		if err != nil {
			b.Fatal(err)
		}
		vars := map[string]Value{"messages": mv, "add_generation_prompt": Bool(true), "tools": None()}
		out, err := tmpl.Render(context.Background(), vars, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.SetBytes(int64(len(out)))
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			if _, err := tmpl.Render(context.Background(), vars, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
}
