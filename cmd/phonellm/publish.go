package main

import (
	"encoding/json"

	"os"

	"github.com/phonellm/phonellm/pipeline/eval"

	"fmt"
	"io"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/phonellm/phonellm/cmd/phonellm/internal/ui"
	"github.com/phonellm/phonellm/pipeline"
	"github.com/phonellm/phonellm/pipeline/fit"
	"github.com/phonellm/phonellm/pipeline/gguf"
	"github.com/phonellm/phonellm/pipeline/publish"
	"github.com/phonellm/phonellm/pipeline/quantize"
	"github.com/phonellm/phonellm/pipeline/workspace"
	"github.com/spf13/cobra"
)

func init() { register("ship", newPublishCmd) }

// publishedKind is the workspace artifact kind of a file on the Hub; its Path is the resolve URL.
const publishedKind = "hub-file"

func newPublishCmd(a *app) *cobra.Command {
	var o publish.Options
	var noCard bool
	cmd := &cobra.Command{
		Use:   "publish [--repo org/name] [FILE.gguf...]",
		Short: "Upload GGUFs and a model card to the Hugging Face Hub (resumable, verified)",
		Long: `Upload quantized GGUFs and a model card (README.md with base_model, license, the files table, provenance and
the phone fit table) to a Hugging Face model repo, following the official client's protocol: preupload, LFS batch,
multipart upload to presigned URLs (the token never goes there), one commit. Each file's sha256 is computed once
while reading; objects the Hub already has are skipped; a restart after a crash continues from the parts already
accepted (journal in $HF_HOME/phonellm). After the commit the revision's file list is checked against what was
meant (size and sha256). Prints the commit URL and the resolve URLs with sha256 that 'ship' uses.

Without FILES, the workspace's newest quantized GGUFs are published to the workspace's hub.repo.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			ws, err := a.findWorkspace()
			if err != nil {
				return err
			}
			files := args
			if len(files) == 0 {
				if ws == nil {
					return usageError("no FILES given and no workspace here")
				}
				for _, r := range ws.State.Records {
					if r.Stage != "quantize" || r.OneOff {
						continue
					}
					for _, art := range r.Artifacts {
						p := ws.Path(art.Path)
						if _, err := os.Stat(p); art.Kind == "gguf" && err == nil && !containsStr(files, p) {
							files = append(files, p)
						}
					}
				}
				if len(files) == 0 {
					return fmt.Errorf("workspace %s has no quantized GGUF yet: run 'phonellm quantize' first", ws.Root)
				}
			}
			if o.Repo == "" && ws != nil {
				o.Repo = ws.Project.Hub.Repo
				if !cmd.Flags().Changed("private") {
					o.Private = ws.Project.Hub.Private
				}
			}
			if o.Repo == "" {
				return usageError("no --repo given (and no hub.repo in phonellm.yaml)")
			}
			for _, f := range files {
				o.Files = append(o.Files, publish.File{Local: f, Path: filepath.Base(f)})
			}
			if !noCard {
				card, err := modelCard(a, ws, o.Repo, files)
				if err != nil {
					return err
				}
				o.Card = card
			}
			res, err := publish.Run(a.ctx, o, a.reporter())
			if err != nil {
				return remoteErr(err)
			}
			if ws != nil && !o.DryRun {
				var arts []pipeline.Artifact
				for _, f := range res.Files {
					if f.ResolveURL != "" {
						arts = append(arts, pipeline.Artifact{Path: f.ResolveURL, Kind: publishedKind, Size: f.Size, SHA256: f.SHA256})
					}
				}
				key := workspace.Key(map[string]string{"commit": res.CommitOid}, map[string]any{"repo": res.Repo})
				if err := ws.Record(workspace.Record{Stage: "publish", Key: key, Artifacts: arts,
					Options: map[string]any{"repo": res.Repo, "revision": res.Revision, "commit": res.CommitOid}}); err != nil {
					a.io.Warnf("workspace state not updated: %v", err)
				}
			}
			return a.io.Result(res, func(w io.Writer) { printPublish(w, res) })
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Repo, "repo", "", "Hub model repo (org/name; default hub.repo of phonellm.yaml)")
	f.StringVar(&o.Revision, "revision", "main", "branch to commit to")
	f.BoolVar(&o.Private, "private", false, "create the repo private")
	f.BoolVar(&o.DryRun, "dry-run", false, "hash the files and show the plan; no network")
	f.BoolVar(&o.CreatePR, "create-pr", false, "open a pull request instead of committing to the branch")
	f.StringVarP(&o.Message, "message", "m", "", "commit message")
	f.BoolVar(&noCard, "no-card", false, "do not write README.md")
	return cmd
}

func containsStr(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// modelCard builds the README.md model card: base model and license from the base's config and card, the files
// table from the GGUFs, provenance from the workspace, and the fit table over the phone profiles.
func modelCard(a *app, ws *workspace.Workspace, repo string, files []string) (*publish.Card, error) {
	card := &publish.Card{Repo: repo}
	v := buildVersion()
	card.Provenance.PhonellmVersion = v.Version + " (" + v.Commit + ")"
	if ws != nil {
		card.Name = ws.Project.Name
		if looksLikeHubID(ws.Project.Base) {
			card.BaseModel, _, _ = strings.Cut(ws.Project.Base, "@")
			card.BaseModelRelation = "quantized" // of the base; the adapter is recorded under provenance
		}
		if len(ws.Project.Adapters) > 0 {
			card.Provenance.Adapter = strings.Join(ws.Project.Adapters, ", ")
		}
		if dir, err := resolveBase(a, ws.Root, ws.Project.Base); err == nil {
			card.License = cardLicense(dir)
		}
		if r := ws.Latest("merge"); r != nil {
			card.Provenance.BaseSHA256 = r.Inputs["base"]
			card.Provenance.AdapterSHA256 = r.Inputs["adapter0"]
		}
		card.Quality = qualityRows(ws)
		for _, st := range []string{"merge", "convert", "imatrix", "quantize"} {
			if r := ws.Latest(st); r != nil {
				card.Provenance.Commands = append(card.Provenance.Commands, "phonellm "+st)
			}
		}
	}
	for _, p := range files {
		g, err := gguf.OpenFile(p)
		if err != nil {
			return nil, err
		}
		ft, _ := g.Uint("general.file_type")
		if pv := quantize.ReadProvenance(g); pv.Imatrix != nil || pv.Mix != nil {
			q := publish.QuantRow{File: filepath.Base(p)}
			if im := pv.Imatrix; im != nil {
				q.Imatrix, q.ImatrixSHA256, q.Dataset, q.Chunks = im.File, im.SHA256, im.Dataset, im.Chunks
			}
			if m := pv.Mix; m != nil {
				q.Mix, q.MixRules, q.PredictedKLD = m.Target, len(m.Rules), m.PredictedKLD
			}
			card.Quantization = append(card.Quantization, q)
		}
		var elems uint64
		for _, t := range g.Tensors {
			elems += t.NumElements()
		}
		if card.Name == "" {
			card.Name = g.String("general.name")
		}
		size := g.Size
		g.Close()
		sum := recordedSHA(ws, p) // computed while quantize wrote it; not hashed again here
		bpw := 0.0
		if elems > 0 {
			bpw = float64(size*8) / float64(elems)
		}
		card.Files = append(card.Files, publish.CardFile{Name: filepath.Base(p), Type: gguf.FileType(ft).String(),
			Size: size, BitsPerWeight: bpw, SHA256: sum})
		for _, prof := range fit.Builtin() {
			fr, err := fit.Run(a.ctx, fit.Options{Model: p, Phone: prof.Name, Ctx: 4096}, nil)
			if err != nil {
				break
			}
			card.Fit = append(card.Fit, publish.FitRow{Profile: prof.Name, File: filepath.Base(p), Context: 4096,
				Need: fr.Verdict.Needed, Budget: fr.Verdict.Usable, Fits: fr.Verdict.Fits,
				Headroom: signedBytes(fr.Verdict.Headroom) + " free"})
		}
	}
	return card, nil
}

// qualityRows turns the workspace's newest eval result into the card's quality table.
func qualityRows(ws *workspace.Workspace) []publish.QualityRow {
	r := ws.Latest("eval")
	if r == nil {
		return nil
	}
	raw, err := json.Marshal(r.Options["result"])
	if err != nil {
		return nil
	}
	var res eval.Result
	if json.Unmarshal(raw, &res) != nil {
		return nil
	}
	var rows []publish.QualityRow
	if d := res.Distribution; d != nil {
		file := filepath.Base(d.Candidate)
		ref := "vs " + filepath.Base(d.Reference)
		rows = append(rows,
			publish.QualityRow{Metric: "mean KL divergence", File: file, Value: fmt.Sprintf("%.5f", d.MeanKLD), Note: ref},
			publish.QualityRow{Metric: "top-1 agreement", File: file, Value: fmt.Sprintf("%.1f %%", 100*d.Top1), Note: ref},
			publish.QualityRow{Metric: "perplexity", File: file, Value: fmt.Sprintf("%.3f", d.PPLCandidate),
				Note: fmt.Sprintf("reference %.3f", d.PPLReference)})
	}
	if t := res.Task; t != nil {
		rows = append(rows,
			publish.QualityRow{Metric: "task accuracy", File: t.Model, Value: fmt.Sprintf("%.3f", t.Accuracy), Note: t.Endpoint},
			publish.QualityRow{Metric: "task macro-F1", File: t.Model, Value: fmt.Sprintf("%.3f", t.MacroF1), Note: t.Endpoint})
	}
	return rows
}

// cardLicense returns the license id in the front matter of a checkpoint's README.md (Hub model cards carry
// "license: apache-2.0"), or "" when there is none.
func cardLicense(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, "README.md"))
	if err != nil {
		return ""
	}
	rest, ok := strings.CutPrefix(string(b), "---\n")
	if !ok {
		return ""
	}
	front, _, ok := strings.Cut(rest, "\n---")
	if !ok {
		return ""
	}
	var fm struct {
		License string `yaml:"license"`
	}
	if yaml.Unmarshal([]byte(front), &fm) != nil {
		return ""
	}
	return fm.License
}

// recordedSHA is the sha256 the workspace recorded for an artifact at path, or "".
func recordedSHA(ws *workspace.Workspace, path string) string {
	if ws == nil {
		return ""
	}
	abs, _ := filepath.Abs(path)
	for i := len(ws.State.Records) - 1; i >= 0; i-- {
		for _, art := range ws.State.Records[i].Artifacts {
			if p, _ := filepath.Abs(ws.Path(art.Path)); p == abs {
				return art.SHA256
			}
		}
	}
	return ""
}

func printPublish(w io.Writer, r publish.Result) {
	switch {
	case r.DryRun:
		fmt.Fprintf(w, "plan for %s@%s (dry run, nothing sent):\n", r.Repo, r.Revision)
	case r.UpToDate:
		fmt.Fprintf(w, "%s@%s is up to date (nothing to commit)\n", r.Repo, r.Revision)
	default:
		fmt.Fprintf(w, "%s\n", r.CommitURL)
	}
	for _, f := range r.Files {
		fmt.Fprintf(w, "  %-9s %s %s sha256 %s\n", f.Action, f.Path, ui.HumanBytes(f.Size), f.SHA256)
		if f.ResolveURL != "" {
			fmt.Fprintf(w, "            %s\n", f.ResolveURL)
		}
	}
	if !r.DryRun && !r.UpToDate {
		state := "verified"
		if !r.Verified {
			state = "NOT verified"
		}
		fmt.Fprintf(w, "  file list %s; %s hashed, %s sent\n", state, ui.HumanBytes(r.BytesHashed), ui.HumanBytes(r.BytesSent))
	}
}
