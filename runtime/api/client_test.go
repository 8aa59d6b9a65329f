package api

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/phonellm/phonellm/internal/testkit/oracle"

	"github.com/phonellm/phonellm/runtime/enginetest"
)

func TestOfficialOpenAIClient(t *testing.T) {
	dir := oracle.RequireModule(t, "PHONELLM_OPENAI_DIR", "openai/index.mjs")
	ts, _, _ := newServer(t, enginetest.Options{ContextLength: 1024, Reply: func(string) string { return "hello world" }}, Options{APIKey: "k"})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", filepath.Join("testdata", "openai_client.mjs"), dir, ts.URL+"/v1", "k")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("client: %v\n%s", err, stderr.String())
	}
	var got struct {
		Chat struct {
			Content, Finish, Object string
			Usage                   Usage
		}
		Stream struct {
			Content, Finish string
			Usage           *Usage
			Chunks          int
		}
		Stop       struct{ Content, Finish string }
		Completion struct{ Text, Finish string }
		Models     []string
		BadModel   *struct {
			Status            int
			Type, Code, Param string
		}
		TooLong *struct {
			Status     int
			Type, Code string
		}
		BadKey *struct {
			Status int
			Code   string
		}
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%s: %v", out, err)
	}
	switch {
	case got.Chat.Content != "hello world" || got.Chat.Finish != "stop" || got.Chat.Object != "chat.completion" ||
		got.Chat.Usage.CompletionTokens != 11 || got.Chat.Usage.TotalTokens != got.Chat.Usage.PromptTokens+11:
		t.Fatalf("chat %+v", got.Chat)
	case got.Stream.Content != "hello world" || got.Stream.Finish != "stop" || got.Stream.Usage == nil || got.Stream.Chunks < 13:
		t.Fatalf("stream %+v", got.Stream)
	case got.Stop.Content != "hel" || got.Stop.Finish != "stop":
		t.Fatalf("stop %+v", got.Stop)
	case got.Completion.Text != "hell" || got.Completion.Finish != "length":
		t.Fatalf("completion %+v", got.Completion)
	case len(got.Models) != 1 || got.Models[0] != "fake":
		t.Fatalf("models %v", got.Models)
	case got.BadModel == nil || got.BadModel.Status != 404 || got.BadModel.Code != "model_not_found" || got.BadModel.Param != "model":
		t.Fatalf("bad model %+v", got.BadModel)
	case got.TooLong == nil || got.TooLong.Status != 400 || got.TooLong.Code != "context_length_exceeded" || got.TooLong.Type != "invalid_request_error":
		t.Fatalf("too long %+v", got.TooLong)
	case got.BadKey == nil || got.BadKey.Status != 401 || got.BadKey.Code != "invalid_api_key":
		t.Fatalf("bad key %+v", got.BadKey)
	}
}
