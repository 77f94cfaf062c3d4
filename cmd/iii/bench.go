package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/iii-on-nats/iii/bench"
)

// newBenchCmd is `iii bench`: benchmarks that run a whole node in this
// process. Hook it in with root.AddCommand(newBenchCmd(g)).
func newBenchCmd(g *globals) *cobra.Command {
	cmd := group(&cobra.Command{
		Use:   "bench",
		Short: "Benchmark the turn loop on an embedded node",
	})
	cmd.AddCommand(newBenchTurnsCmd(g))
	return cmd
}

func newBenchTurnsCmd(g *globals) *cobra.Command {
	var (
		cfg          bench.Config
		asJSON       bool
		quiet        bool
		profile      string
		heapProfile  string
		localCalls   = true
		heapFloorMiB int // --heap-floor-mib, as for iii up (0: off)
	)
	cmd := &cobra.Command{
		Use:   "turns",
		Short: "Run sessions × turns through the turn loop and report turns/s, latency, memory and KV puts/s",
		Long: "Starts an embedded single node (file storage, in a temporary directory unless --dir) with the scripted\n" +
			"provider, a no-op tool bench::noop and the orchestrator, all in this process. Each of --sessions sessions\n" +
			"runs --turns turns one after the other; a turn is the user message \"/call bench::noop {}\": a model call\n" +
			"that calls the tool, the function call, and a model call that answers. Then it measures raw JetStream KV\n" +
			"puts/s on the same server, so a turn reads as so many KV-put equivalents, and the storage floors: the same\n" +
			"sessions × turns making only a turn's stored writes (as the harness makes them today, the fewest today's\n" +
			"contracts allow, a lean turn), so the turns read as a share of what storage alone allows (--no-floor skips\n" +
			"them). With --idle K it also activates\n" +
			"K sessions of one turn each and reports the memory they hold right after their turn, --idle-settle later\n" +
			"(their grains still active, what their turns left in the server expired) and after they passivate.\n" +
			"Memory figures are of the whole process (server included). The machine's load average is reported: on a\n" +
			"shared machine, compare runs taken under the same load.\n\n" +
			"With --nodes N (N > 1) it starts N servers in one NATS cluster on loopback, each with the whole worker set\n" +
			"(the orchestrators share the session grains as one grain cluster), spreads the sessions' run::start calls\n" +
			"over the nodes and watches the events on node 1; streams and buckets get --replicas replicas (default 3\n" +
			"on 3 or more nodes, else 1). With --nodes 3 or more and no --replicas it runs twice, R1 then R3, each on\n" +
			"fresh servers, and prints both results and the R1/R3 turns/s ratio (--cpuprofile profiles the R3 run).",
		Example: `  iii bench turns --sessions 100 --turns 10
  iii bench turns --sessions 1 --turns 500 --json
  iii bench turns --sessions 100 --turns 10 --idle 2000 --idle-timeout 5s
  iii bench turns --sessions 50 --turns 5 --nodes 3 -q
  iii bench turns --sessions 50 --turns 5 --nodes 3 --replicas 1 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) (rerr error) {
			// The bench runs its own nodes and bounds a turn with
			// --turn-timeout: the client commands' flags would change
			// nothing.
			if f := cmd.Flags().Lookup("nats"); f != nil && f.Changed {
				return fmt.Errorf("--nats is for the client commands: iii bench turns runs its own nodes")
			}
			if err := refuseClientTimeout(cmd, "iii bench turns (--turn-timeout bounds a turn)"); err != nil {
				return err
			}
			cfg.BusCalls = !localCalls
			if err := checkHeapFloor(heapFloorMiB); err != nil {
				return err
			}
			cfg.HeapFloorMiB = heapFloorMiB
			if heapFloorMiB == 0 {
				cfg.HeapFloorMiB = -1 // bench.Config: 0 is the default, < 0 off
			}
			if !quiet {
				logger, err := g.logger()
				if err != nil {
					return err
				}
				cfg.Logger = logger
			}
			// Refuse what the bench would refuse, and a profile of a phase
			// that does not run, before a profile file is touched.
			if err := cfg.Validate(); err != nil {
				return err
			}
			if profile != "" && cfg.Sessions == 0 {
				return fmt.Errorf("--cpuprofile profiles the turns phase, which --sessions 0 skips")
			}
			if heapProfile != "" && cfg.Idle == 0 {
				return fmt.Errorf("--memprofile profiles the idle phase: it needs --idle")
			}
			for _, p := range []struct {
				path string
				to   *io.Writer
			}{{profile, &cfg.CPUProfile}, {heapProfile, &cfg.HeapProfile}} {
				if p.path == "" {
					continue
				}
				f, err := createProfile(p.path)
				if err != nil {
					return err
				}
				defer func() {
					if ferr := f.finish(); ferr != nil && rerr == nil {
						rerr = ferr
					}
				}()
				*p.to = f
			}
			var (
				res interface{ WriteTable(io.Writer) error }
				err error
			)
			if cfg.Nodes >= 3 && !cmd.Flags().Changed("replicas") {
				res, err = bench.CompareReplicas(cmd.Context(), cfg)
			} else {
				res, err = bench.Run(cmd.Context(), cfg)
			}
			if err != nil && !errors.Is(err, bench.ErrTurnFailed) {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				body, merr := json.MarshalIndent(res, "", "  ")
				if merr != nil {
					return merr
				}
				if _, werr := fmt.Fprintln(out, string(body)); werr != nil {
					return werr
				}
			} else if werr := res.WriteTable(out); werr != nil {
				return werr
			}
			return err
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Sessions, "sessions", 100, "sessions running turns concurrently (0: skip the turns and KV phases)")
	f.IntVar(&cfg.Turns, "turns", 10, "turns per session, one after the other")
	f.IntVar(&cfg.Idle, "idle", 0, "sessions to activate for the idle-memory phase (0: skip)")
	f.DurationVar(&cfg.IdleTimeout, "idle-timeout", 0, "grain passivation after idle (default 10s + 5ms per --idle session + --idle-settle)")
	f.DurationVar(&cfg.IdleSettle, "idle-settle", bench.DefaultIdleSettle, "also measure the idle sessions this long after their activation, grains still active (0: skip)")
	f.IntVar(&cfg.KVWriters, "kv-writers", bench.DefaultKVWriters, "concurrent writers of the KV put phase")
	f.IntVar(&cfg.KVPuts, "kv-puts", bench.DefaultKVPuts, "puts of the KV put phase in all")
	f.IntVar(&cfg.KVValueSize, "kv-value-size", bench.DefaultKVValueSize, "bytes per KV put")
	f.BoolVar(&cfg.SkipKV, "no-kv", false, "skip the KV put phase")
	f.BoolVar(&cfg.SkipFloor, "no-floor", false, "skip the storage floors (the same sessions × turns making only a turn's stored writes)")
	f.DurationVar(&cfg.AckWait, "ack-wait", bench.DefaultAckWait, "the orchestrator's turn-step ack wait")
	f.DurationVar(&cfg.TurnTimeout, "turn-timeout", bench.DefaultTurnTimeout, "give up on a turn after this long")
	f.IntVar(&cfg.DeltaSize, "delta-size", 0, "largest delta of the scripted provider in bytes (0: its default)")
	f.BoolVar(&cfg.TCP, "tcp", false, "connect over loopback TCP instead of in-process connections")
	f.BoolVar(&cfg.Traces, "traces", false, "trace as iii up does: every engine exports its spans to the trace store")
	f.BoolVar(&cfg.NoContinuation, "no-continuation", false, "every model call sends the whole transcript (no transcript continuations)")
	addHeapFloorFlag(f, &heapFloorMiB)
	f.BoolVar(&localCalls, "local-calls", true, "calls between the stack's workers skip the bus, as in iii up (=false: over the bus); the client is on the bus either way")
	f.BoolVar(&cfg.SharedConn, "shared-conn", false, "run the orchestrator, the provider, the tool, the policy and the session tree on one connection (default: one each, as in iii up)")
	f.IntVar(&cfg.Nodes, "nodes", 1, "servers in one NATS cluster, each with the whole worker set")
	f.IntVar(&cfg.Replicas, "replicas", 0, "replicas of every stream and bucket (default 3 on 3+ nodes, else 1; unset on 3+ nodes: run R1 and R3)")
	f.StringVar(&cfg.Dir, "dir", "", "JetStream store directory (default: a temporary one, removed afterwards)")
	f.StringVar(&profile, "cpuprofile", "", "write a CPU profile of the turns phase to this file (a run that profiles nothing leaves it as it was)")
	f.StringVar(&heapProfile, "memprofile", "", "write a heap profile of the idle phase, its sessions active, to this file (with --idle)")
	f.BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	f.BoolVarP(&quiet, "quiet", "q", false, "drop the stack's log (warnings are still counted)")
	return cmd
}

// profileFile receives a profile in a temporary file beside path, renamed
// to path once the bench wrote a profile into it and removed otherwise:
// a run that fails before its profile (a stack that does not start, a
// failed warm-up) neither truncates an earlier profile at path nor leaves
// an empty one.
type profileFile struct {
	path string
	f    *os.File
	n    int64
}

func createProfile(path string) (*profileFile, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return nil, err
	}
	return &profileFile{path: path, f: f}, nil
}

func (p *profileFile) Write(b []byte) (int, error) {
	n, err := p.f.Write(b)
	p.n += int64(n)
	return n, err
}

// finish closes the profile and moves it to its path when one was
// written; the error says a written profile could not be kept.
func (p *profileFile) finish() error {
	err := p.f.Close()
	if err == nil && p.n > 0 {
		if err = os.Rename(p.f.Name(), p.path); err == nil {
			return nil
		}
	}
	_ = os.Remove(p.f.Name())
	if p.n == 0 {
		return nil // nothing profiled: the run's own error says why
	}
	return fmt.Errorf("profile %s: %w", p.path, err)
}
