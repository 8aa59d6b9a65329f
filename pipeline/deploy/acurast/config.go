package acurast

import (
	"encoding/json"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/phonellm/phonellm/internal/fsx"
	"github.com/phonellm/phonellm/pipeline/deploy"
)

// Options are the Acurast-specific settings (the JSON of deploy.Spec.Target). Zero values are usable.
type Options struct {
	// Network is "mainnet" (default) or "canary".
	Network string `json:"network,omitempty"`
	// MinRAMBytes is benchmarkFilters.minRamTotalBytes: take it from the fit profile (the phone's total RAM
	// the model needs). 0 leaves RAM unfiltered.
	MinRAMBytes int64 `json:"min_ram_bytes,omitempty"`
	// MinCPUSingleCore / MinCPUMultiCore are benchmark score filters (0: none).
	MinCPUSingleCore int64 `json:"min_cpu_single_core,omitempty"`
	MinCPUMultiCore  int64 `json:"min_cpu_multi_core,omitempty"`
	// AllowUnattested admits phones without key attestation (default: attested devices only).
	AllowUnattested bool `json:"allow_unattested,omitempty"`
	// MaxCostPerExecution is the reward per replica for the whole run, in picoACU (1 ACU = 1e12). Default:
	// 0.8 ACU per started day of Duration (the rate of Acurast's app-cargo-laya deploy.sh, acurast.md §5.3).
	MaxCostPerExecution int64 `json:"max_cost_per_execution,omitempty"`
	// Duration is how long each phone serves (default 24 h).
	Duration time.Duration `json:"duration,omitempty"`
	// StartDelay is the time from submission to start (default and minimum 5 min, acurast.md §1.3).
	StartDelay time.Duration `json:"start_delay,omitempty"`
	// StartAt, if set, is an absolute start time (overrides StartDelay).
	StartAt time.Time `json:"start_at,omitzero"`
	// MinAndroidBuild is the minimum processor build (default 128 = 1.26.0, the first with the tunnel).
	MinAndroidBuild int `json:"min_android_build,omitempty"`
	// RequiredModules (default ["LLM"]).
	RequiredModules []string `json:"required_modules,omitempty"`
	// ProcessorWhitelist restricts matching to these SS58 addresses.
	ProcessorWhitelist []string `json:"processor_whitelist,omitempty"`
	// RPC, IPFS and Matcher override the endpoints (defaults per network; environment ACURAST_RPC,
	// ACURAST_CANARY_RPC, ACURAST_IPFS_URL, ACURAST_MATCHER_URL override the defaults).
	RPC     string `json:"rpc,omitempty"`
	IPFS    string `json:"ipfs,omitempty"`
	Matcher string `json:"matcher,omitempty"`
	// DryRun makes Deploy stop after the plan: nothing is pinned, signed or submitted.
	DryRun bool `json:"dry_run,omitempty"`
}

// Default endpoints (acurast.md §1.4).
const (
	DefaultMainnetRPC     = "wss://archive.mainnet.acurast.com"
	DefaultCanaryRPC      = "wss://canarynet-ws-1.acurast-h-server-2.papers.tech"
	DefaultIPFS           = "https://ipfs-proxy.acurast.prod.gke.papers.tech"
	DefaultMainnetMatcher = "https://matcher.mainnet.acurast.com"
	DefaultCanaryMatcher  = "https://matcher.canary.acurast.com"
	// PicoPerACU: ACU has 12 decimals.
	PicoPerACU = 1_000_000_000_000
	// TunnelKeyEnv is the phone variable carrying the replica's tunnel key.
	TunnelKeyEnv = "TUNNEL_KEY"
)

// PricePerHour is what one phone-hour costs in ACU under o (its reward per replica over its duration; the
// defaults: 0.8 ACU per phone per day), with the basis of the figure. It is the ceiling the deployment offers
// (maxCostPerExecution); the matcher may settle below it.
func (o Options) PricePerHour() (float64, string) {
	d := o.withDefaults(func(string) string { return "" })
	acu := float64(d.MaxCostPerExecution) / PicoPerACU
	hours := d.Duration.Hours()
	basis := fmt.Sprintf("Acurast reward of %s ACU per phone for %s h (maxCostPerExecution", formatACU(big.NewInt(d.MaxCostPerExecution)),
		strconv.FormatFloat(hours, 'g', 4, 64))
	if o.MaxCostPerExecution == 0 {
		basis += "; default 0.8 ACU per phone-day, acurast.md §5.3"
	}
	return acu / hours, basis + ")"
}

// withDefaults fills zero fields; getenv reads endpoint overrides.
func (o Options) withDefaults(getenv func(string) string) Options {
	if o.Network == "" {
		o.Network = "mainnet"
	}
	if o.Duration == 0 {
		o.Duration = 24 * time.Hour
	}
	if o.StartDelay == 0 {
		o.StartDelay = 5 * time.Minute
	}
	if o.MinAndroidBuild == 0 {
		o.MinAndroidBuild = 128
	}
	if o.RequiredModules == nil {
		o.RequiredModules = []string{"LLM"}
	}
	if o.MaxCostPerExecution == 0 {
		days := (o.Duration + 24*time.Hour - 1) / (24 * time.Hour)
		o.MaxCostPerExecution = int64(days) * 800_000_000_000
	}
	env := func(k, def string) string {
		if v := getenv(k); v != "" {
			return v
		}
		return def
	}
	if o.RPC == "" {
		if o.Network == "canary" {
			o.RPC = env("ACURAST_CANARY_RPC", DefaultCanaryRPC)
		} else {
			o.RPC = env("ACURAST_RPC", DefaultMainnetRPC)
		}
	}
	if o.IPFS == "" {
		o.IPFS = env("ACURAST_IPFS_URL", DefaultIPFS)
	}
	if o.Matcher == "" {
		def := DefaultMainnetMatcher
		if o.Network == "canary" {
			def = DefaultCanaryMatcher
		}
		o.Matcher = env("ACURAST_MATCHER_URL", def)
	}
	return o
}

// Validate checks the options.
func (o Options) Validate() error {
	if o.Network != "mainnet" && o.Network != "canary" {
		return deploy.SpecErrorf("acurast: network %q, want mainnet or canary", o.Network)
	}
	if o.MinRAMBytes < 0 || o.MinCPUSingleCore < 0 || o.MinCPUMultiCore < 0 || o.MaxCostPerExecution < 0 {
		return deploy.SpecErrorf("acurast: negative filter or cost")
	}
	if o.Duration < time.Minute || o.Duration > 365*24*time.Hour {
		return deploy.SpecErrorf("acurast: duration %v, want 1m..365d", o.Duration)
	}
	if o.StartAt.IsZero() && o.StartDelay < 5*time.Minute {
		return deploy.SpecErrorf("acurast: start delay %v, want at least 5m (processors need time to match and acknowledge)", o.StartDelay)
	}
	for _, m := range o.RequiredModules {
		if !slices.Contains([]string{"DataEncryption", "LLM", "Shell"}, m) {
			return deploy.SpecErrorf("acurast: required module %q, want DataEncryption, LLM or Shell", m)
		}
	}
	if len(o.ProcessorWhitelist) > 1000 {
		return deploy.SpecErrorf("acurast: processor whitelist longer than 1000")
	}
	for _, a := range o.ProcessorWhitelist {
		if _, err := DecodeSS58(a); err != nil {
			return deploy.SpecErrorf("%v", err)
		}
	}
	return nil
}

// ProjectConfig is one project of acurast.json (field names and meanings: acurast.md §1.3; @acurast/sdk
// AcurastProjectConfig).
type ProjectConfig struct {
	ProjectName                 string             `json:"projectName"`
	FileURL                     string             `json:"fileUrl"`
	Entrypoint                  string             `json:"entrypoint"`
	Runtime                     string             `json:"runtime"`
	Network                     string             `json:"network"`
	OnlyAttestedDevices         bool               `json:"onlyAttestedDevices"`
	StartAt                     StartAt            `json:"startAt"`
	AssignmentStrategy          AssignmentStrategy `json:"assignmentStrategy"`
	Execution                   Execution          `json:"execution"`
	MaxAllowedStartDelayInMs    int64              `json:"maxAllowedStartDelayInMs"`
	UsageLimit                  UsageLimit         `json:"usageLimit"`
	NumberOfReplicas            int                `json:"numberOfReplicas"`
	RequiredModules             []string           `json:"requiredModules"`
	MinProcessorReputation      int64              `json:"minProcessorReputation"`
	MinProcessorVersions        *ProcessorVersions `json:"minProcessorVersions,omitempty"`
	MaxCostPerExecution         int64              `json:"maxCostPerExecution"`
	IncludeEnvironmentVariables []string           `json:"includeEnvironmentVariables"`
	ProcessorWhitelist          []string           `json:"processorWhitelist"`
	RestartPolicy               string             `json:"restartPolicy"`
	Mutability                  string             `json:"mutability"`
	BenchmarkFilters            *BenchmarkFilters  `json:"benchmarkFilters,omitempty"`
}

// StartAt is {msFromNow} or {timestamp} (ms since the epoch).
type StartAt struct {
	MsFromNow *int64 `json:"msFromNow,omitempty"`
	Timestamp *int64 `json:"timestamp,omitempty"`
}

// AssignmentStrategy is {type: "Single"|"Competing"}.
type AssignmentStrategy struct {
	Type string `json:"type"`
}

// Execution is {type: "onetime", maxExecutionTimeInMs}.
type Execution struct {
	Type                 string `json:"type"`
	MaxExecutionTimeInMs int64  `json:"maxExecutionTimeInMs"`
}

// UsageLimit is in bytes / request counts; 0 means the processor's default.
type UsageLimit struct {
	MaxMemory          int64 `json:"maxMemory"`
	MaxNetworkRequests int64 `json:"maxNetworkRequests"`
	MaxStorage         int64 `json:"maxStorage"`
}

// ProcessorVersions holds minimum build numbers.
type ProcessorVersions struct {
	Android int `json:"android,omitempty"`
}

// BenchmarkFilters map to the deploy call's min_metrics (acurast.md §5.1).
type BenchmarkFilters struct {
	MinRamTotalBytes      int64 `json:"minRamTotalBytes,omitempty"`
	MinCpuSingleCoreScore int64 `json:"minCpuSingleCoreScore,omitempty"`
	MinCpuMultiCoreScore  int64 `json:"minCpuMultiCoreScore,omitempty"`
}

// ConfigFile is acurast.json.
type ConfigFile struct {
	Projects map[string]ProjectConfig `json:"projects"`
}

// envNames are the phone variables a deployment sets, in order: API key, Hub token (if any), tunnel key.
func envNames(spec deploy.Spec) []string {
	var names []string
	for _, n := range []string{spec.APIKeyEnv, spec.HFTokenEnv, TunnelKeyEnv} {
		if n != "" && !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	return names
}

// Projects builds one single-replica project per replica. start is the absolute start when non-zero
// (plans), else the configs use msFromNow = StartDelay (deploys).
func Projects(spec deploy.Spec, o Options, script string, start time.Time) []ProjectConfig {
	var filters *BenchmarkFilters
	if o.MinRAMBytes > 0 || o.MinCPUSingleCore > 0 || o.MinCPUMultiCore > 0 {
		filters = &BenchmarkFilters{MinRamTotalBytes: o.MinRAMBytes, MinCpuSingleCoreScore: o.MinCPUSingleCore, MinCpuMultiCoreScore: o.MinCPUMultiCore}
	}
	var sa StartAt
	if !start.IsZero() {
		ms := start.UnixMilli()
		sa.Timestamp = &ms
	} else {
		ms := o.StartDelay.Milliseconds()
		sa.MsFromNow = &ms
	}
	out := make([]ProjectConfig, spec.Replicas)
	for i := range out {
		out[i] = ProjectConfig{
			ProjectName:                 fmt.Sprintf("%s-r%d", deploy.NewID(spec.Name, ""), i),
			FileURL:                     script,
			Entrypoint:                  "index.js",
			Runtime:                     "NodeJSWithBundle",
			Network:                     o.Network,
			OnlyAttestedDevices:         !o.AllowUnattested,
			StartAt:                     sa,
			AssignmentStrategy:          AssignmentStrategy{Type: "Single"},
			Execution:                   Execution{Type: "onetime", MaxExecutionTimeInMs: o.Duration.Milliseconds()},
			MaxAllowedStartDelayInMs:    10000,
			NumberOfReplicas:            1,
			RequiredModules:             slices.Clone(o.RequiredModules),
			MinProcessorVersions:        &ProcessorVersions{Android: o.MinAndroidBuild},
			MaxCostPerExecution:         o.MaxCostPerExecution,
			IncludeEnvironmentVariables: envNames(spec),
			ProcessorWhitelist:          append([]string{}, o.ProcessorWhitelist...),
			RestartPolicy:               "onFailure",
			Mutability:                  "Immutable",
			BenchmarkFilters:            filters,
		}
	}
	return out
}

// WriteConfigFile writes acurast.json atomically.
func WriteConfigFile(path string, projects []ProjectConfig) error {
	f := ConfigFile{Projects: map[string]ProjectConfig{}}
	for _, p := range projects {
		f.Projects[p.ProjectName] = p
	}
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	_, err = fsx.WriteFile(path, append(b, '\n'))
	return err
}

// Cost is the money side of a plan, in picoACU (decimal strings: on chain they are u128).
type Cost struct {
	// PerReplica is maxCostPerExecution: the most one phone is paid for the whole job.
	PerReplica    string `json:"per_replica_pico"`
	PerReplicaACU string `json:"per_replica_acu"`
	Replicas      int    `json:"replicas"`
	// Locked is what the deployer's account locks: maxCostPerExecution × executions (1) × replicas
	// (acurast.md §5.2); unused funds come back on cleanup.
	Locked    string `json:"locked_pico"`
	LockedACU string `json:"locked_acu"`
	// Matcher is the matcher's advice when it answered.
	Matcher *MatcherAdvice `json:"matcher,omitempty"`
}

// MatcherAdvice is what the matcher said (or why it did not).
type MatcherAdvice struct {
	Reachable  bool            `json:"reachable"`
	Error      string          `json:"error,omitempty"`
	Processors int             `json:"processors,omitempty"`
	Advice     json.RawMessage `json:"advice,omitempty"`
}

func costOf(perReplica int64, replicas int) Cost {
	locked := new(big.Int).Mul(big.NewInt(perReplica), big.NewInt(int64(replicas)))
	return Cost{PerReplica: fmt.Sprint(perReplica), PerReplicaACU: formatACU(big.NewInt(perReplica)), Replicas: replicas,
		Locked: locked.String(), LockedACU: formatACU(locked)}
}

// formatACU prints a picoACU amount in ACU without rounding ("8", "0.0771368").
func formatACU(pico *big.Int) string {
	q, r := new(big.Int).QuoRem(pico, big.NewInt(PicoPerACU), new(big.Int))
	if r.Sign() == 0 {
		return q.String()
	}
	frac := strings.TrimRight(fmt.Sprintf("%012d", r.Int64()), "0")
	return q.String() + "." + frac
}

// PhoneConfig is deploy.NewPhoneConfig with the tunnel relays of the spec's network (Spec.Target options).
func PhoneConfig(spec deploy.Spec, version string) (deploy.PhoneConfig, error) {
	o, err := decodeOptions(spec)
	if err != nil {
		return deploy.PhoneConfig{}, err
	}
	c := deploy.NewPhoneConfig(spec, version)
	if c.Warm, err = deploy.ReadWarm(spec.Warm); err != nil {
		return deploy.PhoneConfig{}, err
	}
	c.TunnelKeyEnv = TunnelKeyEnv
	if o.Network == "canary" {
		c.Tunnel = deploy.CanaryTunnel
	}
	return c, nil
}
