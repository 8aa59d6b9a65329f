package main

import (
	"fmt"
	"path"
	"path/filepath"
	"strings"

	"github.com/phonellm/phonellm/pipeline/hfhub"
	"github.com/phonellm/phonellm/pipeline/publish"
)

// baseFiles says which files of a Hub model repo a base checkpoint needs: weights, config, tokenizer,
// generation config and chat template — not other formats (PyTorch .bin, GGUF, ONNX) or images.
func baseFile(name string) bool {
	base := path.Base(name)
	switch {
	case strings.HasSuffix(base, ".safetensors"), base == "model.safetensors.index.json",
		base == "config.json", base == "generation_config.json", base == "chat_template.jinja",
		base == "chat_template.json", strings.HasPrefix(base, "tokenizer"), base == "vocab.json",
		base == "merges.txt", base == "special_tokens_map.json", base == "added_tokens.json",
		base == "preprocessor_config.json", base == "LICENSE", base == "README.md":
		return !strings.Contains(name, "/") // the model's own folder only
	}
	return false
}

// downloadBase downloads the base checkpoint files of a Hub model (org/name[@revision]) into the Hugging Face
// cache ($HF_HOME/hub, the layout huggingface_hub uses), each verified by size and sha256, resuming partial
// downloads and re-fetching corrupt cache entries. It returns the snapshot folder.
func downloadBase(a *app, id string) (string, error) {
	repo, rev, _ := strings.Cut(id, "@")
	if rev == "" {
		rev = "main"
	}
	if err := hfhub.ValidateRepoID(repo); err != nil {
		return "", err
	}
	lister := &publish.Client{Endpoint: hfhub.Endpoint(), Token: hfhub.Token()}
	entries, err := lister.ListFiles(a.ctx, repo, rev)
	if err != nil {
		return "", withCode(exitRemote, fmt.Errorf("list files of %s@%s: %w", repo, rev, err), hubHint(err))
	}
	dl := hfhub.New()
	var total int64
	var want []publish.TreeEntry
	for _, e := range entries {
		if e.Type == "file" && baseFile(e.Path) {
			want = append(want, e)
			total += e.Size
		}
	}
	if len(want) == 0 {
		return "", fmt.Errorf("%s@%s has no safetensors checkpoint files", repo, rev)
	}
	rep := a.reporter()
	step := fmt.Sprintf("download %s@%s (%d files)", repo, rev, len(want))
	rep.Begin(step, total)
	var snapshot string
	for _, e := range want {
		loc, err := dl.Download(a.ctx, repo, rev, e.Path, rep.Add)
		if err != nil {
			rep.End(step, err)
			return "", withCode(exitRemote, fmt.Errorf("download %s/%s: %w", repo, e.Path, err), hubHint(err))
		}
		snapshot = filepath.Dir(loc.Path)
	}
	rep.End(step, nil)
	return snapshot, nil
}

// hubHint returns the Hub error's hint for people, if it has one.
func hubHint(err error) string {
	var he *publish.HubError
	if asErr(err, &he) {
		return he.Hint()
	}
	return ""
}
