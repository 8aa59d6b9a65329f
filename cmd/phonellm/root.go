package main

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/phonellm/phonellm/cmd/phonellm/internal/ui"
	"github.com/spf13/cobra"
)

// app is what every command shares: the streams, the root context and global flags.
type app struct {
	io      *ui.Streams
	ctx     context.Context
	noColor bool
	// workspace, when set, is the workspace folder commands use instead of PHONELLM_WORKSPACE or the current
	// folder: the demo runs its steps in its own workspace this way, without changing the process's
	// environment or working directory.
	workspace string
}

func (a *app) reporter() *ui.Reporter { return ui.NewReporter(a.io) }

func newRootCmd(a *app) *cobra.Command {
	root := &cobra.Command{
		Use:   "phonellm",
		Short: "Take a fine-tuned model from training to a fleet of phones",
		Long: `phonellm merges a LoRA adapter into its base model, converts it to GGUF, quantizes it, checks that it
fits a phone's memory, publishes it to the Hugging Face Hub, ships it to a fleet of phones (or local replicas)
and serves an OpenAI-compatible API behind one gateway.

Results go to stdout (add --json for machine-readable output); progress and warnings go to stderr.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRun: func(cmd *cobra.Command, args []string) {
			if a.noColor {
				a.io.Color = false
			}
			routeEngineLogs(a)
		},
	}
	pf := root.PersistentFlags()
	pf.BoolVar(&a.io.JSON, "json", false, "print the result as JSON on stdout")
	pf.BoolVarP(&a.io.Quiet, "quiet", "q", false, "no progress output on stderr")
	pf.BoolVarP(&a.io.Verbose, "verbose", "v", false, "more detail on stderr")
	pf.BoolVar(&a.noColor, "no-color", false, "no colours on stderr (also NO_COLOR)")

	root.AddGroup(&cobra.Group{ID: "build", Title: "Build a phone model:"},
		&cobra.Group{ID: "ship", Title: "Publish and ship:"},
		&cobra.Group{ID: "run", Title: "Run and measure:"})
	add := func(group string, cmds ...*cobra.Command) {
		for _, c := range cmds {
			c.GroupID = group
			root.AddCommand(c)
		}
	}
	cmds := []struct {
		group string
		cmd   *cobra.Command
	}{{"build", newInspectCmd(a)}}
	for _, c := range extraCommands {
		cmds = append(cmds, struct {
			group string
			cmd   *cobra.Command
		}{c.group, c.make(a)})
	}
	// Help lists commands in pipeline order, not alphabetically.
	cobra.EnableCommandSorting = false
	rank := func(c *cobra.Command) int {
		for i, n := range pipelineOrder {
			if c.Name() == n {
				return i
			}
		}
		return len(pipelineOrder)
	}
	sort.SliceStable(cmds, func(i, j int) bool { return rank(cmds[i].cmd) < rank(cmds[j].cmd) })
	for _, c := range cmds {
		add(c.group, c.cmd)
	}
	root.AddCommand(newVersionCmd(a))
	var env strings.Builder
	printEnvironment(&env)
	// A command without Run is a help topic: `phonellm help environment` prints its Long text.
	root.AddCommand(&cobra.Command{Use: "environment", Short: "Environment variables phonellm reads", Long: env.String()})
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return usageError("%v (see '%s --help')", err, cmd.CommandPath())
	})
	root.SetOut(a.io.Out) // before the completion command is made: it keeps the writer it sees then
	root.SetErr(a.io.Err)
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	typeUsageErrors(root)
	return root
}

// typeUsageErrors makes every command-line mistake cobra detects come back as a usageError (exit 2), decided
// by where the error comes from rather than by its text: flag errors go through the flag error function,
// argument validators are wrapped here, and a command that only groups subcommands answers an unknown
// subcommand itself (cobra's own check returns a plain error, or shows help and succeeds).
func typeUsageErrors(c *cobra.Command) {
	for _, sub := range c.Commands() {
		typeUsageErrors(sub)
	}
	if c.HasSubCommands() && !c.Runnable() {
		c.SuggestionsMinimumDistance = 2
		c.Args = func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return nil
			}
			hint := ""
			if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
				hint = fmt.Sprintf("; did you mean %s?", strings.Join(s, " or "))
			}
			return usageError("unknown command %q for %q%s (see '%s --help')", args[0], cmd.CommandPath(), hint, cmd.CommandPath())
		}
		c.RunE = func(cmd *cobra.Command, args []string) error { return cmd.Help() }
		return
	}
	validate := c.Args
	if validate == nil {
		validate = cobra.ArbitraryArgs
	}
	c.Args = func(cmd *cobra.Command, args []string) error {
		if err := validate(cmd, args); err != nil {
			return usageError("%v (see '%s --help')", err, cmd.CommandPath())
		}
		return nil
	}
}

// pipelineOrder is the order commands are listed in help: the order people run them.
var pipelineOrder = []string{"init", "status", "reset", "inspect", "merge", "convert", "imatrix", "quantize", "fit", "publish", "ship", "fleet",
	"serve", "gateway", "bench", "eval", "demo"}

// extraCommands lets each command file register itself without editing root.go.
var extraCommands []struct {
	group string
	make  func(*app) *cobra.Command
}

func register(group string, make func(*app) *cobra.Command) {
	extraCommands = append(extraCommands, struct {
		group string
		make  func(*app) *cobra.Command
	}{group, make})
}

// run executes the command line and returns the exit code.
func run(ctx context.Context, args []string, s *ui.Streams) int {
	return runIn(ctx, args, s, "")
}

// runIn is run with the commands' workspace folder given (see app.workspace); "" finds it as usual.
func runIn(ctx context.Context, args []string, s *ui.Streams, workspace string) int {
	a := &app{io: s, ctx: ctx, workspace: workspace}
	root := newRootCmd(a)
	root.SetArgs(args)
	_, err := root.ExecuteContextC(ctx)
	code, hint := exitCode(ctx, err)
	if err != nil {
		if code == exitInterrupted {
			fmt.Fprintln(s.Err, s.Styled("err", "interrupted")+"; nothing half-written was left behind")
		} else {
			fmt.Fprintln(s.Err, s.Styled("err", "error: ")+err.Error())
			if hint != "" {
				fmt.Fprintln(s.Err, s.Styled("dim", "hint: "+hint))
			}
		}
	}
	return code
}
