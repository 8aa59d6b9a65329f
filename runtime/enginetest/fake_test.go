package enginetest

import (
	"context"
	"testing"
	"time"

	"github.com/phonellm/phonellm/runtime/engine"
)

func TestFakeConformance(t *testing.T) {
	Run(t, NewFake(Options{Parallel: 3, ContextLength: 256}), Features{})
}

func TestFakeReplyAndDelays(t *testing.T) {
	f := NewFake(Options{Reply: func(string) string { return "RISK_LEVEL: 5" }, PromptDelay: time.Millisecond})
	p, _ := f.ApplyChatTemplate(context.Background(), []engine.Message{{Role: "user", Content: "tx"}}, engine.TemplateOptions{AddGenerationPrompt: true})
	r, err := f.Generate(context.Background(), engine.Request{Prompt: p}, nil)
	if err != nil || r.Text != "RISK_LEVEL: 5" || r.FinishReason != engine.FinishStop {
		t.Fatalf("%+v %v", r, err)
	}
	if r.Timings.PromptDuration < time.Duration(r.Timings.PromptTokens)*time.Millisecond {
		t.Fatalf("prompt took %v for %d tokens at 1ms each", r.Timings.PromptDuration, r.Timings.PromptTokens)
	}
	r2, _ := f.Generate(context.Background(), engine.Request{Prompt: p}, nil)
	if r2.Timings.CachedTokens != r.Timings.PromptTokens-1 || r2.Text != r.Text {
		t.Fatalf("repeat: cached %d of %d, text %q", r2.Timings.CachedTokens, r.Timings.PromptTokens, r2.Text)
	}
}
