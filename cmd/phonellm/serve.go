package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/phonellm/phonellm/internal/home"
	"github.com/phonellm/phonellm/internal/httpx"
	"github.com/phonellm/phonellm/pipeline/modelcheck"
	"github.com/phonellm/phonellm/runtime/api"
	"github.com/phonellm/phonellm/runtime/autotune"
	"github.com/phonellm/phonellm/runtime/engine"
	"github.com/phonellm/phonellm/runtime/goengine"
	"github.com/phonellm/phonellm/runtime/llamaserver"
	"github.com/spf13/cobra"
)

func init() { register("run", newServeCmd) }

// engineFlags are the flags shared by serve and bench that say how to load the model.
type engineFlags struct {
	engine, llamaServer string
	threads, parallel   int
	ctx, batch          int
	kvType              string
	flashAttn           bool
	noRepack            bool
	alias               string
}

func (f *engineFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.engine, "engine", "go", "inference engine: go (built in) or llama-server (external binary)")
	fl.StringVar(&f.llamaServer, "llama-server", "", "llama-server binary for --engine llama-server")
	fl.IntVar(&f.threads, "threads", 0, "CPU threads (default: all cores, or PHONELLM_THREADS)")
	fl.IntVar(&f.parallel, "parallel", 1, "parallel slots (concurrent requests generating)")
	fl.IntVarP(&f.ctx, "ctx", "c", 4096, "context length per slot")
	fl.IntVarP(&f.batch, "batch", "b", 512, "prompt batch size")
	fl.StringVar(&f.kvType, "kv-type", "f16", "KV cache type: f16, q8_0 or q4_0")
	fl.BoolVar(&f.flashAttn, "flash-attn", false, "use the fused attention kernel")
	fl.BoolVar(&f.noRepack, "no-repack", false, "keep Q4_0/Q4_K/IQ4_NL matrices in ggml's plain layout instead of its interleaved GEMM layout (same results up to rounding, slower prompts)")
	fl.StringVar(&f.alias, "alias", "", "model name to serve under (default: the file name without .gguf), like llama-server's --alias")
}

func (f *engineFlags) load(ctx context.Context, path string) (engine.Engine, error) {
	threads := f.threads
	if threads == 0 {
		threads, _ = strconv.Atoi(getenv("PHONELLM_THREADS", "0"))
	}
	switch f.engine {
	case "go", "":
		return goengine.Load(ctx, goengine.Options{Path: path, ID: f.alias, Threads: threads, Parallel: f.parallel,
			ContextLength: f.ctx, BatchSize: f.batch, KVCacheType: f.kvType, FlashAttention: f.flashAttn, NoRepack: f.noRepack})
	case "llama-server":
		if f.llamaServer == "" {
			return nil, usageError("--engine llama-server needs --llama-server PATH")
		}
		// The built-in engine checks its files at load (goengine.Load); llama-server gets the same checks.
		if err := modelcheck.CheckPath(path, modelcheck.Options{}); err != nil {
			return nil, err
		}
		return llamaserver.Start(ctx, llamaserver.Options{Binary: f.llamaServer, Model: path, Alias: f.alias, Threads: threads,
			Parallel: f.parallel, ContextLength: f.ctx, BatchSize: f.batch, Log: os.Stderr})
	}
	return nil, usageError("unknown --engine %q (want go or llama-server)", f.engine)
}

// autotune measures thread/batch candidates for this model on this machine (runtime/autotune), scored for the
// fraud-review shape (7,000 tokens in, 8 out), and sets the flags to the fastest. The result is cached under
// $PHONELLM_HOME/autotune keyed by the model, CPU, core count and phonellm version.
func (f *engineFlags) autotune(a *app, path string, force bool) error {
	if f.engine != "go" && f.engine != "" {
		return usageError("--autotune works with --engine go")
	}
	res, err := autotune.Tune(a.ctx, autotune.Options{Model: path, CacheDir: home.Path("autotune"),
		Version: buildVersion().Version, Force: force, Log: func(s string) { a.io.Printf("%s\n", s) },
		Load: func(ctx context.Context, c autotune.Candidate) (engine.Engine, error) {
			return goengine.Load(ctx, goengine.Options{Path: path, Threads: c.Threads, BatchSize: c.BatchSize,
				ContextLength: max(f.ctx, 1024), KVCacheType: f.kvType, FlashAttention: f.flashAttn, NoRepack: f.noRepack})
		}})
	if err != nil {
		return fmt.Errorf("autotune: %w", err)
	}
	if res.Cached {
		a.io.Printf("autotune: cached result %s\n", res.CachePath)
	}
	f.threads, f.batch = res.Best.Threads, res.Best.BatchSize
	a.io.Printf("autotune: threads %d, batch %d\n", f.threads, f.batch)
	return nil
}

func newServeCmd(a *app) *cobra.Command {
	var ef engineFlags
	var host, apiKey, apiKeyEnv string
	var port, queue, maxConns int
	var maxBody byteSize
	var timeout time.Duration
	var tune, retune bool
	cmd := &cobra.Command{
		Use:   "serve [MODEL.gguf | hf://org/repo/file.gguf[@rev]]",
		Short: "Serve a GGUF over an OpenAI-compatible HTTP API (what each phone runs)",
		Long: `Serve a GGUF over an OpenAI-compatible API: POST /v1/chat/completions (streaming too), POST /v1/completions,
GET /v1/models, GET /health and GET /metrics (Prometheus). --parallel slots generate at once; further requests
queue, and a full queue answers 429 with Retry-After. A prompt that shares a prefix with a slot's previous one
reuses that slot's KV cache for the prefix.

Requests come from strangers, so everything one of them can make the server do is bounded: the body
(--max-body), the text of the messages and their number (from the context length), the requests tokenizing at
once (half the cores), the time from arrival to the last byte (--timeout), slow or idle connections (header,
body, idle and per-write timeouts) and the open connections (--max-conns). With --api-key-env the named
variable must hold the key: unset or empty is an error, never "no authentication".

MODEL is a GGUF file, a Hub reference hf://org/repo/file.gguf[@revision] (downloaded resumably into the Hugging
Face cache and verified by size and sha256), or, when omitted, the workspace's newest quantized model.
It binds 127.0.0.1 unless --host says otherwise. Ctrl-C or SIGTERM stops it gracefully (requests in flight get
10 s) and exits 130.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			arg := ""
			if len(args) == 1 {
				arg = args[0]
			}
			key, err := serveAPIKey(apiKey, apiKeyEnv)
			if err != nil {
				return err
			}
			path, err := resolveGGUF(a, arg)
			if err != nil {
				return err
			}
			ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
			if err != nil {
				return err
			}
			logger := slog.New(slog.NewTextHandler(a.io.Err, &slog.HandlerOptions{Level: slog.LevelInfo}))
			srv := api.New(api.Options{APIKey: key, Parallel: ef.parallel, QueueSize: queue, RequestTimeout: timeout,
				Limits: api.Limits{MaxBodyBytes: int64(maxBody)}, HTTP: httpx.ServerOptions{MaxConns: maxConns}, Logger: logger})
			// The listener answers /health ("loading") while the model loads.
			sctx, stop := context.WithCancel(a.ctx)
			defer stop()
			errc := make(chan error, 1)
			go func() { errc <- srv.Serve(sctx, ln) }()
			// Stop the listener before returning early (a failed load), so nothing outlives the command.
			fail := func(err error) error {
				stop()
				<-errc
				return err
			}
			a.io.Printf("listening on http://%s (loading %s)\n", ln.Addr(), path)
			if tune || retune {
				if err := ef.autotune(a, path, retune); err != nil {
					return fail(err)
				}
			}
			start := time.Now()
			eng, err := ef.load(a.ctx, path)
			if err != nil {
				return fail(err)
			}
			defer eng.Close()
			srv.SetEngine(eng)
			info := eng.Info()
			repacked := ""
			if info.RepackedTensors > 0 {
				repacked = fmt.Sprintf(", %d matrices in GEMM layout", info.RepackedTensors)
			}
			a.io.Printf("ready: %s (%s), %d slots × %d tokens%s, loaded in %s\n", info.ID, info.Architecture, info.Parallel,
				info.ContextLength, repacked, time.Since(start).Round(time.Millisecond))
			fmt.Fprintf(a.io.Out, "http://%s\n", ln.Addr())
			if err := <-errc; err != nil {
				return err
			}
			// Serve returns nil only after the context ended (Ctrl-C, SIGTERM) and the graceful shutdown:
			// an interruption, which exits 130 as every interrupted command does.
			return a.ctx.Err()
		},
	}
	ef.add(cmd)
	f := cmd.Flags()
	f.StringVar(&host, "host", "127.0.0.1", "address to bind")
	f.IntVarP(&port, "port", "p", 8080, "port to bind (0 picks a free one)")
	f.StringVar(&apiKey, "api-key", "", "require this Bearer API key (prefer --api-key-env or PHONELLM_API_KEY)")
	f.StringVar(&apiKeyEnv, "api-key-env", "", "read the API key from this environment variable (it must be set and non-empty)")
	f.IntVar(&queue, "queue", 0, "requests that may wait for a slot before 429 (default 4 × parallel)")
	f.DurationVar(&timeout, "timeout", 10*time.Minute, "per-request timeout from arrival to the last byte: reading, tokenizing, queueing and generating")
	f.Var(&maxBody, "max-body", "largest request body, e.g. 8MiB (default: 4 MiB more than a prompt filling the context needs)")
	f.IntVar(&maxConns, "max-conns", httpx.DefaultMaxConns, "open connections at most; more wait until one closes")
	f.BoolVar(&tune, "autotune", false, "time a short prompt+decode at a few thread counts and batch sizes, keep the fastest (cached per model and machine)")
	f.BoolVar(&retune, "retune", false, "like --autotune, but measure again instead of using the cached result")
	return cmd
}

// serveAPIKey returns the key clients must send: --api-key, else the variable --api-key-env names (which must
// then hold a key: authentication fails closed), else PHONELLM_API_KEY, else none.
func serveAPIKey(flagKey, envName string) (string, error) {
	switch {
	case flagKey != "" && envName != "":
		return "", usageError("give --api-key or --api-key-env, not both")
	case flagKey != "":
		if _, err := httpx.NewKeys(flagKey); err != nil {
			return "", usageError("--api-key: %v", err)
		}
		return flagKey, nil
	}
	return clientAPIKey(envName)
}

// clientAPIKey returns the key clients must send to serve or gateway: the value of the variable envName when
// given, which must then be set and non-empty (one line naming the variable otherwise), else PHONELLM_API_KEY,
// else none.
func clientAPIKey(envName string) (string, error) {
	if envName == "" {
		key := getenv("PHONELLM_API_KEY", "")
		if key != "" {
			if _, err := httpx.NewKeys(key); err != nil {
				return "", usageError("PHONELLM_API_KEY: %v", err)
			}
		}
		return key, nil
	}
	key, err := httpx.APIKeyFromEnv(envName)
	if err != nil {
		return "", usageError("%v", err)
	}
	return key, nil
}

// byteSize is a flag holding a byte count: 1048576, 512KiB, 8MiB, 1GiB (also K, M, G, KB, MB, GB as powers of
// 1024).
type byteSize int64

func (b *byteSize) String() string {
	if *b == 0 {
		return "0"
	}
	return strconv.FormatInt(int64(*b), 10)
}

func (b *byteSize) Type() string { return "bytes" }

func (b *byteSize) Set(s string) error {
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"GB", 1 << 30}, {"MB", 1 << 20}, {"KB", 1 << 10},
		{"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}, {"B", 1}} {
		if rest, ok := strings.CutSuffix(t, u.suffix); ok {
			t, mult = strings.TrimSpace(rest), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 || n > (1<<40)/mult {
		return fmt.Errorf("%q is not a byte count (e.g. 8MiB)", s)
	}
	*b = byteSize(n * mult)
	return nil
}

// routeEngineLogs sends what libraries log through log/slog and ggml's log callback (the engine's "offloaded
// 0/29 layers to GPU" and the like) to stderr only with -v: they are debugging detail, not output.
func routeEngineLogs(a *app) {
	level := slog.Level(1 << 10) // above every level: nothing
	if a.io.Verbose {
		level = slog.LevelInfo
	}
	slog.SetDefault(slog.New(slog.NewTextHandler(a.io.Err, &slog.HandlerOptions{Level: level})))
}
