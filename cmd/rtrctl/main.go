// Command rtrctl is a change-data-capture toolkit with real-time recency. It
// snapshots and replicates PostgreSQL, MySQL/MariaDB and Kafka into a local
// store of Arrow IPC files.
//
// This package is the command line only: flags, wiring and exit codes. Each
// subcommand lives in its own file as an options struct and a
// run<Verb>(ctx, opts) function; the logic lives in pkg/.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"
)

// Exit statuses. They are part of the command-line interface: scripts rely
// on them, and docs/operations.md lists them.
const (
	exitOK          = 0
	exitError       = 1
	exitUsage       = 2
	exitRecencyWait = 3 // timed out waiting for recency
	exitInterrupted = 130
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	// %p in a path is the process id (rtrctl bench runs rtrctl ingest).
	pid := strconv.Itoa(os.Getpid())
	stop := profile(strings.ReplaceAll(os.Getenv("RTRCTL_CPUPROFILE"), "%p", pid), os.Stderr)
	heapPeaks(strings.ReplaceAll(os.Getenv("RTRCTL_HEAPPROFILE"), "%p", pid), os.Stderr)
	code := run(os.Args, os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// heapPeaks writes a heap profile to path each time the heap in use
// reaches a new peak (checked twice a second), so that the file holds
// the profile at the command's peak; "" profiles nothing. It is for
// measuring (docs/benchmarks.md, "Profiling").
func heapPeaks(path string, stderr io.Writer) {
	if path == "" {
		return
	}
	go func() {
		var peak uint64
		var ms runtime.MemStats
		for range time.Tick(500 * time.Millisecond) {
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse <= peak+peak/20 {
				continue
			}
			peak = ms.HeapInuse
			f, err := os.Create(path + ".tmp")
			if err == nil {
				err = pprof.WriteHeapProfile(f)
				if cerr := f.Close(); err == nil {
					err = cerr
				}
			}
			if err == nil {
				err = os.Rename(path+".tmp", path)
			}
			if err != nil {
				fmt.Fprintf(stderr, "rtrctl: RTRCTL_HEAPPROFILE: %v\n", err)
				return
			}
		}
	}()
}

// profile writes a CPU profile of the command to path (go tool pprof
// reads it) until the returned function is called; "" profiles nothing.
// It is for measuring (docs/benchmarks.md, "Profiling").
func profile(path string, stderr io.Writer) func() {
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err == nil {
		err = pprof.StartCPUProfile(f)
	}
	if err != nil {
		fmt.Fprintf(stderr, "rtrctl: RTRCTL_CPUPROFILE: %v\n", err)
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}
}

// run executes the command line args and returns the exit status. It is
// main without os.Exit, so tests can drive it.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	ctx, stop := signalContext(stderr)
	defer stop()

	app := newApp(stdin, stdout, stderr)
	if len(args) > 1 && args[len(args)-1] == completionFlag {
		complete(app, args[1:len(args)-1], stdout)
		return exitOK
	}
	err := app.RunContext(ctx, permuteArgs(app, args))
	return exitStatus(ctx, err, stderr)
}

// signalContext returns a context cancelled by the first SIGINT or SIGTERM.
// A second signal exits at once with status 130.
func signalContext(stderr io.Writer) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case s := <-sigs:
			cancel(&interruptedError{sig: s})
		case <-done:
			return
		}
		select {
		case <-sigs:
			fmt.Fprintln(stderr, "rtrctl: second signal, exiting at once")
			os.Exit(exitInterrupted)
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		close(done)
		cancel(nil)
	}
}

type interruptedError struct{ sig os.Signal }

func (e *interruptedError) Error() string { return "interrupted by " + e.sig.String() }

// usageError is a mistake on the command line. Its hint says how to fix it.
type usageError struct {
	msg  string
	hint string
}

func (e *usageError) Error() string { return e.msg }

func usagef(hint, format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...), hint: hint}
}

// hinted is an error with a hint for the user, e.g. the exact command that
// fixes a server setting. Packages return their own hinted errors; anything
// with a Hint() string method is printed the same way.
type hinter interface{ Hint() string }

// exitStatus prints err (if any) and maps it to an exit status.
func exitStatus(ctx context.Context, err error, stderr io.Writer) int {
	if err == nil {
		return exitOK
	}
	var ie *interruptedError
	if errors.As(context.Cause(ctx), &ie) && (errors.Is(err, context.Canceled) || errors.As(err, &ie)) {
		fmt.Fprintf(stderr, "rtrctl: %v\n", ie)
		return exitInterrupted
	}
	var ue *usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(stderr, "rtrctl: %v\n", ue.msg)
		if ue.hint != "" {
			fmt.Fprintf(stderr, "hint: %s\n", ue.hint)
		}
		return exitUsage
	}
	fmt.Fprintf(stderr, "rtrctl: %v\n", err)
	var h hinter
	if errors.As(err, &h) && h.Hint() != "" {
		fmt.Fprintf(stderr, "hint: %s\n", h.Hint())
	}
	var ec interface{ ExitCode() int }
	if errors.As(err, &ec) && ec.ExitCode() != 0 {
		return ec.ExitCode()
	}
	return exitError
}

func newApp(stdin io.Reader, stdout, stderr io.Writer) *cli.App {
	app := &cli.App{
		Name:  "rtrctl",
		Usage: "change data capture with real-time recency",
		Description: `rtrctl snapshots and replicates PostgreSQL, MySQL/MariaDB and Kafka into a
local store of Arrow IPC files, keeping every change as (row, time, diff) on
one system timeline.

Data goes to stdout, logs and progress to stderr.

Exit statuses:
   0    success
   1    error
   2    usage error (bad flags or arguments)
   3    timed out waiting for recency
   130  interrupted (SIGINT/SIGTERM; a second signal exits at once)`,
		Version:                version,
		Reader:                 stdin,
		Writer:                 stdout,
		ErrWriter:              stderr,
		HideHelpCommand:        true,
		UseShortOptionHandling: true,
		Suggest:                true,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "log-level", Value: "info", Usage: "log level: debug, info, warn, error", EnvVars: []string{"RTR_LOG_LEVEL"}},
			&cli.StringFlag{Name: "log-format", Value: "text", Usage: "log format on stderr: text or json", EnvVars: []string{"RTR_LOG_FORMAT"}},
			// urfave/cli adds --help only with its own help command, which
			// helpCommand replaces.
			memoryLimitFlag,
			cli.HelpFlag,
		},
		Before: func(c *cli.Context) error {
			if err := setupMemory(c); err != nil {
				return err
			}
			return setupLogging(c, stderr)
		},
		OnUsageError: func(c *cli.Context, err error, isSubcommand bool) error {
			return &usageError{msg: err.Error(), hint: "run 'rtrctl --help' for usage"}
		},
		Action: func(c *cli.Context) error {
			if c.Args().Present() {
				return usagef("run 'rtrctl --help' for the list of commands", "unknown command %q", c.Args().First())
			}
			return cli.ShowAppHelp(c)
		},
		ExitErrHandler: func(*cli.Context, error) {}, // exit statuses are mapped in run
		Commands: []*cli.Command{
			versionCommand(),
			frontierCommand(),
			ingestCommand(),
			reclockCommand(),
			storeCommand(),
			readCommand(),
			exportCommand(),
			statusCommand(),
			devCommand(),
			snapshotCommand(),
			replicateCommand(),
			waitRecentCommand(),
			benchCommand(),
			helpCommand(),
			completionCommand(),
		},
	}
	for _, cmd := range app.Commands {
		setUsageHandler(cmd)
	}
	return app
}

// setUsageHandler makes flag errors of cmd and its subcommands usage errors.
func setUsageHandler(cmd *cli.Command) {
	name := cmd.FullName()
	cmd.OnUsageError = func(c *cli.Context, err error, isSubcommand bool) error {
		return &usageError{msg: err.Error(), hint: fmt.Sprintf("run 'rtrctl %s --help' for usage", name)}
	}
	for _, sub := range cmd.Subcommands {
		setUsageHandler(sub)
	}
}

func setupLogging(c *cli.Context, stderr io.Writer) error {
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.String("log-level"))); err != nil {
		return usagef("use one of debug, info, warn, error", "bad --log-level %q", c.String("log-level"))
	}
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler
	switch c.String("log-format") {
	case "text":
		h = slog.NewTextHandler(stderr, opts)
	case "json":
		h = slog.NewJSONHandler(stderr, opts)
	default:
		return usagef("use text or json", "bad --log-format %q", c.String("log-format"))
	}
	slog.SetDefault(slog.New(h))
	return nil
}

func versionCommand() *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print the version",
		Action: func(c *cli.Context) error {
			_, err := fmt.Fprintf(c.App.Writer, "rtrctl %s\n", version)
			return err
		},
	}
}

// permuteArgs moves a command's flags in front of its positional
// arguments, so `rtrctl read DIR COLL --as-of T` works like
// `rtrctl read --as-of T DIR COLL` (urfave/cli stops parsing flags at the
// first positional argument). Everything after "--" stays positional.
func permuteArgs(app *cli.App, args []string) []string {
	if len(args) < 2 {
		return args
	}
	out := []string{args[0]}
	i := 1
	// Global flags, then the command path.
	for i < len(args) && strings.HasPrefix(args[i], "-") {
		out = append(out, args[i])
		if takesValue(app.Flags, args[i]) && i+1 < len(args) {
			i++
			out = append(out, args[i])
		}
		i++
	}
	cmds := app.Commands
	var cmd *cli.Command
	for i < len(args) {
		next := findCommand(cmds, args[i])
		if next == nil {
			break
		}
		cmd = next
		out = append(out, args[i])
		cmds = cmd.Subcommands
		i++
	}
	if cmd == nil {
		return append(out, args[i:]...)
	}
	var flags, pos []string
	for ; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			pos = append(pos, args[i:]...)
			i = len(args)
		case strings.HasPrefix(a, "-") && a != "-":
			flags = append(flags, a)
			if takesValue(cmd.Flags, a) && i+1 < len(args) {
				i++
				flags = append(flags, args[i])
			}
		default:
			pos = append(pos, a)
		}
	}
	return append(append(out, flags...), pos...)
}

func findCommand(cmds []*cli.Command, name string) *cli.Command {
	for _, c := range cmds {
		if c.Name == name || slices.Contains(c.Aliases, name) {
			return c
		}
	}
	return nil
}

// takesValue reports whether the flag token a (e.g. "--as-of", "-o") names
// a flag that takes a separate value.
func takesValue(flags []cli.Flag, a string) bool {
	name := strings.TrimLeft(a, "-")
	if strings.Contains(name, "=") {
		return false
	}
	for _, f := range flags {
		if slices.Contains(f.Names(), name) {
			_, isBool := f.(*cli.BoolFlag)
			return !isBool
		}
	}
	return false
}
