package deploy

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/phonellm/phonellm/internal/fsx"
	"github.com/phonellm/phonellm/pipeline/workspace"
)

// HubFileKind is the workspace artifact kind publish records for a file on the Hub; its Path is the resolve
// URL (pinned to the commit) and its SHA256 the file's.
const HubFileKind = "hub-file"

// PlaceholderHost is the host of the model URL a dry run plans with when the model is not published yet: the
// .invalid top-level domain never resolves (RFC 2606), so a bundle built with it can never download anything.
const PlaceholderHost = "not-yet-published.invalid"

// Digest returns the size and sha256 of a model file. It takes the workspace's record of the file when the
// record has the file's current size and is not older than the file (quantize hashes while it writes);
// otherwise it reads the file once (streaming sha256).
func Digest(ws *workspace.Workspace, path string) (int64, string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return 0, "", err
	}
	if !st.Mode().IsRegular() {
		return 0, "", SpecErrorf("ship: model %s is not a regular file", path)
	}
	if sum := recordedSHA(ws, path, st); sum != "" {
		return st.Size(), sum, nil
	}
	n, sum, err := fsx.HashFile(path)
	if err != nil {
		return 0, "", fmt.Errorf("deploy: hash %s: %w", path, err)
	}
	return n, sum, nil
}

func recordedSHA(ws *workspace.Workspace, path string, st os.FileInfo) string {
	if ws == nil {
		return ""
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return ""
	}
	for i := len(ws.State.Records) - 1; i >= 0; i-- {
		r := ws.State.Records[i]
		for _, a := range r.Artifacts {
			if strings.Contains(a.Path, "://") || a.Size != st.Size() || !fsx.IsSHA256Hex(a.SHA256) || r.Time.Before(st.ModTime()) {
				continue
			}
			if p, err := filepath.Abs(ws.Path(a.Path)); err == nil && p == abs {
				return a.SHA256
			}
		}
	}
	return ""
}

// NotPublishedError is a phone deployment of a model publish has not put on the Hub: phones download the
// model from there.
type NotPublishedError struct {
	File      string
	Workspace bool // false: there is no workspace whose records could say
}

func (e *NotPublishedError) Error() string {
	if !e.Workspace {
		return fmt.Sprintf("%s: phones download the model from the Hub, and without a workspace there is no record of its publish (run 'phonellm publish' in the workspace, or --dry-run to plan)", e.File)
	}
	return fmt.Sprintf("%s is not on the Hub yet: run 'phonellm publish' first (phones download it from there), or --dry-run to plan", e.File)
}

// modelURL finds where phones download the model: the resolve URL publish recorded for a file with this
// sha256. A dry run can be planned before a real https publish: it then uses a placeholder URL (model not
// published) or the local test Hub's URL, and note says which, for the summary. A real ship needs https.
func modelURL(ws *workspace.Workspace, path, sum string, dryRun bool) (u, note string, err error) {
	base := filepath.Base(path)
	found := publishedURL(ws, sum)
	switch {
	case found == "" && dryRun:
		return "https://" + PlaceholderHost + "/" + url.PathEscape(base),
			"placeholder: " + base + " is not on the Hub yet; publish it ('phonellm publish') before the real ship, phones download it from there", nil
	case found == "":
		return "", "", &NotPublishedError{File: base, Workspace: ws != nil}
	case !strings.HasPrefix(found, "https://"):
		if dryRun {
			return found, "a local or test Hub that phones cannot reach; the real ship needs the model published over https", nil
		}
		return "", "", SpecErrorf("ship: %s was published to %s, which phones cannot download from: publish it to an https Hub before shipping to phones", base, found)
	}
	return found, "", nil
}

// publishedURL is the newest resolve URL publish recorded for a file with this sha256, or "".
func publishedURL(ws *workspace.Workspace, sum string) string {
	if ws == nil {
		return ""
	}
	for i := len(ws.State.Records) - 1; i >= 0; i-- {
		r := ws.State.Records[i]
		if r.Stage != "publish" {
			continue
		}
		for _, a := range r.Artifacts {
			if a.Kind == HubFileKind && a.SHA256 == sum {
				return a.Path
			}
		}
	}
	return ""
}
