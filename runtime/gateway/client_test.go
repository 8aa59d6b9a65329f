package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/phonellm/phonellm/internal/testkit/oracle"

	"github.com/phonellm/phonellm/runtime/api"
	"github.com/phonellm/phonellm/runtime/enginetest"
)

// TestOfficialOpenAIClient: the official client works through the gateway unchanged, streaming included,
// over two replicas running phonellm's API server.
func TestOfficialOpenAIClient(t *testing.T) {
	dir := oracle.RequireModule(t, "PHONELLM_OPENAI_DIR", "openai/index.mjs")
	eo := enginetest.Options{ID: "tiny", Reply: func(string) string { return "RISK_LEVEL: 5" }}
	a := engineReplica(t, eo, api.Options{APIKey: "replica-key-000"})
	b := engineReplica(t, eo, api.Options{APIKey: "replica-key-000"})
	g, ts := newGateway(t, Options{APIKeys: []string{"client-key-000"}},
		Replica{URL: a.URL(), APIKey: "replica-key-000"}, Replica{URL: b.URL(), APIKey: "replica-key-000"})
	waitLive(t, g, 2)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", filepath.Join("testdata", "openai_client.mjs"), dir, ts.URL+"/v1", "client-key-000")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("client: %v\n%s", err, stderr.String())
	}
	var got struct {
		Chat   struct{ Content, Finish, Object string }
		Stream struct {
			Content, Finish string
			Usage           *struct {
				CompletionTokens int `json:"completion_tokens"`
			}
			Chunks int
		}
		Models []string
		BadKey *struct {
			Status int
			Code   string
		}
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%s: %v", out, err)
	}
	switch {
	case got.Chat.Content != "RISK_LEVEL: 5" || got.Chat.Finish != "stop" || got.Chat.Object != "chat.completion":
		t.Fatalf("chat %+v", got.Chat)
	case got.Stream.Content != "RISK_LEVEL: 5" || got.Stream.Finish != "stop" || got.Stream.Usage == nil || got.Stream.Chunks < 5:
		t.Fatalf("stream %+v", got.Stream)
	case !slices.Equal(got.Models, []string{"tiny"}):
		t.Fatalf("models %v", got.Models)
	case got.BadKey == nil || got.BadKey.Status != 401 || got.BadKey.Code != "invalid_api_key":
		t.Fatalf("bad key %+v", got.BadKey)
	}
}
