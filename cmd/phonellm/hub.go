package main

import (
	"errors"
	"fmt"
	"net"
	"path"
	"strings"

	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/pipeline/hfhub"
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
// cache ($HF_HOME/hub, the layout huggingface_hub uses), pinned to one commit, each file verified by size and
// sha256, resuming partial downloads and re-fetching corrupt cache entries. It returns the snapshot folder.
func downloadBase(a *app, id string) (string, error) {
	repo, rev, _ := strings.Cut(id, "@")
	if rev == "" {
		rev = "main"
	}
	if err := hfhub.ValidateRepoID(repo); err != nil {
		return "", usageError("%v", err)
	}
	rep := a.reporter()
	step := fmt.Sprintf("download %s@%s", repo, rev)
	rep.Begin(step, -1)
	dir, files, err := hfhub.New().Snapshot(a.ctx, repo, rev, baseFile, rep.Add)
	rep.End(step, err)
	if err != nil {
		return "", remoteErr(fmt.Errorf("download %s@%s: %w", repo, rev, err))
	}
	for _, f := range files {
		if strings.HasSuffix(f.Info.Path, ".safetensors") {
			return dir, nil
		}
	}
	return "", fmt.Errorf("%s@%s has no safetensors weights (phonellm needs the 16-bit Hugging Face checkpoint)", repo, rev)
}

// remoteErr classifies a network failure on the way to the Hub as remote (exit 5). The Hub's own answers
// (hfhub.HubError, …) classify themselves and pass unchanged, as do all other errors.
func remoteErr(err error) error {
	var ne net.Error
	if errors.As(err, &ne) && !pipeline.IsRemoteError(err) && !pipeline.IsInputError(err) {
		return pipeline.RemoteError(err)
	}
	return err
}
