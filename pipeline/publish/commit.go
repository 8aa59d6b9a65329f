package publish

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
)

// CommitOp is one NDJSON operation: Key "file" (Content), "lfsFile" (Oid,
// Size) or "deletedFile".
type CommitOp struct {
	Key     string
	Path    string
	Content []byte
	Oid     string
	Size    int64
}

// CommitInfo is the Hub's answer to a commit.
type CommitInfo struct {
	Oid            string `json:"commitOid"`
	URL            string `json:"commitUrl"`
	PullRequestURL string `json:"pullRequestUrl,omitempty"`
}

// commitBody renders the NDJSON payload: header first, one op per line
// (huggingface_hub _commit_api.py _prepare_commit_payload).
func commitBody(summary, description, parent string, ops []CommitOp) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf) // Encode appends '\n' after every line.
	hdr := map[string]any{"summary": summary, "description": description}
	if parent != "" {
		hdr["parentCommit"] = parent
	}
	if err := enc.Encode(map[string]any{"key": "header", "value": hdr}); err != nil {
		return nil, err
	}
	for _, op := range ops {
		var v map[string]any
		switch op.Key {
		case "file":
			v = map[string]any{"path": op.Path, "content": base64.StdEncoding.EncodeToString(op.Content), "encoding": "base64"}
		case "lfsFile":
			v = map[string]any{"path": op.Path, "algo": "sha256", "oid": op.Oid, "size": op.Size}
		case "deletedFile":
			v = map[string]any{"path": op.Path}
		default:
			return nil, fmt.Errorf("publish: unknown commit op %q", op.Key)
		}
		if err := enc.Encode(map[string]any{"key": op.Key, "value": v}); err != nil {
			return nil, err
		}
	}
	return buf.Bytes(), nil
}

// Commit sends one commit. It is never retried here: a lost answer may
// hide a commit that landed (huggingface_hub _send_commit docstring); the
// caller decides after reading the branch head. parent, when set, makes the
// Hub refuse the commit with 412 if the branch moved (ConflictError).
func (c *Client) Commit(ctx context.Context, repo, rev, summary, description, parent string, ops []CommitOp, createPR bool) (CommitInfo, error) {
	body, err := commitBody(summary, description, parent, ops)
	if err != nil {
		return CommitInfo{}, err
	}
	u := c.apiURL("/api/models/" + repo + "/commit/" + url.PathEscape(rev))
	if createPR {
		u += "?create_pr=1"
	}
	_, ans, err := c.once(ctx, call{op: "commit", method: http.MethodPost, url: u, body: body, contentType: "application/x-ndjson", auth: true})
	if err != nil {
		return CommitInfo{}, err
	}
	var info CommitInfo
	if err := decode("commit", ans, &info); err != nil {
		return CommitInfo{}, err
	}
	if len(info.Oid) != 40 {
		return CommitInfo{}, fmt.Errorf("hub commit: answer has commit id %q, want 40 hex", info.Oid)
	}
	return info, nil
}
