package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/phonellm/phonellm/pipeline/deploy"
	"github.com/phonellm/phonellm/pipeline/deploy/local"
	"github.com/phonellm/phonellm/runtime/gateway"
	"github.com/spf13/cobra"
)

func init() { register("run", newGatewayCmd) }

func newGatewayCmd(a *app) *cobra.Command {
	var deployment, host, apiKeyEnv, stateDir, identity, affinity string
	var replicas []string
	var port, listenFD, affinityBytes, rateBurst int
	var rateLimit float64
	cmd := &cobra.Command{
		Use:   "gateway (--deployment ID | --replica URL...) [--port 8090]",
		Short: "One OpenAI-compatible endpoint over the replicas of a deployment",
		Long: `Serve one OpenAI-compatible endpoint over replica URLs: active health checks, prefix-affine routing that
respects each replica's free slots, retry on another replica when a request fails before the first byte, circuit
breaking, client API keys (--api-key-env or PHONELLM_API_KEY), per-client rate limits, per-replica metrics (cache
hit rate included) on /metrics and a /v1/models that reflects what is live. With --deployment it follows the
deployment's replicas as they come and go. It binds 127.0.0.1 unless --host says otherwise.

Routing (--affinity): requests that share a prompt prefix go to the replica that holds it in its cache, so a
rubric of thousands of tokens is evaluated once per replica rather than once per request. A request is keyed
by its prompt_cache_key field (OpenAI's; at most 1 KiB), else by its leading system messages (auto, system),
else by the first --affinity-bytes of its prompt (auto, prefix); off routes by load only. When the replica
holding a prefix is busy, a request waits for it unless a miss on a free replica is expected to finish
first, as measured from what the replicas report.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if (deployment == "") == (len(replicas) == 0) {
				return usageError("give exactly one of --deployment ID or --replica URL")
			}
			var keys []string
			key, err := clientAPIKey(apiKeyEnv)
			if err != nil {
				return err
			}
			if key != "" {
				keys = append(keys, key)
			}
			mode, err := gateway.ParseAffinityMode(affinity)
			if err != nil {
				return usageError("--affinity: %v", err)
			}
			if affinityBytes < 1 {
				return usageError("--affinity-bytes must be at least 1")
			}
			if rateBurst < 0 {
				return usageError("--rate-burst must not be negative")
			}
			logger := slog.New(slog.NewTextHandler(a.io.Err, nil))
			opts := gateway.Options{APIKeys: keys, Logger: logger, RateLimit: rateLimit, RateBurst: rateBurst,
				Affinity: gateway.AffinityOptions{Mode: mode, KeyBytes: affinityBytes}}
			if identity != "" {
				opts.Header = http.Header{deploy.GatewayIdentityHeader: {identity}}
			}
			g, err := gateway.New(opts)
			if err != nil {
				return err
			}
			defer g.Close()
			if deployment != "" {
				f, err := local.New(local.Options{Store: deploy.NewStore(stateDir)})
				if err != nil {
					return err
				}
				go g.Follow(a.ctx, 2*time.Second, func(ctx context.Context) ([]gateway.Replica, error) {
					eps, err := f.Endpoints(ctx, deployment)
					if err != nil {
						return nil, err
					}
					rs := make([]gateway.Replica, len(eps))
					for i, e := range eps {
						rs[i] = gateway.Replica{URL: e.URL, Slots: e.Slots, Name: fmt.Sprintf("replica-%d", e.Replica)}
						if e.APIKeyEnv != "" {
							rs[i].APIKey = os.Getenv(e.APIKeyEnv)
						}
					}
					return rs, nil
				})
			} else {
				var rs []gateway.Replica
				for _, u := range replicas {
					rs = append(rs, gateway.Replica{URL: strings.TrimSuffix(u, "/")})
				}
				if err := g.SetReplicas(rs); err != nil {
					return usageError("%v", err)
				}
			}
			var ln net.Listener
			if listenFD > 0 {
				// The supervisor holds the bound socket for the deployment's life and hands it to every
				// gateway it starts, so a restarted gateway serves on the same port.
				ln, err = local.InheritedListener(listenFD)
			} else {
				ln, err = net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
			}
			if err != nil {
				return err
			}
			a.io.Printf("gateway listening on http://%s\n", ln.Addr())
			fmt.Fprintf(a.io.Out, "http://%s\n", ln.Addr())
			return g.Serve(a.ctx, ln)
		},
	}
	f := cmd.Flags()
	f.StringVar(&deployment, "deployment", "", "follow the replicas of this local deployment")
	f.StringArrayVar(&replicas, "replica", nil, "replica base URL (repeatable)")
	f.StringVar(&host, "host", "127.0.0.1", "address to bind")
	f.IntVarP(&port, "port", "p", 8090, "port to bind (0 picks a free one)")
	f.StringVar(&apiKeyEnv, "api-key-env", "", "environment variable holding the key clients must send")
	f.StringVar(&stateDir, "state-dir", fleetDir(), "deployment state folder (with --deployment)")
	f.IntVar(&listenFD, "listen-fd", 0, "serve on this inherited listening socket instead of binding --host/--port")
	f.StringVar(&identity, "identity", "", "value of the "+deploy.GatewayIdentityHeader+" header sent on every answer")
	f.StringVar(&affinity, "affinity", "auto", "prefix-affine routing: auto (system messages, else the prompt's first bytes), system, prefix or off")
	f.IntVar(&affinityBytes, "affinity-bytes", 4096, "bytes of the prompt that key a request without system messages")
	f.Float64Var(&rateLimit, "rate-limit", 0, "requests per second one client (API key, or address without keys) may send, sustained; 0 = 100, negative = no limit")
	f.IntVar(&rateBurst, "rate-burst", 0, "requests one client may send at once after a pause (0 = 1000)")
	for _, n := range []string{"state-dir", "listen-fd", "identity"} {
		_ = f.MarkHidden(n) // set by the local fleet's supervisor
	}
	return cmd
}
