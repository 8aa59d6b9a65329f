package main

import (
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/phonellm/phonellm/internal/home"
)

// envVar is one environment variable phonellm reads. The table is the single place they are declared; it also
// prints as `phonellm help environment`.
type envVar struct {
	Name    string
	Default string
	Help    string
}

var environment = []envVar{
	{"HF_TOKEN", "token file in HF_HOME", "Hugging Face access token for publish and private downloads"},
	{"HF_HOME", "~/.cache/huggingface", "Hugging Face cache and token folder (hub/ cache layout, token file)"},
	{"HF_ENDPOINT", "https://huggingface.co", "Hub endpoint (set to a mirror or a test Hub)"},
	{"HF_HUB_CACHE", "$HF_HOME/hub", "Hub download cache (huggingface_hub's layout: blobs, snapshots, refs)"},
	{"PHONELLM_HOME", "~/.cache/phonellm", "phonellm's own cache: npm tools, auto-tune results, fleet state, sha256 of merged base files"},
	{"PHONELLM_WORKSPACE", "nearest folder with phonellm.yaml", "workspace folder to use instead of searching upward"},
	{"PHONELLM_THREADS", "all cores", "default worker threads for quantize and serve"},
	{"PHONELLM_API_KEY", "", "API key clients must send to serve/gateway (Bearer); same as --api-key"},
	{"ACURAST_MNEMONIC", "", "Acurast account mnemonic for ship --target acurast; never written to disk or logs"},
	{"ACURAST_RPC", "mainnet RPC", "Acurast chain RPC endpoint (ACURAST_CANARY_RPC for --network canary)"},
	{"ACURAST_IPFS_URL", "SDK default", "IPFS pinning endpoint for the phone bundle"},
	{"ACURAST_IPFS_API_KEY", "", "IPFS pinning API key; never written to disk or logs"},
	{"ACURAST_MATCHER_URL", "SDK default", "Acurast matcher, for cost estimates in ship --dry-run"},
	{"LLAMA_QUANTIZE", "", "llama-quantize executable that bench quantize times in the same run (else: its published anchor)"},
	{"NO_COLOR", "", "any value turns off colours on stderr"},
}

// getenv returns the variable or its fallback. Every read of the environment goes through here.
func getenv(name, fallback string) string {
	if v, ok := os.LookupEnv(name); ok && v != "" {
		return v
	}
	return fallback
}

// phonellmHome is $PHONELLM_HOME (default ~/.cache/phonellm): phonellm's own cache (package internal/home).
func phonellmHome() string { return home.Dir() }

func printEnvironment(w io.Writer) {
	fmt.Fprintln(w, "Environment variables read by phonellm:")
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tDEFAULT\tMEANING")
	for _, e := range environment {
		d := e.Default
		if d == "" {
			d = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", e.Name, d, e.Help)
	}
	tw.Flush()
}
